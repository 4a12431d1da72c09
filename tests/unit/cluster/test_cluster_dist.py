"""gputopo cluster in real ranks: two torchrun "nodes" on localhost (gloo, cpu fabric), a hung
rank named by host and rank, and the srun variables with plain processes (three nodes, pairwise).

Every launch is wrapped in ``timeout -k``: a healthy torchrun can wait up to 300 s in its exit
barrier, and a test must never hang. A return code of 124/137 means the job did not end by
itself within that bound (what the assertions below rule out).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.launch import free_port, rank_env

from helpers.paths import TESTS

HELPER = TESTS / "helpers" / "cluster_fault_rank.py"
BOUND_S = 150  # the outer bound of every launch; jobs here end far sooner
#: A traceback frame in gputopo's own package (the checkout's gputopo/, or an installed one), not
#: in a virtual environment inside a checkout that is itself named gputopo (`git clone` names it
#: so, and torchrun's frames in .venv/.../torch/ then matched a plain ".*gputopo/").
GPUTOPO_FRAME = r'File "[^"]*/gputopo/(?!\.venv/)[^"]*"'
pytestmark = [pytest.mark.slow, pytest.mark.serial]  # serial: wall-time bounds


def _torchrun(tmp_path, args, names=("alpha", "beta"), fault=None):
    port = free_port()
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    target = [str(HELPER)] if fault else ["-m", "gputopo"]
    procs = []
    for name in names:
        env = rank_env(GPUTOPO_NODE_NAME=name, **({"GPUTOPO_TEST_FAULT": fault} if fault else {}))
        cmd = ["timeout", "-k", "5", str(BOUND_S), torchrun, "--nnodes", "2", "--nproc-per-node", "2",
               "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "t",
               "--monitor-interval", "0.5", *target, "cluster", "--fabric", "cpu", "--size", "256K",
               "--samples", "2", "--out", str(tmp_path / "run"), *args]
        procs.append(subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate()[0] for p in procs]
    return [p.returncode for p in procs], "\n".join(outs)


def test_two_torchrun_nodes_make_one_run_folder(tmp_path):
    codes, out = _torchrun(tmp_path, ["--timeout", "60"])
    assert codes == [0, 0], out[-3000:]
    run = tmp_path / "run"
    doc = json.loads((run / "cluster.json").read_text())
    assert sorted(n["name"] for n in doc["nodes"]) == ["alpha", "beta"]
    assert sorted(len(n["ranks"]) for n in doc["nodes"]) == [2, 2]
    assert doc["launcher"] == "torchrun" and doc["fabric"] == "cpu" and doc["time_source"] == "wall"
    inter = [g for r in doc["rounds"] if r["phase"] == "inter" for g in r["groups"]]
    assert len(inter) == 1 and inter[0]["busbw_gbps"] > 0 and inter[0]["gpus"] == 4
    assert inter[0]["timing"] == "wall" and inter[0]["error"] is None
    assert inter[0]["one_gpu_busbw_gbps"] > 0  # local rank 0 of each node alone
    intra = [n["intra"] for n in doc["nodes"]]
    assert all(i["busbw_gbps"] > 0 and i["gpus"] == 2 for i in intra)
    assert len(list((run / "ranks").glob("*.jsonl"))) == 4  # one per rank
    for name in ("alpha", "beta"):
        assert (run / "nodes" / name / "node.json").exists()
        assert (run / "nodes" / name / "topology.json").exists()
    md = (run / "report.md").read_text()
    assert "| alpha |" in md and "| beta |" in md
    assert json.loads((run / "run.json").read_text())["status"] == "complete"
    assert (run / "drain.txt").read_text() == ""


def test_hung_rank_is_named_by_host_and_rank(tmp_path):
    codes, out = _torchrun(tmp_path, ["--timeout", "4"], names=("alpha", "beta"), fault="hang:3")
    assert not set(codes) & {124, 137}, out[-3000:]  # ended by itself, not by the outer bound
    assert set(codes) != {0}
    doc = json.loads((tmp_path / "run" / "cluster.json").read_text())
    host = next(n["name"] for n in doc["nodes"] if 3 in n["ranks"])
    hang = [f for f in doc["findings"] if f["kind"] == "hang"]
    assert len(hang) == 1 and hang[0]["evidence"]["node"] == host and hang[0]["evidence"]["ranks"] == [3]
    assert f"node {host} rank(s) 3" in out
    assert (tmp_path / "run" / "drain.txt").read_text().startswith(f"{host} gputopo: hang node ")
    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "failed"


def _no_orphans(tmp_path) -> list:
    """Processes of this test's launch still running (their command line names its folder)."""
    ps = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    return [ln for ln in ps.splitlines() if str(tmp_path) in ln and "ps -eo" not in ln]


