"""`gputopo bench` and `gputopo numerics` end to end, as a user runs them: `python -m gputopo`
in a subprocess, exit codes, stdout/stderr, and the run folder left on disk.

The seed story (README.md's worked example) is benchmarked once for the module on three pairs of `seed-8gpu`:
5,6 (NODE) and 3,4 (SYS), where peer copies corrupt and DataParallel goes NaN or diverges, and
6,7 (NV4), which stays clean; every test below reads that one run.
Everything that starts worker processes is marked slow.
"""

from __future__ import annotations

import csv
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import wait_for_first_line

import helpers.cli
from helpers.cli import cli_env

SEED_PAIRS = ("3,4", "5,6", "6,7")
BROKEN = [(3, 4), (5, 6)]  # every PCIe pair of seed-8gpu corrupts peer DMA (NODE and SYS)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


#: The commands see every GPU of their machine, whatever this shell's CUDA_VISIBLE_DEVICES hides.
ALL_GPUS_VISIBLE = {"CUDA_VISIBLE_DEVICES": None}


def _env():
    return cli_env(ALL_GPUS_VISIBLE)


#: `python -m gputopo ARGS` as a user runs it (tests/helpers/cli.py); a CompletedProcess (text).
gputopo = functools.partial(helpers.cli.gputopo, env=ALL_GPUS_VISIBLE, timeout=180)


def one_error_line(proc) -> str:
    """The stderr of a refused command: exactly one line, no traceback; returns it."""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    return lines[0]


def by_pair(items):
    return {tuple(x["gpus"]): x for x in items}


@pytest.fixture(scope="module")
def seed_run(tmp_path_factory):
    """`gputopo bench --sim seed-8gpu --quick --pairs 3,4 --pairs 5,6 --pairs 6,7 --json`."""
    base = tmp_path_factory.mktemp("bench-seed")
    pair_args = [a for p in SEED_PAIRS for a in ("--pairs", p)]
    proc = gputopo("bench", "--sim", "seed-8gpu", "--quick", *pair_args, "--out", "seed", "--json",
                   cwd=base)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    run_dir = base / doc["run_dir"]
    assert run_dir.resolve() == (base / "seed").resolve()
    return doc, run_dir


def read_jsonl(path: Path):
    lines = path.read_text().splitlines()
    assert lines, f"{path} is empty"
    return [json.loads(line) for line in lines]  # every line is one JSON document


# ---------------------------------------------------------------- bench --json on seed-8gpu


@pytest.mark.slow
def test_bench_json_header_and_pairs(seed_run):
    doc, _ = seed_run
    assert doc["schema_version"] == 1
    assert doc["simulated"] is True and doc["fabric"] == "sim"
    assert doc["machine"] == "seed-8gpu"
    assert doc["timing"] == ["modeled"]  # the sim fabric never pretends to have measured a clock
    pairs = by_pair(doc["pairs"])
    assert set(pairs) == {(3, 4), (5, 6), (6, 7)}
    assert {k: p["link_class"] for k, p in pairs.items()} == {(6, 7): "NV4", (3, 4): "SYS",
                                                               (5, 6): "NODE"}
    for key, p in pairs.items():
        assert p["gpus"] == list(key)
        i, j = key
        fwd, back = p["p2p_gbps"][f"{i}->{j}"], p["p2p_gbps"][f"{j}->{i}"]
        assert fwd > 0 and back > 0, p
        assert p["measurements"] > 0
    # the link model's order: the NVLink pair far above both PCIe pairs
    slow_dir = {k: min(p["p2p_gbps"].values()) for k, p in pairs.items()}
    assert slow_dir[(6, 7)] > 2 * max(slow_dir[(5, 6)], slow_dir[(3, 4)]), slow_dir


@pytest.mark.slow
def test_bench_json_corruption_on_every_pcie_pair_not_on_nvlink(seed_run):
    doc, _ = seed_run
    pairs = by_pair(doc["pairs"])
    assert pairs[(6, 7)]["wrong"] == 0
    for pair in BROKEN:
        assert pairs[pair]["wrong"] > 0, pair
        # staged copies go through host memory and stay intact: only peer paths are hit
        assert pairs[pair]["wrong_by_test"] and "p2p.staged" not in pairs[pair]["wrong_by_test"]
        assert "p2p.copy" in pairs[pair]["wrong_by_test"]

    corrupt = {tuple(f["gpus"]): f for f in doc["findings"] if f["kind"] == "corrupt"}
    assert set(corrupt) == set(BROKEN)
    assert {k: f["link_class"] for k, f in corrupt.items()} == {(3, 4): "SYS", (5, 6): "NODE"}
    for pair, f in corrupt.items():
        assert f["severity"] == "error" and f["evidence"]["total_wrong"] == pairs[pair]["wrong"]
    assert not [f for f in doc["findings"] if f["gpus"] == [6, 7]]
    assert doc["verdict"] == "broken"


