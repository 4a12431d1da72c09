"""Every built-in simulated machine (the fault ones included) x every dialect of `gputopo health`:
the verdict, the exit code and the output, as a table. The passive level runs once per machine
(gputopo/fleet/passive.py, the scan's own code on the fake NVML and host); each dialect renders
that verdict (gputopo/fleet/dialects.py). A few machines then go through the command itself
(tests/cli/test_cli_health.py)."""

import json
import re

import pytest

from gputopo.fleet.dialects import dialects_of, exit_code, render
from gputopo.fleet.passive import run_passive
from gputopo.model.reason import NPD_BYTES, REASON_PATTERN
from gputopo.sim.description import builtin_names
from gputopo.sim.scan import scan_simulated

#: machine -> (verdict, the first reason's start, checks that must be not applicable)
EXPECTED = {
    "a100-pcie-4gpu-bridged": ("pass", None, {"fabric", "nic"}),
    "degraded-nvlink": ("fail", "gputopo: nvlink-down gpu5 0 NVLinks active, 12 down", {"fabric", "nic"}),
    "dgx-a100": ("pass", None, {"fabric", "nic"}),
    "dgx-a100-crc-day1": ("pass", None, {"fabric", "nic"}),  # alone: a count with no time span (an info)
    "dgx-a100-crc-day2": ("pass", None, {"fabric", "nic"}),  # alone too; after day 1: warn (below)
    "dgx-h100": ("pass", None, set()),
    "dgx-h100-rdma-down": ("warn", "gputopo: nic-port-down mlx5_0/1 ", set()),
    "dgx-h100-unregistered": ("fail", "gputopo: nvlink-fabric gpus0-7 ", set()),
    "dgx-h100-p2p-not-ok": ("warn", "gputopo: p2p-unsupported gpus2,5 NVML reports P2P read NS", set()),
    "dgx-h100-nvlink-at-pcie": ("pass", None, set()),  # only copies show it (`gputopo gate`)
    "dgx-h100-reset-pending": ("fail", "gputopo: xid gpu3 ", set()),
    "h100-nics-one-socket": ("pass", None, set()),  # nic-far is an info
    "h100-pcie-1gpu": ("pass", None, {"nvlink", "fabric", "nic"}),
    "h100-sxm-1gpu": ("pass", None, {"nvlink", "fabric", "nic"}),
    "h100-sxm-shared-vm": ("pass", None, {"nvlink", "fabric", "nic"}),  # the fabric mask: an info, never a failure
    "h200-1gpu": ("pass", None, {"nvlink", "fabric", "nic"}),
    "pcie-4gpu": ("pass", None, {"nvlink", "fabric", "nic"}),
    "seed-8gpu": ("warn", "gputopo: iommu host the IOMMU translates DMA; gputopo: acs gpus0-7 ", {"fabric", "nic"}),
    "seed-8gpu-healthy": ("pass", None, {"fabric", "nic"}),
    "synthetic-1gpu": ("pass", None, {"nvlink", "fabric", "nic"}),
}
CODES = {  # dialect -> verdict -> exit code (docs/fleet.md's table)
    "json": {"pass": 0, "warn": 0, "fail": 1, "not-judged": 2},
    "npd": {"pass": 0, "warn": 0, "fail": 1, "not-judged": 2},
    "nagios": {"pass": 0, "warn": 1, "fail": 2, "not-judged": 3},
    "slurm-healthcheck": {"pass": 0, "warn": 0, "fail": 0, "not-judged": 0},
}


def test_the_table_covers_every_built_in():
    assert set(builtin_names()) <= set(EXPECTED)
    assert set(dialects_of("health")) == set(CODES)


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    db = tmp_path_factory.mktemp("health-history") / "history.sqlite"
    return {name: run_passive(lambda name=name: scan_simulated(name), 60.0, db, name, [], record=False)
            for name in EXPECTED}


