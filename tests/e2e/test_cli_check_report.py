"""`gputopo check`, `report`, `diff` and `import` end to end, as a user (or a CI job) runs them:
`python -m gputopo` in a subprocess, exit codes, one-line errors, files written.

Two finished runs are made once for the module, side by side: the seed story (`seed-8gpu`,
peer copies on every PCIe pair corrupt and DataParallel goes NaN on 5,6 (NODE) and 3,4 (SYS),
while the NVLink pair 6,7 is clean) and its healthy twin, on the same three pairs. Tests that change a run folder work on a copy of it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import helpers.cli
from helpers.cli import cli_env
from helpers.paths import REPO

FIXTURES = REPO / "tests" / "fixtures"
NCCL_LOG = FIXTURES / "nccl-tests" / "autodl_2x2080ti_all_reduce.txt"
PAIRS = ("3,4", "5,6", "6,7")
BROKEN = {(3, 4), (5, 6)}  # the PCIe pairs (SYS, NODE); 6,7 is NV4 and clean
GIB = 1 << 30

pytestmark = pytest.mark.slow  # every test here starts `python -m gputopo`


#: The commands see every GPU of their machine, whatever this shell's CUDA_VISIBLE_DEVICES hides.
ALL_GPUS_VISIBLE = {"CUDA_VISIBLE_DEVICES": None}


def _env():
    return cli_env(ALL_GPUS_VISIBLE)


def _argv(args):
    return [sys.executable, "-m", "gputopo", *map(str, args)]


#: `python -m gputopo ARGS` as a user runs it (tests/helpers/cli.py); a CompletedProcess (text).
gputopo = functools.partial(helpers.cli.gputopo, env=ALL_GPUS_VISIBLE, timeout=120)


def one_error_line(proc) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    return lines[0]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{"seed": DIR, "healthy": DIR}: both benches run at once (they are independent)."""
    base = tmp_path_factory.mktemp("check-runs")
    pair_args = [a for p in PAIRS for a in ("--pairs", p)]
    procs = {}
    for name, sim in (("seed", "seed-8gpu"), ("healthy", "seed-8gpu-healthy")):
        procs[name] = subprocess.Popen(
            _argv(["bench", "--sim", sim, "--quick", *pair_args, "--out", base / name, "--json"]),
            cwd=base, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    dirs = {}
    for name, p in procs.items():
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, (name, err)
        doc = json.loads(out)
        assert doc["machine"] == ("seed-8gpu" if name == "seed" else "seed-8gpu-healthy")
        dirs[name] = base / name
        assert (dirs[name] / "summary.json").is_file()
    return dirs


def copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------- check


def test_check_pcie_box_fails_the_seed_run_on_its_pcie_pairs(runs):
    proc = gputopo("check", "--spec", "pcie-box", runs["seed"])
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "FAILED" in proc.stdout
    fails = [line for line in proc.stdout.splitlines() if line.strip().startswith("FAIL")]
    assert fails and not any("6-7" in line or "6,7" in line for line in fails), fails
    for a, b in BROKEN:
        assert any(f"{a}-{b}" in line or f"{a},{b}" in line for line in fails), (a, b, fails)
    assert any("no_corruption" in line for line in fails)
    assert "SIMULATED" in proc.stdout


def test_check_pcie_box_passes_the_healthy_run(runs):
    proc = gputopo("check", "--spec", "pcie-box", runs["healthy"])
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert "PASSED" in proc.stdout and "FAIL " not in proc.stdout


def test_check_junit_and_json(runs, tmp_path):
    junit = tmp_path / "gate.xml"
    proc = gputopo("check", "--spec", "pcie-box", runs["seed"], "--junit", junit, "--json")
    assert proc.returncode == 1, proc.stderr
    verdict = json.loads(proc.stdout)
    assert verdict["passed"] is False and verdict["exit_code"] == 1
    assert verdict["simulated"] is True
    assert verdict["counts"]["failed"] == len(verdict["failures"]) > 0
    assert {tuple(f["gpus"]) for f in verdict["failures"]} == BROKEN

    root = ET.parse(junit).getroot()
    cases = list(root.iter("testcase"))
    assert len(cases) == verdict["counts"]["passed"] + verdict["counts"]["failed"] \
        + verdict["counts"]["skipped"]
    failing = [c for c in cases if c.find("failure") is not None]
    assert len(failing) == verdict["counts"]["failed"]
    for a, b in BROKEN:
        assert any(f"{a}-{b}" in c.get("name", "") or f"{a},{b}" in c.get("name", "")
                   for c in failing), [c.get("name") for c in failing]
    assert not any("6-7" in c.get("name", "") or "6,7" in c.get("name", "") for c in failing)
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    assert sum(int(s.get("failures", 0)) for s in suites) == len(failing)

    ok = gputopo("check", "--spec", "pcie-box", runs["healthy"], "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["passed"] is True


@pytest.mark.parametrize("body,key", [
    ('schema_version = 1\n[integrity]\nno_corupt = true\n', "integrity.no_corupt"),
    ('schema_version = 1\n[pcie]\nmin_gen = "four"\n', "pcie.min_gen"),
    ('schema_version = 1\n[bandwidth.SYS]\nmin_gbps = "fast"\n', "bandwidth.SYS.min_gbps"),
], ids=["unknown-key", "wrong-type", "wrong-type-nested"])
def test_check_bad_spec_exits_2_naming_the_key(runs, tmp_path, body, key):
    spec = tmp_path / "bad.toml"
    spec.write_text(body)
    proc = gputopo("check", "--spec", spec, runs["healthy"])
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    line = one_error_line(proc)
    assert key in line and "bad.toml" in line, line


def test_check_spec_series_typo_is_refused(runs, tmp_path):
    """pcie-box.toml and check/spec.py promise: 'an unknown or malformed key makes check exit 2
    naming the key, so a typo never switches a rule off'. A misspelt `series` does exactly that:
    the bandwidth rule finds nothing to judge, is skipped, and a 1000 GB/s minimum passes."""
    spec = tmp_path / "typo.toml"
    spec.write_text('schema_version = 1\n[bandwidth.SYS]\nmin_gbps = 1000.0\nseries = "p2p.cpoy"\n')
    proc = gputopo("check", "--spec", spec, runs["healthy"])
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "bandwidth.SYS.series" in one_error_line(proc)


def test_check_without_spec_exits_2(runs):
    proc = gputopo("check", runs["healthy"])
    assert proc.returncode == 2
    assert "--spec" in one_error_line(proc)


def test_check_init_from_healthy_then_judge_both(runs, tmp_path):
    spec = tmp_path / "new.toml"
    before = {p.name: sha(p) for p in runs["healthy"].iterdir() if p.is_file()}
    proc = gputopo("check", "--init", "--from", runs["healthy"], "--spec", spec)
    assert proc.returncode == 0, proc.stderr
    assert spec.is_file()
    text = spec.read_text()
    written = tomllib.loads(text)
    assert written["schema_version"] == 1
    pairs = written["topology"]["pairs"]  # the baseline's topology, every pair
    assert len(pairs) == 28 and pairs["3,4"] == "SYS" and pairs["0,1"] == "NV4"
    assert pairs["5,6"] == "NODE"
    assert {p.name: sha(p) for p in runs["healthy"].iterdir() if p.is_file()} == before

    same = gputopo("check", "--spec", spec, runs["healthy"])
    assert same.returncode == 0, same.stdout + same.stderr
    seed = gputopo("check", "--spec", spec, runs["seed"])
    assert seed.returncode == 1, seed.stdout + seed.stderr
    assert "3-4" in seed.stdout or "3,4" in seed.stdout
    assert "5-6" in seed.stdout or "5,6" in seed.stdout

    again = gputopo("check", "--init", "--from", runs["healthy"], "--spec", spec)
    assert again.returncode == 2  # never overwrites a spec
    assert spec.read_text() == text
    bad_base = gputopo("check", "--init", "--from", runs["seed"], "--spec", tmp_path / "x.toml")
    assert bad_base.returncode == 2 and "--force" in one_error_line(bad_base)
    assert not (tmp_path / "x.toml").exists()


# ---------------------------------------------------------------- report


def test_report_re_renders_and_never_touches_raw_files(runs, tmp_path):
    run = copy_run(runs["seed"], tmp_path / "seed")
    raw = {n: sha(run / n) for n in ("measurements.jsonl", "numerics.jsonl", "events.jsonl",
                                     "run.json") if (run / n).exists()}
    assert "measurements.jsonl" in raw
    old = time.time() - 3600
    for n in ("summary.json", "report.html", "results.csv"):
        os.utime(run / n, (old, old))
    (run / "report.md").unlink()

    proc = gputopo("report", run)
    assert proc.returncode == 0, proc.stderr
    for n in ("summary.json", "report.html", "results.csv"):
        assert (run / n).stat().st_mtime > old + 60, n
    assert (run / "report.md").is_file() and "SIMULATED" in (run / "report.md").read_text()
    assert {n: sha(run / n) for n in raw} == raw
    assert "SIMULATED" in proc.stdout and "corrupt" in proc.stdout
    summary = json.loads((run / "summary.json").read_text())
    original = json.loads((runs["seed"] / "summary.json").read_text())
    assert summary["verdict"] == original["verdict"] == "broken"
    assert summary["findings"] == original["findings"]

    js = gputopo("report", run, "--json", "--no-plots")
    assert js.returncode == 0
    assert json.loads(js.stdout)["verdict"] == "broken"


def test_report_of_a_missing_folder_exits_2(tmp_path):
    for missing in (tmp_path / "nonexistent", Path("/nonexistent")):
        if missing.exists():
            continue
        proc = gputopo("report", missing)
        assert proc.returncode == 2, proc.stderr
        assert str(missing) in one_error_line(proc)
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = gputopo("report", empty)
    assert proc.returncode == 2
    one_error_line(proc)
    assert list(empty.iterdir()) == []


# ---------------------------------------------------------------- diff


def test_diff_healthy_to_seed_is_a_regression(runs):
    proc = gputopo("diff", runs["healthy"], runs["seed"])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    new_lines = [line for line in proc.stdout.splitlines() if "new finding" in line]
    assert any("corrupt" in line and "3,4" in line for line in new_lines), proc.stdout
    assert any("corrupt" in line and "5,6" in line for line in new_lines), proc.stdout
    assert "SIMULATED" in proc.stdout

    js = gputopo("diff", runs["healthy"], runs["seed"], "--json")
    assert js.returncode == 1
    doc = json.loads(js.stdout)
    assert doc["schema_version"] == 1 and doc["regressions"] > 0
    new = [(f["kind"], f["gpus"]) for f in doc["new_findings"]]
    assert ("corrupt", [3, 4]) in new and ("corrupt", [5, 6]) in new
    assert not [f for f in doc["new_findings"] if f["gpus"] == [6, 7]]


def test_diff_of_a_run_with_itself_is_clean(runs):
    proc = gputopo("diff", runs["seed"], runs["seed"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "new finding" not in proc.stdout
    back = gputopo("diff", runs["seed"], runs["healthy"])  # the fix is no regression
    assert back.returncode == 0, back.stdout


# ---------------------------------------------------------------- import nccl-tests


@pytest.fixture
def nccl_log():
    assert NCCL_LOG.is_file(), f"fixture missing from the repository: {NCCL_LOG}"
    return NCCL_LOG


def test_import_nccl_tests_fixture(nccl_log, tmp_path):
    out = tmp_path / "imported"
    proc = gputopo("import", "nccl-tests", nccl_log, "--out", out, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "2.05774" in proc.stdout

    ms = [json.loads(line) for line in (out / "measurements.jsonl").read_text().splitlines()]
    assert len({m["size_bytes"] for m in ms}) == 28
    assert len(ms) == 56  # out-of-place and in-place per size
    assert all(m["test"] == "collective.all_reduce" and m["wrong"] == 0 for m in ms)
    at_1g = [m for m in ms if m["size_bytes"] == GIB]
    assert len(at_1g) == 2
    for m in at_1g:
        assert m["extra"]["printed"]["busbw_gbps"] == 4.00
        assert round(m["derived"]["busbw_gbps"], 2) == 4.00

    summary = json.loads((out / "summary.json").read_text())
    (log,) = summary["nccl_tests"]
    assert log["sizes"] == 28
    assert log["avg_busbw_gbps"] == 2.05774
    assert log["peak_busbw_gbps"] == 4.0 and log["peak_size_bytes"] == GIB
    assert summary["simulated"] is False
    for name in ("run.json", "report.html", "report.md", "results.csv"):
        assert (out / name).is_file(), name

    again = gputopo("report", out, "--no-plots")  # an imported run is an ordinary run folder
    assert again.returncode == 0, again.stderr


def test_import_garbage_exits_2_and_writes_nothing(tmp_path):
    log = tmp_path / "all_reduce_perf.log"
    log.write_text("hello\nthis is not nccl-tests output\n# size count type\n1 2 3\n")
    out = tmp_path / "imported"
    proc = gputopo("import", "nccl-tests", log, "--out", out, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert log.name in one_error_line(proc)
    assert not out.exists() or not any(out.iterdir())
    assert not (tmp_path / "reports").exists()


def test_report_of_a_folder_another_gputopo_writes_waits_its_turn_in_one_line(tmp_path):
    """Two `report` re-renders of one folder at once deleted each other's plots: rc 4
    (FileNotFoundError, found by the sweep). The re-render takes the folder's write lock."""
    from conftest_report import write_run
    from gputopo.runfolder.writer import run_folder_lock

    run = write_run(tmp_path / "run", [])
    with run_folder_lock(run):  # another gputopo (a bench, a resume, a report) is writing it
        proc = gputopo("report", run, "--no-plots")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"gputopo: error: {run}: another gputopo is writing this run folder (it holds .gputopo.lock); "
        "wait for it to finish, then run this again"]
    assert not (run / "summary.json").exists()
    again = gputopo("report", run, "--no-plots")
    assert again.returncode == 0 and (run / "summary.json").exists(), again.stderr
