"""Issue 33, items 2, 3 and 7: `gputopo cluster` ranks that fail, in real processes on the cpu
fabric (srun-style variables, plain processes; torchrun for the signals).

- A rank that fails fast (raises, or cannot allocate its buffer) is that rank's error: its group
  peers waited for it and are neither hung nor drained (they used to time out, arrive late at
  the liveness barrier, and be named hung while the failing node went unnamed).
- After a rank's error, later groups with that rank still form (torch named a locally
  synchronised group after how many groups the process had, so one skipped group broke them all).
- Under torchrun, a rank killed or SIGTERMed mid-run still leaves cluster.json, drain.txt and
  the report, naming that rank (rank 0 used to die with it, SIGTERMed by its agent).

Every launch is wrapped in ``timeout -k``: 124/137 means the job did not end by itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.launch import free_port, rank_env

from helpers.paths import TESTS

HELPER = TESTS / "helpers" / "cluster_fault_rank.py"
BOUND_S = 150
pytestmark = [pytest.mark.slow, pytest.mark.serial]  # serial: wall-time bounds


def _srun(tmp_path, nodes, args, fault=None, limit_kb=None, timeout_s=20):
    """``nodes`` one-rank nodes n0, n1, ... as srun would start them; node 0's address space
    capped at ``limit_kb`` (ulimit -v) when given. Returns (exit codes, output, wall seconds)."""
    port = free_port()
    procs = []
    t0 = time.monotonic()
    for rank in range(nodes):
        env = rank_env(SLURM_PROCID=str(rank), SLURM_NTASKS=str(nodes), SLURM_LOCALID="0",
                   SLURM_TASKS_PER_NODE=f"1(x{nodes})", SLURM_JOB_NODELIST="localhost",
                   MASTER_PORT=str(port), GPUTOPO_NODE_NAME=f"n{rank}",
                   **({"GPUTOPO_TEST_FAULT": fault} if fault else {}))
        cmd = ["timeout", "-k", "5", str(BOUND_S), sys.executable,
               *([str(HELPER)] if fault else ["-m", "gputopo"]), "cluster", "--fabric", "cpu",
               "--samples", "2", "--timeout", str(timeout_s), "--pattern", "pairwise",
               "--out", str(tmp_path / "run"), *args]
        if limit_kb is not None and rank == 0:
            cmd = ["bash", "-c", f'ulimit -v {limit_kb} && exec "$@"', "bash", *cmd]
        procs.append(subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate()[0] for p in procs]
    return [p.returncode for p in procs], "\n".join(outs), time.monotonic() - t0


def _doc(tmp_path):
    return json.loads((tmp_path / "run" / "cluster.json").read_text())


def _inter(doc):
    return {tuple(g["nodes"]): g for r in doc["rounds"] if r["phase"] == "inter" for g in r["groups"]}


def _kinds(doc):
    return sorted(f["kind"] for f in doc["findings"])


def test_a_rank_that_raises_is_its_own_error_not_a_hang_of_its_peer(tmp_path):
    """Rank 2 raises once in round 2 (pairwise, 3 one-rank nodes): its partner was waiting in
    the all_reduce. Before: `HANG: node n? rank(s) ? stopped answering` for the partner, drained,
    after --timeout; node n2 never named. Now: a rank-error on n2, nobody hung, no waiting out
    --timeout, and round 3 (n2 with another node) measured."""
    codes, out, wall = _srun(tmp_path, 3, ["--size", "256K"], fault="raise:2:2")
    assert not set(codes) & {124, 137}, out[-3000:]
    doc = _doc(tmp_path)
    assert doc["lost"] == [] and "hang" not in _kinds(doc) and "crash" not in _kinds(doc), doc["findings"]
    (err,) = [f for f in doc["findings"] if f["kind"] == "rank-error"]
    assert err["evidence"]["node"] == "n2" and err["evidence"]["ranks"] == [2]
    assert "injected fault" in err["message"] and err["evidence"]["rounds"] == ["inter-node round 2"]
    drained = [ln.split()[0] for ln in (tmp_path / "run" / "drain.txt").read_text().splitlines()]
    assert drained == ["n2"]  # the failing node only (its partner only waited)
    groups = _inter(doc)
    failed = [g for g in groups.values() if g["rank_errors"]]
    assert len(failed) == 1 and [e["rank"] for e in failed[0]["rank_errors"]] == [2]
    assert all(g["busbw_gbps"] > 0 for g in groups.values() if not g["rank_errors"])  # later rounds too
    assert doc["rounds_inter"] == 3
    assert wall < 20, (wall, out[-2000:])  # the partner stopped waiting at once, not at --timeout


def test_both_members_failing_once_do_not_break_later_groups(tmp_path):
    """Both members of round 2's group raise once. Before: round 3 failed to form (DistStoreError:
    the two members hashed different group names) and healthy nodes were drained. Now: round 3
    is measured; the failing ranks are rank-errors (the one that failed first, or both when
    neither knew of the other's), both errors are in the group's record."""
    codes, out, _ = _srun(tmp_path, 3, ["--size", "256K"], fault="raise:all:2")
    assert not set(codes) & {124, 137}, out[-3000:]
    doc = _doc(tmp_path)
    assert doc["lost"] == [] and doc["rounds_inter"] == 3, doc["findings"]
    rounds = {r["round"]: r["groups"] for r in doc["rounds"] if r["phase"] == "inter"}
    (second,) = rounds[2]
    blamed = {e["rank"] for e in second["rank_errors"]}
    assert blamed and blamed <= set(second["nodes"]) and second["error"].count("injected fault") == 2
    (third,) = rounds[3]
    assert third["error"] is None and third["busbw_gbps"] > 0, third
    errs = sorted(f["evidence"]["node"] for f in doc["findings"] if f["kind"] == "rank-error")
    assert errs == sorted(f"n{k}" for k in blamed)
    # (a slow link between the measured pairs may be this shared CPU's noise: not judged here)
    assert not [f for f in doc["findings"] if f["kind"] in ("hang", "crash")] and not second["slow"]
    drained = [ln.split()[0] for ln in (tmp_path / "run" / "drain.txt").read_text().splitlines()]
    assert drained == errs


def test_a_rank_whose_first_collective_never_returns_is_named_within_the_timeout(tmp_path):
    """Rank 2's data group's first all_reduce call never returns in round 2 (as NCCL's lazy
    communicator set-up or first-use connect on a fabric that never answers). Before: the call
    ran on the rank's main thread without a bound; the rank (and, on cuda, every member stuck
    with it) never reached the liveness barrier. Now: the call is bounded by the round's
    --timeout, rank 2 is a rank-error naming its rank and host, its partner only waited, round 3
    is measured, every process ends (the stuck thread with its process), results on disk."""
    codes, out, wall = _srun(tmp_path, 3, ["--size", "256K"], fault="connecthang:2:2", timeout_s=10)
    assert not set(codes) & {124, 137}, out[-3000:]
    doc = _doc(tmp_path)
    assert doc["lost"] == [] and doc["rounds_inter"] == 3, doc["findings"]
    (err,) = [f for f in doc["findings"] if f["kind"] == "rank-error"]
    assert err["evidence"]["node"] == "n2" and err["evidence"]["ranks"] == [2], err
    assert "first all_reduce (1 element) did not return within --timeout 10 s" in err["message"], err
    assert err["evidence"]["rounds"] == ["inter-node round 2"]
    assert not [f for f in doc["findings"] if f["kind"] in ("hang", "crash")]
    drained = [ln.split()[0] for ln in (tmp_path / "run" / "drain.txt").read_text().splitlines()]
    assert drained == ["n2"]
    rounds = {r["round"]: r["groups"] for r in doc["rounds"] if r["phase"] == "inter"}
    assert all(g["busbw_gbps"] > 0 for g in rounds[3] if len(g["nodes"]) > 1)
    assert wall < 10 + 60, (wall, out[-2000:])


def test_a_node_that_cannot_allocate_its_buffers_is_the_finding(tmp_path):
    """Node n0's address space is capped (ulimit -v) below what its 512 MiB message needs; n1
    and n2 are healthy. Before: n1 and n2 drained as hung, n0 never named. Now: n0's
    out-of-memory is the finding, drain.txt names nobody (memory taken is no drain reason), and
    n1 with n2 is measured."""
    codes, out, wall = _srun(tmp_path, 3, ["--size", "512M"], limit_kb=2_400_000, timeout_s=30)
    assert not set(codes) & {124, 137}, out[-3000:]
    doc = _doc(tmp_path)
    assert doc["lost"] == [] and not [f for f in doc["findings"] if f["kind"] in ("hang", "crash")], \
        doc["findings"]
    mem = [f for f in doc["findings"] if f["kind"] == "out-of-memory"]
    assert [f["evidence"]["node"] for f in mem] == ["n0"], doc["findings"]
    assert sorted(mem[0]["evidence"]["waited"]) == ["n1", "n2"]
    assert (tmp_path / "run" / "drain.txt").read_text() == ""
    groups = _inter(doc)
    assert groups[(1, 2)]["busbw_gbps"] > 0 and not groups[(1, 2)]["rank_errors"]
    for pair in ((0, 1), (0, 2)):
        assert [e["node"] for e in groups[pair]["rank_errors"]] == ["n0"] and not groups[pair]["slow"]
    # n0's own log says so; its partners' say whose failure they waited on
    n1 = [json.loads(ln) for ln in (tmp_path / "run" / "ranks" / "n1-rank00001.jsonl").read_text().splitlines()]
    assert any("rank 0 (n0)" in (r.get("peer_failed") or "") for r in n1)
    assert wall < 60, wall


def _torchrun(tmp_path, fault="none:-1", nproc=1, args=("--size", "256K", "--samples", "2", "--timeout", "10"),
              during=None):
    """Two torchrun "nodes", alpha first (its agent hosts the rendezvous store, and rank 0 is
    there); ``during(pid_dir)`` runs while they do. Returns (exit codes, output, wall seconds)."""
    port = free_port()
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    pids = tmp_path / "pids"
    pids.mkdir()
    procs = []
    t0 = time.monotonic()
    for name in ("alpha", "beta"):
        env = rank_env(GPUTOPO_NODE_NAME=name, GPUTOPO_TEST_FAULT=fault, GPUTOPO_TEST_PIDDIR=str(pids))
        cmd = ["timeout", "-k", "5", str(BOUND_S), torchrun, "--nnodes", "2", "--nproc-per-node", str(nproc),
               "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "t",
               "--monitor-interval", "0.5", str(HELPER), "cluster", "--fabric", "cpu",
               "--out", str(tmp_path / "run"), *args]
        procs.append(subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
        time.sleep(0.5)
    if during is not None:
        during(pids)
    outs = [p.communicate()[0] for p in procs]
    return [p.returncode for p in procs], "\n".join(outs), time.monotonic() - t0


def _host_of(doc, rank):
    return next(n["name"] for n in doc["nodes"] if rank in n["ranks"])


def test_torchrun_rank_1_sigtermed_mid_run_is_named_by_rank_0(tmp_path):
    """SIGTERM to rank 1 (the other node) in the first inter-node round. Before: rank 0 was
    stopped too ("gputopo: aborted"): rounds.jsonl and run.json "running", no cluster.json, no
    report. Now: rank 0 writes everything, naming rank 1 as stopped (not drained), status
    interrupted."""
    codes, out, _ = _torchrun(tmp_path, "term:1")
    assert not set(codes) & {124, 137}, out[-3000:]
    run = tmp_path / "run"
    assert (run / "cluster.json").exists() and (run / "report.md").exists(), out[-3000:]
    doc = _doc(tmp_path)
    host = _host_of(doc, 1)
    assert [(r["rank"], r["node"], r["state"]) for r in doc["lost"]] == [(1, host, "stopped")]
    (stop,) = [f for f in doc["findings"] if f["kind"] == "stopped"]
    assert stop["evidence"]["node"] == host and "SIGTERM" in stop["message"]
    assert f"node {host} rank(s) 1" in (run / "report.md").read_text()
    assert (run / "drain.txt").read_text() == ""  # a signal is no reason to drain a node
    assert json.loads((run / "run.json").read_text())["status"] == "interrupted"
    assert [r["phase"] for r in doc["rounds"]] == ["intra", "inter"]  # both rounds kept


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGTERM", "SIGKILL+agent"])
def test_torchrun_rank_1_signalled_mid_collective_is_named(tmp_path, sig):
    """SIGKILL or SIGTERM to rank 1 (the other node) from outside, during the inter-node
    all_reduce (--timeout 45): rank 1's agent ends the job, and rank 0's agent SIGTERMs rank 0
    (SIGKILL 30 s later) when it learns so; "+agent": that SIGTERM reaches rank 0 at once.
    Before: a rank 0 SIGTERMed before it had written died ("gputopo: aborted"), leaving
    rounds.jsonl, ranks/ and a "running" run.json, no cluster.json, drain.txt or report; a
    SIGTERMed rank 1 was drained as crashed. Now: a SIGTERM only sets a flag; rank 0 names rank 1
    (stopped, or gone) and writes, within the grace."""
    import signal

    def kill_rank_1(pids):
        end = time.monotonic() + 90
        while not (tmp_path / "run" / "rounds.jsonl").exists() and time.monotonic() < end:
            time.sleep(0.05)
        time.sleep(1.0)  # the inter-node round's samples (400 x 8 MiB) are under way
        os.kill(int((pids / "rank1.pid").read_text()), getattr(signal, sig.split("+")[0]))
        if sig.endswith("+agent"):
            os.kill(int((pids / "rank0.pid").read_text()), signal.SIGTERM)

    codes, out, wall = _torchrun(tmp_path, args=("--size", "8M", "--samples", "400", "--timeout", "45"),
                                 during=kill_rank_1)
    assert not set(codes) & {124, 137}, out[-3000:]
    run = tmp_path / "run"
    assert (run / "cluster.json").exists() and (run / "report.md").exists(), out[-3000:]
    doc = _doc(tmp_path)
    host = _host_of(doc, 1)
    assert [r["rank"] for r in doc["lost"]] == [1] and doc["lost"][0]["node"] == host, doc["lost"]
    assert f"node {host} rank(s) 1" in (run / "report.md").read_text()
    drained = [ln.split()[0] for ln in (run / "drain.txt").read_text().splitlines()]
    if sig.startswith("SIGKILL"):
        assert drained == [host] and doc["lost"][0]["state"] == "crash"
        assert json.loads((run / "run.json").read_text())["status"] == "failed"
    else:  # stopped by a signal: named, not drained
        assert drained == [] and doc["lost"][0]["state"] == "stopped" and "SIGTERM" in doc["lost"][0]["message"]
        assert json.loads((run / "run.json").read_text())["status"] == "interrupted"


def test_torchrun_neighbour_of_rank_0_killed_is_named(tmp_path):
    """Two ranks per node; rank 1 (rank 0's neighbour) SIGKILLed as the inter-node round starts:
    rank 0's own agent SIGTERMs it at once. Whoever survives writes cluster.json, the report and
    drain.txt naming that node only."""
    codes, out, _ = _torchrun(tmp_path, "crash:1", nproc=2)
    assert not set(codes) & {124, 137}, out[-3000:]
    run = tmp_path / "run"
    assert (run / "cluster.json").exists() and (run / "drain.txt").exists(), out[-3000:]
    doc = _doc(tmp_path)
    host = _host_of(doc, 1)
    assert 1 in {r["rank"] for r in doc["lost"]} and {r["node"] for r in doc["lost"]} == {host}, doc["lost"]
    assert [ln.split()[0] for ln in (run / "drain.txt").read_text().splitlines()] == [host]
    assert json.loads((run / "run.json").read_text())["status"] == "failed"