@pytest.mark.parametrize("fault", ["crash:0", "stop:0"])
def test_lost_rank_0_is_named_by_the_lowest_live_rank(tmp_path, fault):
    """Rank 0 SIGKILLed or SIGSTOPped at the first inter-node round: no rank 0 to write, so the
    lowest live rank writes cluster.json, the report and a failed status naming rank 0."""
    t0 = time.monotonic()
    codes, out = _torchrun(tmp_path, ["--timeout", "5"], fault=fault)
    wall = time.monotonic() - t0
    assert not set(codes) & {124, 137}, out[-3000:]  # ended by itself, not by the outer bound
    assert set(codes) != {0}
    # start-up, three --timeout periods, and torchrun's 30 s before it SIGKILLs a stopped rank
    assert wall < 3 * 5 + 30 + 45, (wall, out[-3000:])
    run = tmp_path / "run"
    doc = json.loads((run / "cluster.json").read_text())
    host = next(n["name"] for n in doc["nodes"] if 0 in n["ranks"])
    assert doc["lost"][0]["rank"] == 0 and doc["lost"][0]["node"] == host
    assert doc["written_by_rank"] > 0
    crash = [f for f in doc["findings"] if f["kind"] == "crash"]
    assert crash and crash[0]["evidence"]["node"] == host and 0 in crash[0]["evidence"]["ranks"]
    assert f"node {host} rank(s) 0" in out and f"node {host} rank(s) 0" in (run / "report.md").read_text()
    assert (run / "drain.txt").read_text().startswith(f"{host} gputopo: crash node ")
    assert json.loads((run / "run.json").read_text())["status"] == "failed"
    assert not re.search(GPUTOPO_FRAME, out), out[-3000:]  # torchrun's own tracebacks only
    assert all(len(ln) < 400 for ln in out.splitlines() if ln.startswith("gputopo"))
    assert not _no_orphans(tmp_path)


def test_stopped_rank_1_is_named_within_the_timeout(tmp_path):
    """SIGSTOP of rank 1: found when --timeout runs out (not the default 120 s), rank 0 writes."""
    t0 = time.monotonic()
    codes, out = _torchrun(tmp_path, ["--timeout", "5"], fault="stop:1")
    wall = time.monotonic() - t0
    assert not set(codes) & {124, 137}, out[-3000:]
    assert wall < 3 * 5 + 30 + 45, (wall, out[-3000:])
    doc = json.loads((tmp_path / "run" / "cluster.json").read_text())
    assert [r["rank"] for r in doc["lost"]] == [1] and "written_by_rank" not in doc
    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "failed"
    assert not _no_orphans(tmp_path)


def test_srun_variables_with_plain_processes(tmp_path):
    port = free_port()
    procs = []
    for rank in range(3):  # three one-rank nodes, pairwise: each node sits out one round
        env = rank_env(SLURM_PROCID=str(rank), SLURM_NTASKS="3", SLURM_LOCALID="0",
                   SLURM_TASKS_PER_NODE="1(x3)", SLURM_JOB_NODELIST="localhost",
                   MASTER_PORT=str(port), GPUTOPO_NODE_NAME=f"n{rank}")
        cmd = ["timeout", "-k", "5", str(BOUND_S), sys.executable, "-m", "gputopo", "cluster",
               "--fabric", "cpu", "--size", "256K", "--samples", "2", "--timeout", "60",
               "--pattern", "pairwise", "--out", str(tmp_path / "run")]
        procs.append(subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate()[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], "\n".join(outs)[-3000:]
    doc = json.loads((tmp_path / "run" / "cluster.json").read_text())
    assert doc["launcher"] == "slurm" and [n["name"] for n in doc["nodes"]] == ["n0", "n1", "n2"]
    assert all(n["intra"]["na"] for n in doc["nodes"])  # one rank per node: nothing intra-node
    pairs = sorted(tuple(g["nodes"]) for r in doc["rounds"] if r["phase"] == "inter" for g in r["groups"])
    assert doc["rounds_inter"] == 3 and pairs == [(0, 1), (0, 2), (1, 2)] and "3 nodes" in outs[0]
    assert all(g["busbw_gbps"] > 0 for r in doc["rounds"] if r["phase"] == "inter" for g in r["groups"])
    # each round's groups were shut down (real gloo groups, shutdown()) once every rank reported
    # it: a rank holds at most the round's own two (all-GPU, one-GPU) when it writes its record
    recs = [json.loads(ln) for f in (tmp_path / "run" / "ranks").glob("*.jsonl")
            for ln in f.read_text().splitlines()]
    assert recs and all(r["shutdown_stuck"] == 0 and r["data_groups_alive"] <= 2 for r in recs)
    assert max(r["data_groups_alive"] for r in recs) == 2


def test_cuda_fabric_without_a_gpu_is_exit_3_on_every_rank(tmp_path):
    env = rank_env(SLURM_PROCID="0", SLURM_NTASKS="1", SLURM_LOCALID="0", SLURM_JOB_NODELIST="localhost",
               MASTER_PORT=str(free_port()), CUDA_VISIBLE_DEVICES="")
    p = subprocess.run(["timeout", "-k", "5", str(BOUND_S), sys.executable, "-m", "gputopo", "cluster",
                        "--out", str(tmp_path / "run")], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 3, p.stderr
    assert "gputopo: error: rank 0" in p.stderr and "--fabric cpu" in p.stderr
    assert "Traceback" not in p.stderr


def test_a_message_larger_than_memory_is_refused_before_the_rendezvous(tmp_path):
    """`--size 1T` on a real launch: every rank would fail to allocate it, and the run used to
    read that as a SLOW-NODE error on a healthy node (exit 0). Refused in one line, exit 2,
    before any rank waits for the others, and no run folder."""
    env = rank_env(SLURM_PROCID="0", SLURM_NTASKS="1", SLURM_LOCALID="0", SLURM_JOB_NODELIST="localhost",
               MASTER_PORT=str(free_port()))
    p = subprocess.run(["timeout", "-k", "5", str(BOUND_S), sys.executable, "-m", "gputopo", "cluster",
                        "--fabric", "cpu", "--size", "1T", "--out", str(tmp_path / "run")],
                       env=env, cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "--size 1T does not fit in host memory" in lines[0], p.stderr
    assert "rank 0" in lines[0] and "smaller --size" in lines[0]
    assert not (tmp_path / "run").exists()