@pytest.mark.slow
def test_bench_json_numerics_dp_bad_on_pcie_pairs_ddp_fine(seed_run):
    """The seed's story: DataParallel goes NaN/diverges on 5,6 (and any PCIe pair), trains on
    the NVLink pair 6,7; DDP (NCCL on an Intel host: host memory past PXB) is fine everywhere."""
    doc, _ = seed_run
    results = doc["numerics"]["results"]
    got = {(tuple(r["gpus"]), r["way"]): r for r in results}
    assert set(got) == {(p, w) for p in [(3, 4), (5, 6), (6, 7)] for w in ("reference", "dp", "ddp")}
    for pair in BROKEN:
        bad_dp = got[(pair, "dp")]
        assert bad_dp["verdict"] in ("nan", "diverged"), pair
        assert isinstance(bad_dp["step"], int) and 0 <= bad_dp["step"] < bad_dp["steps"]
        kinds = {f["kind"] for f in doc["findings"] if f["gpus"] == list(pair)}
        assert kinds & {"nan", "diverged"}, (pair, kinds)
    for (pair, way), r in got.items():
        if not (pair in BROKEN and way == "dp"):
            assert r["verdict"] == "ok", (pair, way, r["verdict"])


@pytest.mark.slow
def test_bench_json_host_findings_name_the_remedies(seed_run):
    doc, _ = seed_run
    by_kind = {}
    for f in doc["findings"]:
        by_kind.setdefault(f["kind"], []).append(f)
    assert "iommu" in by_kind and "acs" in by_kind
    for kind in ("iommu", "acs"):
        remedies = " | ".join(r for f in by_kind[kind] for r in f.get("remedies") or [])
        assert "iommu=pt" in remedies, (kind, remedies)
        assert "NCCL_P2P_DISABLE=1" in remedies, (kind, remedies)
    corrupt_remedies = " ".join(by_kind["corrupt"][0]["remedies"])
    assert "iommu=pt" in corrupt_remedies and "NCCL_P2P_DISABLE=1" in corrupt_remedies


# ---------------------------------------------------------------- the run folder