@pytest.mark.parametrize("dialect", sorted(CODES))
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_verdict_exit_code_and_output(verdicts, name, dialect):
    v = verdicts[name]
    want, reason, not_applicable = EXPECTED[name]
    assert v.verdict == want, (name, [(c.name, c.status) for c in v.checks])
    assert not_applicable <= set(v.not_applicable()), v.summary()
    assert "fail" not in {c.status for c in v.checks if c.applicability == "not-applicable"}
    assert exit_code(dialect, v.verdict) == CODES[dialect][want]
    out = render(dialect, v, "n1 not drained: nothing to do")
    if reason:
        assert v.reason().startswith(reason) and re.match(REASON_PATTERN, v.reason())
    if dialect == "json":
        doc = json.loads(out)
        assert doc["verdict"] == want and doc["level"] == "passive" and doc["simulated"] is True
        assert {c["name"] for c in doc["checks"]} >= {"gpus", "nvlink", "fabric", "pcie", "kernel-log", "nic", "history"}
        assert all(c["basis"] for c in doc["checks"])  # each says what it was judged against, or why not
        assert (doc["reason"] or "").startswith(reason or "")
        said = {f["message"] for c in doc["checks"] for f in c["findings"]}
        assert said == {f.message for f in v.findings}  # every finding, infos included, is said
    elif dialect == "npd":
        assert "\n" not in out and len(out.encode()) <= NPD_BYTES
        if reason:
            assert re.match(REASON_PATTERN, out) and out.startswith(reason[:len(out)].rsplit(" ", 1)[0])
        else:
            assert out.startswith("gputopo ok: SIMULATED ")
    elif dialect == "nagios":
        first, *more = out.splitlines()
        word = {"pass": "OK", "warn": "WARNING", "fail": "CRITICAL"}[want]
        assert first.startswith(f"{word} - ") and " | time=" in first
        assert f"SIMULATED machine '{name}'" in more[0]
        if reason:
            assert first.startswith(f"{word} - {reason}")
    else:
        assert "\n" not in out and out.startswith(f"gputopo health: SIMULATED {want}: ")
        assert out.endswith("; node: n1 not drained: nothing to do")


def test_growing_counters_warn_once_the_history_has_the_day_before(tmp_path):
    db = tmp_path / "history.sqlite"
    day1 = run_passive(lambda: scan_simulated("dgx-a100-crc-day1"), 60.0, db, "dgx-a100-crc-day1", [])
    assert day1.verdict == "pass" and "history" not in day1.judged()  # nothing to compare with yet
    day2 = run_passive(lambda: scan_simulated("dgx-a100-crc-day2"), 60.0, db, "dgx-a100-crc-day2", [])
    assert day2.verdict == "warn" and "history" in day2.judged()
    assert day2.reason().startswith("gputopo: counter-growth gpu0 ")
    grown = [f for f in day2.findings if f.kind == "counter-growth"]
    assert len(grown) == 8 and all(f.evidence for f in grown)


def test_a_scan_recorded_only_when_due(tmp_path):
    """Health checks every few seconds do not fill the history: the same counters again within
    the hour are not recorded; a change is."""
    import sqlite3

    db = tmp_path / "history.sqlite"
    for _ in range(3):
        run_passive(lambda: scan_simulated("dgx-a100-crc-day1"), 60.0, db, "dgx-a100-crc-day1", [])
    run_passive(lambda: scan_simulated("dgx-a100-crc-day2"), 60.0, db, "dgx-a100-crc-day2", [])
    rows = sqlite3.connect(db).execute("SELECT sim_name FROM runs ORDER BY id").fetchall()
    assert rows == [("dgx-a100-crc-day1",), ("dgx-a100-crc-day2",)]


def test_a_history_that_cannot_be_read_is_not_judged_never_a_failure(tmp_path):
    db = tmp_path / "history.sqlite"
    db.write_bytes(b"not a database" * 100)
    v = run_passive(lambda: scan_simulated("dgx-a100"), 60.0, db, "dgx-a100", [])
    hist = next(c for c in v.checks if c.name == "history")
    assert hist.applicability == "not-judged" and str(db) in hist.basis
    assert v.verdict == "pass"  # judged by the other checks; the history's absence is said, not blamed
