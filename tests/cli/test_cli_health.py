"""`gputopo health` as a user (or a scheduler) runs it: each dialect's exit code for a verdict, a
check that could not run, a refused option and a budget spent; the last verdict kept."""

import json
import re
import time

import pytest

from gputopo.model.reason import NPD_BYTES, REASON_PATTERN
from helpers.cli import gputopo_here

CODES = {"json": (0, 0, 1, 2), "npd": (0, 0, 1, 2), "nagios": (0, 1, 2, 3), "slurm-healthcheck": (0, 0, 0, 0)}
SIMS = {"dgx-a100": 0, "seed-8gpu": 1, "degraded-nvlink": 2}  # pass, warn, fail (index in CODES)


@pytest.mark.parametrize("sim", sorted(SIMS))
@pytest.mark.parametrize("dialect", ["json", "npd", "nagios"])
def test_exit_codes(dialect, sim, tmp_path):
    r = gputopo_here("health", "--as", dialect, "--sim", sim)
    assert r.returncode == CODES[dialect][SIMS[sim]], (r.stdout, r.stderr)
    assert "SIMULATED" in r.stderr


def test_json_is_the_verdict_with_what_it_judged(tmp_path):
    r = gputopo_here("health", "--sim", "h100-sxm-shared-vm", "--state-dir", tmp_path)
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["verdict"] == "pass" and doc["budget_s"] == 60
    checks = {c["name"]: c for c in doc["checks"]}
    assert checks["fabric"]["applicability"] == "not-applicable" and checks["fabric"]["findings"]  # said, not judged
    assert checks["gpus"]["status"] == "pass" and "NVML" in checks["gpus"]["basis"]
    kept = json.loads((tmp_path / "health-last.json").read_text())
    assert kept["verdict"] == "pass" and kept["time"] == doc["time"] and kept["used_s"] <= kept["budget_s"]
    assert {c["name"]: c["applicability"] for c in kept["checks"]} == {n: c["applicability"] for n, c in checks.items()}


def test_npd_line_is_the_reason_within_80_bytes():
    r = gputopo_here("health", "--as", "npd", "--sim", "degraded-nvlink")
    line = r.stdout.rstrip("\n")
    assert r.returncode == 1 and "\n" not in line and len(line.encode()) <= NPD_BYTES
    assert re.match(REASON_PATTERN, line) and line.startswith("gputopo: nvlink-down gpu5 ")


@pytest.mark.parametrize("dialect, code, start", [("json", 3, '{"schema_version"'), ("npd", 2, "gputopo could not run: no NVIDIA driver"),
                                                  ("nagios", 3, "UNKNOWN - gputopo health could not run: no NVIDIA"),
                                                  ("slurm-healthcheck", 0, "gputopo health: could not run: no NVIDIA")])
def test_no_driver_in_each_dialect(dialect, code, start, monkeypatch, tmp_path):
    from gputopo.errors import NoHardwareError
    import gputopo.probe.scan as probe_scan

    def no_driver(**kw):
        raise NoHardwareError("no NVIDIA driver found (NVML: NVML Shared Library Not Found)")

    monkeypatch.setattr(probe_scan, "scan_real", no_driver)
    r = gputopo_here("health", "--as", dialect, *(["--sinfo", "/nonexistent"] if dialect.startswith("slurm") else []))
    assert r.returncode == code and "gputopo: error: no NVIDIA driver" in r.stderr
    assert r.stdout.startswith(start) and len(r.stdout.splitlines()) == 1
    if dialect == "json":
        doc = json.loads(r.stdout)
        assert doc["verdict"] == "could-not-run" and doc["error"].startswith("no NVIDIA driver found")


@pytest.mark.parametrize("dialect, code", [("json", 2), ("npd", 2), ("nagios", 3), ("slurm-healthcheck", 0)])
@pytest.mark.parametrize("args", [["--budget", "nan"], ["--level", "active"], ["--bogus"]])
def test_a_refused_option_answers_in_the_dialect(dialect, code, args):
    r = gputopo_here("health", "--as", dialect, "--sim", "dgx-a100", *args)
    assert r.returncode == code and "gputopo: error:" in r.stderr and "Traceback" not in r.stderr
    if dialect == "nagios":
        assert r.stdout.startswith("UNKNOWN - ")


def test_slurm_options_need_the_slurm_dialect():
    r = gputopo_here("health", "--as", "nagios", "--sim", "dgx-a100", "--node", "n1")
    assert r.returncode == 3 and "--node is ignored without --as slurm-healthcheck" in r.stderr


def test_a_state_dir_that_cannot_be_written_is_refused(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    r = gputopo_here("health", "--sim", "dgx-a100", "--state-dir", f / "sub")
    assert r.returncode == 2 and "--state-dir" in r.stderr


@pytest.fixture
def slow_scan(monkeypatch):
    import gputopo.cli.scan as scan

    real = scan.load_topology

    def slow(*a, **kw):
        time.sleep(1.5)
        return real(*a, **kw)

    monkeypatch.setattr(scan, "load_topology", slow)


@pytest.mark.parametrize("dialect, code, start", [("json", 2, "{"), ("npd", 2, "gputopo not judged: SIMULATED "),
                                                  ("nagios", 3, "UNKNOWN - gputopo health: not judged: the scan")])
def test_what_the_budget_does_not_fit_is_not_judged_never_a_failure(dialect, code, start, slow_scan, tmp_path):
    t0 = time.monotonic()
    r = gputopo_here("health", "--as", dialect, "--sim", "degraded-nvlink", "--budget", "0.3", "--state-dir", tmp_path)
    assert time.monotonic() - t0 < 1.4  # answered at the budget, not when the scan ended
    assert r.returncode == code and r.stdout.startswith(start)
    kept = json.loads((tmp_path / "health-last.json").read_text())
    assert kept["verdict"] == "not-judged" and kept["cut_short"].startswith("the scan")
    assert {c["applicability"] for c in kept["checks"]} == {"not-judged"}


def test_an_internal_error_in_a_dialect(monkeypatch):
    import gputopo.fleet.passive as passive

    def broken(*a, **kw):
        raise RuntimeError("a bug")

    monkeypatch.setattr(passive, "run_passive", broken)
    r = gputopo_here("health", "--as", "nagios", "--sim", "dgx-a100")
    assert r.returncode == 3 and r.stdout.startswith("UNKNOWN - gputopo health could not run: internal error: RuntimeError")
    r = gputopo_here("health", "--sim", "dgx-a100")
    assert r.returncode == 4 and "internal error" in r.stderr