@pytest.mark.slow
def test_run_folder_has_every_output(seed_run):
    doc, run = seed_run
    for name in ("run.json", "topology.json", "measurements.jsonl", "numerics.jsonl",
                 "summary.json", "results.csv", "report.md", "report.html"):
        assert (run / name).is_file() and (run / name).stat().st_size > 0, name

    info = json.loads((run / "run.json").read_text())
    assert info["simulated"] is True and info["fabric"] == "sim" and info["machine"] == "seed-8gpu"
    topo = json.loads((run / "topology.json").read_text())
    assert len(topo["gpus"]) == 8 and topo["simulated"] is True

    ms = read_jsonl(run / "measurements.jsonl")
    assert len(ms) == doc["measurements"]
    assert {tuple(m["gpus"]) for m in ms if m.get("gpus")} == {(3, 4), (5, 6), (6, 7)}
    assert all(m["timing"] == "modeled" and m["fabric"] == "sim" for m in ms)
    assert all(m["extra"]["timing_method"].startswith("modeled: ") for m in ms)  # how, not only what
    nums = read_jsonl(run / "numerics.jsonl")
    assert len(nums) == len(doc["numerics"]["results"]) == 9

    summary = json.loads((run / "summary.json").read_text())
    assert summary["schema_version"] == 1
    assert summary["simulated"] is True and summary["fabric"] == "sim"
    assert summary["verdict"] == doc["verdict"] == "broken"

    with open(run / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(ms)
    assert {r["gpus"] for r in rows} == {"3-4", "5-6", "6-7"}
    assert sum(int(r["wrong"] or 0) for r in rows if r["gpus"] == "3-4") > 0
    assert sum(int(r["wrong"] or 0) for r in rows if r["gpus"] == "5-6") > 0
    assert sum(int(r["wrong"] or 0) for r in rows if r["gpus"] == "6-7") == 0

    assert "SIMULATED" in (run / "report.html").read_text()
    assert "SIMULATED" in (run / "report.md").read_text()
    pngs = sorted(run.glob("*.png"))
    names = {p.name for p in pngs}
    assert {"heatmap_gbps.png", "heatmap_link_class.png"} <= names, names
    for p in pngs:
        assert p.read_bytes()[:8] == PNG_MAGIC, p


@pytest.mark.slow
def test_wrong_counts_agree_across_outputs(seed_run):
    """measurements.jsonl, the --json pair figures and the corrupt finding count the same."""
    doc, run = seed_run
    ms = read_jsonl(run / "measurements.jsonl")
    per_pair = {}
    for m in ms:
        per_pair[tuple(m["gpus"])] = per_pair.get(tuple(m["gpus"]), 0) + int(m["wrong"] or 0)
    pairs = by_pair(doc["pairs"])
    assert per_pair == {k: p["wrong"] for k, p in pairs.items()}
    corrupt = {tuple(f["gpus"]): f for f in doc["findings"] if f["kind"] == "corrupt"}
    assert {k: f["evidence"]["total_wrong"] for k, f in corrupt.items()} == \
        {k: per_pair[k] for k in BROKEN}


@pytest.mark.slow
def test_table_output_and_new_run_folders_never_overwrite(tmp_path):
    """No --json: a table saying SIMULATED with GB/s per pair. No --out: a new timestamped folder
    under ./reports each time, an earlier run left as it was."""
    first = gputopo("bench", "--sim", "seed-8gpu", "--quick", "--pairs", "0,1", "--pairs", "3,4",
                    "--tests", "p2p", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    out = first.stdout
    assert "SIMULATED" in out
    assert "P2P GB/s" in out
    rows = {}
    for line in out.splitlines():
        m = re.match(r"^\s*(\d+,\d+)\s+(NV4|SYS)\s+([\d.]+) / ([\d.]+)\s", line)
        if m:
            rows[m.group(1)] = (m.group(2), float(m.group(3)), float(m.group(4)), line)
    assert set(rows) == {"0,1", "3,4"}, out
    assert rows["0,1"][0] == "NV4" and rows["3,4"][0] == "SYS"
    assert min(rows["0,1"][1:3]) > max(rows["3,4"][1:3]) > 0
    assert "corrupt" in out  # the finding is on the terminal, not only in the files

    reports = tmp_path / "reports"
    runs = sorted(p for p in reports.iterdir() if p.is_dir())
    assert len(runs) == 1 and re.match(r"^\d{8}-\d{6}-seed-8gpu", runs[0].name), runs
    assert str(runs[0].relative_to(tmp_path)) in out
    before = {p.name: p.read_bytes() for p in runs[0].iterdir() if p.is_file()}

    second = gputopo("bench", "--sim", "seed-8gpu", "--quick", "--pairs", "0,1", "--tests", "p2p",
                     "--json", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    doc = json.loads(second.stdout)
    runs2 = sorted(p for p in reports.iterdir() if p.is_dir())
    assert len(runs2) == 2
    new = (tmp_path / doc["run_dir"]).resolve()
    assert new != runs[0].resolve() and new.parent == reports.resolve()
    assert (new / "summary.json").is_file()
    after = {p.name: p.read_bytes() for p in runs[0].iterdir() if p.is_file()}
    assert after == before


@pytest.mark.slow
def test_out_into_an_existing_run_is_refused(seed_run):
    _, run = seed_run
    before = (run / "measurements.jsonl").read_bytes()
    proc = gputopo("bench", "--sim", "seed-8gpu", "--quick", "--pairs", "0,1", "--tests", "p2p",
                   "--out", run)
    assert proc.returncode == 2
    assert "--out" in one_error_line(proc)
    assert (run / "measurements.jsonl").read_bytes() == before


@pytest.mark.slow
def test_resume_of_a_finished_sim_run_needs_no_options(seed_run, tmp_path):
    """`--resume DIR` alone resumes "on the machine and fabric the run used" (cli/bench.py).
    On a finished run there is nothing left to measure: exit 0, one line saying so (issue 18),
    raw files unchanged."""
    _, run = seed_run
    copy = tmp_path / "resumed"
    shutil.copytree(run, copy)
    raw = {n: (copy / n).read_bytes() for n in ("measurements.jsonl", "numerics.jsonl")}
    proc = gputopo("bench", "--resume", copy, "--json", cwd=tmp_path)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    assert len(proc.stderr.strip().splitlines()) == 1 and "nothing to do" in proc.stderr
    assert {n: (copy / n).read_bytes() for n in raw} == raw


# ---------------------------------------------------------------- refused input


BAD_INPUTS = [
    (["--pairs", "5,5"], "5,5"),
    (["--pairs", "9,1"], "9"),
    (["--pairs", "5"], "--pairs"),
    (["--pairs", "a,b"], "a"),
    (["--class", "FOO"], "FOO"),
    (["--tests", "foo"], "foo"),
    (["--sizes", "1X"], "1X"),
    (["--steps", "0"], "--steps"),
]


@pytest.mark.slow
@pytest.mark.parametrize("args,named", BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_input_exits_2_with_one_line(tmp_path, args, named):
    proc = gputopo("bench", "--sim", "seed-8gpu", "--quick", "--out", tmp_path / "run", *args,
                   cwd=tmp_path, timeout=60)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    line = one_error_line(proc)
    assert named in line, line
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())
    assert not (tmp_path / "reports").exists()


def _nvml_driver_present() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:
        return False


@pytest.mark.slow
def test_no_gpu_and_no_sim_exits_3_naming_sim(tmp_path):
    if _nvml_driver_present():
        pytest.skip("this machine has an NVIDIA driver: `gputopo bench` would measure it")
    for args in (["bench", "--quick"], ["numerics"], ["check", "--spec", "pcie-box", "--quick"]):
        proc = gputopo(*args, cwd=tmp_path, timeout=60)
        assert proc.returncode == 3, (args, proc.returncode, proc.stderr)
        line = one_error_line(proc)
        assert "--sim" in line and "--fabric cpu" in line, (args, line)
    assert not (tmp_path / "reports").exists()


# ---------------------------------------------------------------- cpu fabric (real gloo)


@pytest.mark.slow
def test_cpu_fabric_collectives_over_gloo(tmp_path):
    proc = gputopo("bench", "--fabric", "cpu", "--quick", "--tests", "collectives", "--sizes", "1M",
                   "--out", tmp_path / "cpu", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["fabric"] == "cpu" and doc["simulated"] is False
    assert doc["timing"] == ["wall"]
    assert "numerics" not in doc or doc["numerics"] is None  # --tests collectives only
    ms = read_jsonl(tmp_path / "cpu" / "measurements.jsonl")
    assert {m["test"] for m in ms} >= {"collective.all_reduce", "collective.broadcast"}
    for m in ms:
        assert m["timing"] == "wall" and m["fabric"] == "cpu"
        assert m["size_bytes"] == 1 << 20
        assert m["error"] is None and m["wrong"] == 0
        assert m["derived"]["busbw_gbps"] > 0
        assert m["extra"]["transport"] == "gloo" and m["extra"]["ranks"] == 2
    (pair,) = doc["pairs"]
    assert pair["gpus"] == [0, 1] and pair["wrong"] == 0
    assert all(v > 0 for v in pair["busbw_gbps"].values())
    summary = json.loads((tmp_path / "cpu" / "summary.json").read_text())
    assert summary["simulated"] is False and summary["fabric"] == "cpu"


# ---------------------------------------------------------------- numerics


@pytest.mark.slow
def test_numerics_json_and_table(tmp_path):
    args = ["numerics", "--sim", "seed-8gpu", "--pairs", "5,6", "--pairs", "6,7"]
    proc = gputopo(*args, "--json", "--out", tmp_path / "j", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema_version"] == 1 and doc["simulated"] is True
    got = {(tuple(r["gpus"]), r["way"]): r["verdict"] for r in doc["numerics"]["results"]}
    assert set(got) == {(p, w) for p in [(5, 6), (6, 7)] for w in ("reference", "dp", "ddp")}
    assert got.pop(((5, 6), "dp")) in ("nan", "diverged")
    assert set(got.values()) == {"ok"}, got
    tol = doc["numerics"]["tolerances"]["run"]
    assert 0 < tol["loss_rel"] < 1e-3 and 0 < tol["param_abs"] < 1e-3
    classes = {tuple(r["gpus"]): r["link_class"] for r in doc["numerics"]["results"]}
    assert classes == {(5, 6): "NODE", (6, 7): "NV4"}
    assert doc["measurements"] == 0  # numerics only: no bench measurements

    table = gputopo(*args, "--out", tmp_path / "t", cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    out = table.stdout
    assert "SIMULATED" in out
    assert re.search(r"(?m)^tolerance:.*\d\.\d+e-0\d", out), out
    rows = {m.group(1): m.group(0) for m in re.finditer(r"(?m)^(\d,\d)\s+(NODE|NV4)\s.*$", out)}
    assert set(rows) == {"5,6", "6,7"}, out
    assert re.search(r"\bnan@\d+|\bdiverged", rows["5,6"]), rows["5,6"]
    assert "nan" not in rows["6,7"] and "diverged" not in rows["6,7"]


# ---------------------------------------------------------------- a hanging pair


def _alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def _pids_with_cmdline_containing(text: str):
    found = set()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd and _alive(int(d.name)):
            found.add(int(d.name))
    return found


HANG_BOX = """\
extends = "pcie-4gpu"
name = "hang-box"

[[fault]]
where = "pair:0,1"
what = "hang"
description = "a peer path that drops requests"
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc for processes")
def test_hang_fault_finishes_the_run_and_leaves_no_workers(tmp_path):
    """A pair whose transfers never finish: bench (which reports, it does not judge: exit 0)
    kills its workers after --timeout, records a hang, measures the other pairs, and leaves no
    process behind. On a busy machine too: the healthy pair is never called hung (its numerics
    jobs take longer than 3 s in all there), and the bound on the hang is the time each hang
    took to be found (its own record), not the whole run's wall time, which grows with load."""
    cwd = tmp_path / "hang-cwd-marker"
    cwd.mkdir()
    (cwd / "hang-box.toml").write_text(HANG_BOX)
    marker = str(cwd)  # a forkserver's command line carries the caller's sys.path (the cwd)
    assert not _pids_with_cmdline_containing(marker)

    t0 = time.monotonic()
    argv = [sys.executable, "-m", "gputopo", "bench", "--sim", "hang-box.toml", "--quick",
            "--pairs", "0,1", "--pairs", "2,3", "--tests", "p2p,numerics", "--timeout", "3",
            "--out", "run", "--json"]
    seen = set()  # helpers of the run seen while it runs (forkserver, workers): must end with it
    with subprocess.Popen(argv, cwd=cwd, env=_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as p:
        while p.poll() is None and time.monotonic() - t0 < 400:  # a watchdog, not a bound
            seen |= _pids_with_cmdline_containing(marker) - {p.pid}
            time.sleep(0.25)
        if p.poll() is None:
            p.kill()
        stdout, stderr = p.communicate()
    assert p.returncode == 0, stderr
    assert "Traceback" not in stderr
    doc = json.loads(stdout)

    hangs = [f for f in doc["findings"] if f["kind"] == "hang"]
    assert hangs and all(f["gpus"] == [0, 1] for f in hangs), hangs
    # each hang found seconds after the 3 s --timeout ran out (start-up and preparation of a
    # busy machine included), far below the default 120 s: --timeout was honoured
    took = [f["evidence"].get("elapsed_s", f["evidence"].get("wall_s")) for f in hangs]
    assert len(took) == 3 and all(t is not None and 3 <= t < 60 for t in took), took
    assert all(f["severity"] == "error" and f["link_class"] == "PXB" for f in hangs)
    pairs = by_pair(doc["pairs"])
    assert pairs[(0, 1)]["measurements"] == 0
    assert pairs[(2, 3)]["measurements"] > 0 and pairs[(2, 3)]["link_class"] == "PIX"
    assert all(v and v > 0 for v in pairs[(2, 3)]["p2p_gbps"].values())
    verdicts = {(tuple(r["gpus"]), r["way"]): r["verdict"] for r in doc["numerics"]["results"]}
    assert verdicts[((0, 1), "dp")] == "hang" and verdicts[((0, 1), "ddp")] == "hang"
    assert verdicts[((2, 3), "dp")] == "ok" and verdicts[((2, 3), "ddp")] == "ok"
    assert not (cwd / "run" / "error.txt").exists()
    summary = json.loads((cwd / "run" / "summary.json").read_text())
    assert "hang" in {f["kind"] for f in summary["findings"]}
    # one failure record for both: the bench step's and each numerics way's step-failed line
    events = [json.loads(x) for x in (cwd / "run" / "events.jsonl").read_text().splitlines()]
    failed = [(e["kind"], e["group"], e["step"], e["evidence"].get("way"))
              for e in events if e["type"] == "step-failed"]
    assert sorted(failed) == [("hang", "numerics", "numerics:0-1", "ddp"),
                              ("hang", "numerics", "numerics:0-1", "dp"), ("hang", "p2p", "p2p:0-1", None)]

    worker_pids = set()
    for log in (cwd / "run" / "workers").glob("*.log"):
        worker_pids |= {int(p) for p in re.findall(r"\bpid (\d+)", log.read_text())}
    assert len(worker_pids) >= 2, "worker logs name no pids"
    deadline = time.monotonic() + 15
    while True:
        left = {pid for pid in worker_pids | seen if _alive(pid)} \
            | _pids_with_cmdline_containing(marker)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not left, f"processes left behind: {left}"


# ---------------------------------------------------------------- Ctrl-C as a terminal sends it


def _session_pids(sid: int):
    """Processes of session ``sid`` (a terminal's Ctrl-C reaches its whole foreground group)."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if os.getsid(int(d.name)) == sid and _alive(int(d.name)):
                out[int(d.name)] = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(
                    errors="replace")
        except (OSError, ProcessLookupError):
            continue
    return out


def _start_in_session(args, cwd):
    """`python -m gputopo ARGS` in a new session. Its output goes to files, not pipes: waiting
    on a pipe would also wait for every process that inherited it (the forkserver does)."""
    out, err = open(cwd / "stdout.txt", "w"), open(cwd / "stderr.txt", "w")
    with out, err:
        return subprocess.Popen([sys.executable, "-m", "gputopo", *args], cwd=cwd, env=_env(),
                                stdout=out, stderr=err, start_new_session=True)


def _finish(p, cwd, timeout=60) -> str:
    """Wait for the command itself (not its helpers); its stderr."""
    p.wait(timeout=timeout)
    return (cwd / "stderr.txt").read_text()


def _no_process_left(sid: int, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while _session_pids(sid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _session_pids(sid), f"processes left behind: {_session_pids(sid)}"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc for processes")
def test_ctrl_c_in_the_numerics_exits_130_naming_resume_and_resume_finishes(tmp_path):
    """Ctrl-C (to the whole process group, as a terminal sends it) while the numerics run:
    exit 130, one line naming `--resume DIR`, run.json "interrupted", nothing left running;
    `--resume DIR` then does the numerics of the pairs not done and nothing else."""
    pairs = ["--pairs", "0,1", "--pairs", "2,3", "--pairs", "0,2", "--pairs", "1,3"]
    p = _start_in_session(["bench", "--sim", "pcie-4gpu", "--quick", "--tests", "numerics",
                           *pairs, "--out", "run"], tmp_path)
    records = tmp_path / "run" / "numerics.jsonl"
    wait_for_first_line(p, records, "numerics")
    os.killpg(p.pid, signal.SIGINT)
    stderr = _finish(p, tmp_path)
    # the forkserver (torch loaded) ends with the command, not a second or more after it
    assert not [c for c in _session_pids(p.pid).values() if "forkserver" in c]
    assert p.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert "--resume run" in stderr
    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "interrupted"
    _no_process_left(p.pid)
    before = read_jsonl(records)
    assert len({(tuple(r["gpus"]), r["way"]) for r in before}) < 12

    proc = gputopo("bench", "--resume", "run", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    after = read_jsonl(records)
    assert {(tuple(r["gpus"]), r["way"]) for r in after} == \
        {(pair, way) for pair in ((0, 1), (2, 3), (0, 2), (1, 3))
         for way in ("reference", "dp", "ddp")}
    assert after[:len(before)] == before  # appended to, never rewritten
    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "complete"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc for processes")
def test_ctrl_c_while_the_forkserver_imports_torch_prints_no_traceback(tmp_path):
    """The forkserver spends seconds importing torch before it would ignore SIGINT itself; a
    terminal's Ctrl-C then killed it with a traceback. It is now started with SIGINT ignored."""
    p = _start_in_session(["bench", "--sim", "pcie-4gpu", "--quick", "--pairs", "0,1",
                           "--tests", "p2p", "--out", "run"], tmp_path)
    deadline = time.monotonic() + 60
    while p.poll() is None and time.monotonic() < deadline:
        if any("forkserver" in cmd for cmd in _session_pids(p.pid).values()):
            time.sleep(0.15)  # past its exec, into `import torch`
            break
        time.sleep(0.01)
    assert p.poll() is None, "the run ended before it could be interrupted"
    os.killpg(p.pid, signal.SIGINT)
    stderr = _finish(p, tmp_path)
    assert p.returncode == 130, stderr
    _no_process_left(p.pid)  # (the forkserver writes to the same stderr file)
    stderr = (tmp_path / "stderr.txt").read_text()
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr


def test_check_never_judges_a_run_interrupted_by_ctrl_c(tmp_path, monkeypatch):
    """`gputopo check --sim ...` benches first; Ctrl-C there left a partial run that the gate
    then judged (and could pass, exit 0). Now: no verdict, exit 130, --resume named."""
    from click.testing import CliRunner

    import gputopo.jobs as jobs
    from gputopo.cli.main import _register, cli

    class Interrupted:
        run_dir = tmp_path / "run"
        interrupted = True
        report_cut = False

    monkeypatch.setattr(jobs, "run_job", lambda *a, **kw: Interrupted())
    _register()
    res = CliRunner().invoke(cli, ["check", "--spec", "pcie-box", "--sim", "pcie-4gpu",
                                   "--quick", "--pairs", "0,1"])
    assert res.exit_code == 130, res.output
    assert "PASSED" not in res.output and "--resume" in res.output


def test_a_second_ctrl_c_while_the_workers_stop_still_kills_them_all_and_the_run_is_interrupted():
    """A Ctrl-C that came while the runner joined a worker (a second press, or the process
    group's copy of the first: `timeout -s INT` sends both) escaped the shutdown: run.json said
    failed, the command "aborted", and the workers after that one were never killed."""
    from gputopo.bench.runner import Runner
    from gputopo.workers.pool import Worker

    class Proc:
        pid = 4242  # started

        def __init__(self, ctrl_c_in_join: bool):
            self.alive, self.ctrl_c, self.joins = True, ctrl_c_in_join, 0

        def is_alive(self):
            return self.alive

        @property
        def exitcode(self):  # as multiprocessing.Process: None while running, -9 once SIGKILLed
            return None if self.alive else -9

        def kill(self):
            self.alive = False

        def join(self, timeout=None):
            self.joins += 1
            if self.ctrl_c and self.joins == 1:
                raise KeyboardInterrupt

    class Conn:
        def send(self, msg):
            pass

        def close(self):
            pass

    runner = Runner(fabric="sim", config={}, log=None, timeout_s=1.0, pool_size=3)
    procs = [Proc(k == 0) for k in range(3)]
    for k, proc in enumerate(procs):
        runner.workers[f"sim{k}"] = Worker(f"sim{k}", proc, Conn(), "log", ready=True)
    runner.run([])  # nothing left to run: the shutdown, with a Ctrl-C in its first join
    assert runner.interrupted and runner.workers == {}
    assert not any(p.alive for p in procs)


@pytest.mark.slow
def test_ctrl_c_while_the_report_is_written_names_the_complete_run_and_what_to_run(
        tmp_path, monkeypatch, capsys):
    """Ctrl-C while the report was drawn ended in "gputopo: aborted" (or, with the run
    finished, a report half written and nothing said). Now one line: the run is complete, and
    the command that writes its report, or judges it for `check`, which then works."""
    import gputopo.report.render as render
    from gputopo.cli.main import main

    def cut(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(render, "render_run", cut)
    run = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        main(["bench", "--sim", "pcie-4gpu", "--quick", "--pairs", "0,1", "--tests", "p2p",
              "--out", str(run)])
    err = capsys.readouterr().err
    assert e.value.code == 130, err
    assert err.strip().splitlines()[-1] == (
        f"gputopo: interrupted while the report was written: the run folder {run} holds a "
        f"complete run; write its report with `gputopo report {run}`")
    assert json.loads((run / "run.json").read_text())["status"] == "complete"
    gate = tmp_path / "gate"
    with pytest.raises(SystemExit) as e:
        main(["check", "--spec", "pcie-box", "--sim", "pcie-4gpu", "--quick", "--pairs", "0,1",
              "--out", str(gate)])
    err = capsys.readouterr().err
    assert e.value.code == 130 and "no verdict" in err and "PASSED" not in err
    assert f"judge it with `gputopo check --spec pcie-box {gate}`" in err
    monkeypatch.undo()
    with pytest.raises(SystemExit) as e:
        main(["report", str(run)])
    assert e.value.code == 0 and (run / "report.html").stat().st_size > 0
    with pytest.raises(SystemExit) as e:
        main(["check", "--spec", "pcie-box", str(gate)])
    out = capsys.readouterr().out
    assert (e.value.code, "PASSED" in out) in ((0, True), (1, False)), out  # a verdict, either way


@pytest.mark.slow
def test_a_ctrl_c_after_the_command_has_ended_changes_nothing(monkeypatch):
    """A Ctrl-C while the command stopped its helpers (the forkserver), or between its end and
    the exit, escaped as a KeyboardInterrupt traceback (exit -2): the outcome stands now."""
    import multiprocessing.forkserver  # noqa: F401 - as after a bench: there is one to stop

    import gputopo.workers.processes as processes
    import gputopo.cli.main as cli_main

    calls = []

    def stop_forkserver():
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(processes, "stop_forkserver", stop_forkserver)
    with pytest.raises(SystemExit) as e:
        cli_main.main(["sims"])
    assert e.value.code in (0, None) and len(calls) == 2
    lost = ("import gputopo.cli.main as m\n"
            "class Ctrl:\n    def __del__(self):\n        raise KeyboardInterrupt\n"
            "class Bug:\n    def __del__(self):\n        raise ValueError('shown')\n"
            "def main():\n    Ctrl(); Bug()\n"
            "m.main = main\nm.entry()\n")
    p = subprocess.run([sys.executable, "-c", lost], env=_env(), capture_output=True, text=True,
                       timeout=60)  # a Ctrl-C Python could only drop, in a __del__: not shown
    assert p.returncode == 0 and "KeyboardInterrupt" not in p.stderr, p.stderr
    assert "ValueError: shown" in p.stderr  # other unraisable errors still are
    late = ("import gputopo.cli.main as m\n"
            "def main():\n    raise KeyboardInterrupt\n"
            "m.main = main\nm.entry()\n")
    p = subprocess.run([sys.executable, "-c", late], env=_env(), capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 130 and "Traceback" not in p.stderr, p.stderr


def test_ctrl_c_wrapped_by_python_in_another_error_is_an_interrupt_not_a_bug():
    """Ctrl-C while a class body runs (matplotlib's import, rendering the report) reaches us as
    a RuntimeError caused by KeyboardInterrupt: exit 130 "aborted", not 4 "internal error"."""
    from gputopo.cli.main import _caused_by_interrupt

    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as ki:
            raise RuntimeError("Error calling __set_name__") from ki
    except RuntimeError as e:
        wrapped = e
    assert _caused_by_interrupt(wrapped)
    assert not _caused_by_interrupt(RuntimeError("a bug"))


def test_resume_of_a_cpu_fabric_run_keeps_its_number_of_stand_in_gpus(tmp_path):
    """`bench --fabric cpu --cpu-gpus 3`, then `bench --resume DIR`: the machine is rebuilt with
    3 stand-in GPUs (it was 2, the default, and failed: "--pairs 0,2: no such pair")."""
    from gputopo.bench.api import cpu_topology
    from gputopo.runfolder.layout import RUN_JSON, TOPOLOGY_JSON
    from gputopo.runfolder.writer import run_info, write_json
    from gputopo.cli.bench import machine_and_options
    from gputopo.model import topology_to_json

    run = tmp_path / "run"
    run.mkdir()
    write_json(run / RUN_JSON, run_info(fabric="cpu", simulated=False, machine="cpu-fabric"))
    write_json(run / TOPOLOGY_JSON, topology_to_json(cpu_topology(3)))
    machine, opts = machine_and_options(None, None, (), None, None, None, None, None, str(run))
    assert machine.fabric.name == "cpu" and len(machine.topology.gpus) == 3
    machine, _ = machine_and_options(None, None, (), None, None, 4, None, None, str(run))
    assert len(machine.topology.gpus) == 4  # what the user says wins


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc for processes")
def test_numerics_started_beside_the_bench_end_with_an_interrupted_run(tmp_path):
    """On the sim the numerics' DataParallel/DDP jobs start with the bench's steps (in worker
    processes of their own). A run stopped while both run (SIGTERM, as Ctrl-C) ends promptly as
    interrupted, leaves none of those workers behind and records no numerics (they are judged
    and written only in the numerics phase, which an interrupted bench never reaches)."""
    cwd = tmp_path / "ahead-cwd-marker"
    cwd.mkdir()
    marker = str(cwd)
    argv = [sys.executable, "-m", "gputopo", "bench", "--sim", "seed-8gpu", "--quick", "--out", "run"]
    with subprocess.Popen(argv, cwd=cwd, env=_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as p:
        t0 = time.monotonic()
        workers = cwd / "run" / "workers"
        while p.poll() is None and time.monotonic() - t0 < 120:
            if workers.is_dir() and any(workers.glob("numerics-sim*.log")):
                break
            time.sleep(0.1)
        assert p.poll() is None, "the run ended before its numerics workers started"
        seen = _pids_with_cmdline_containing(marker) - {p.pid}
        p.send_signal(signal.SIGTERM)
        _, stderr = p.communicate(timeout=60)
    assert p.returncode == 130, stderr
    assert "Traceback" not in stderr
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in seen) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in seen if _alive(pid)]
    assert not _pids_with_cmdline_containing(marker)
    assert json.loads((cwd / "run" / "run.json").read_text())["status"] == "interrupted"
    numerics = cwd / "run" / "numerics.jsonl"
    assert not numerics.exists() or not numerics.read_text().strip()


@pytest.mark.slow
def test_the_parent_of_a_sim_bench_never_imports_torch(tmp_path):
    """The workers (forked from a forkserver that imported torch once) measure and train; the
    command's own process plans, records, judges (numpy) and reports. Importing torch there as
    well cost a second of CPU while the workers needed both cores. Here an `import torch` in the
    parent fails (and leaves a mark), and the run must still be whole, numerics included."""
    out, mark = tmp_path / "run", tmp_path / "torch-imported"
    code = f"""
import builtins, sys
real = builtins.__import__
def guard(name, *args, **kwargs):
    if name == "torch" or name.startswith("torch."):
        open({str(mark)!r}, "a").write(name + "\\n")
        raise ImportError("torch imported in the parent")
    return real(name, *args, **kwargs)
builtins.__import__ = guard
from gputopo.cli.main import entry
sys.argv = ["gputopo"] + sys.argv[1:]
entry()
"""
    proc = subprocess.run([sys.executable, "-c", code, "bench", "--sim", "seed-8gpu", "--pairs", "5,6",
                           "--quick", "--out", str(out)], env=_env(), capture_output=True, text=True,
                          timeout=180)
    assert not mark.exists(), mark.read_text()
    assert proc.returncode == 0, proc.stderr[-2000:]
    verdicts = {r["way"]: r["verdict"] for r in map(json.loads, (out / "numerics.jsonl").read_text().splitlines())}
    assert verdicts["reference"] == "ok" and verdicts["dp"] in ("nan", "diverged") and verdicts["ddp"] == "ok"
    assert json.loads((out / "run.json").read_text())["status"] == "complete"
