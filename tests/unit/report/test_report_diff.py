"""`gputopo diff A B`: regressions per pair and class, new and gone findings."""

from __future__ import annotations

import json

import pytest

from conftest_report import measurements, write_run
from gputopo.report.diff import DEFAULT_THRESHOLD, diff_runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("diff")
    return (write_run(base / "healthy", []), write_run(base / "faulty", ["corrupt-sys", "slow-pair", "iommu"]))


def test_same_run_has_no_regressions(runs):
    healthy, _ = runs
    d = diff_runs(healthy, healthy)
    assert not d.has_regressions and d.regressions == 0
    assert not d.new_findings and not d.gone_findings and not d.bandwidth_down


def test_regressions_from_healthy_to_faulty(runs):
    healthy, faulty = runs
    d = diff_runs(healthy, faulty)
    assert d.has_regressions
    down = {(c.where, c.series) for c in d.bandwidth_down}
    assert ("pair 0,2", "p2p.copy") in down
    assert ("class NODE", "p2p.copy") not in down  # one slow pair of eight leaves the median
    kinds = {(f.kind, tuple(f.gpus or ())) for f in d.new_findings}
    assert ("corrupt", (0, 4)) in kinds and ("slow", (0, 2)) in kinds and ("iommu", ()) in kinds
    worse = {v["where"]: (v["before"], v["after"]) for v in d.verdicts_worse}
    assert worse["class SYS"] == ("ok", "broken") and worse["pair 0,2"] == ("ok", "degraded")
    text = d.text()
    assert "SIMULATED" in text and "bandwidth down: pair 0,2 p2p.copy" in text and "new finding: error corrupt" in text
    doc = json.loads(json.dumps(d.to_json()))
    assert doc["regressions"] == d.regressions and doc["threshold"] == DEFAULT_THRESHOLD


def test_findings_gone_when_fixed(runs):
    healthy, faulty = runs
    d = diff_runs(faulty, healthy)
    assert {f.kind for f in d.gone_findings} >= {"corrupt", "slow", "iommu"}
    assert not d.new_findings and not d.verdicts_worse
    assert ("pair 0,2", "p2p.copy") in {(c.where, c.series) for c in d.bandwidth_up}
    assert not d.has_regressions


def test_threshold(tmp_path):
    a = write_run(tmp_path / "a", [])
    ms = measurements([])
    for m in ms:
        if m.gpus == (0, 1) and m.test == "p2p.copy":
            m.samples_s = [t / 0.92 for t in m.samples_s]  # 8 % slower
    b = write_run(tmp_path / "b", [], meas=ms)
    assert not diff_runs(a, b).bandwidth_down
    assert {c.where for c in diff_runs(a, b, threshold=0.05).bandwidth_down} == {"pair 0,1"}


def test_pairs_only_in_one_run(tmp_path):
    a = write_run(tmp_path / "a", [], meas=measurements([], pairs=[(0, 1), (5, 6)]), nums=[])
    b = write_run(tmp_path / "b", [], meas=measurements([], pairs=[(0, 1)]), nums=[])
    d = diff_runs(a, b)
    assert not d.has_regressions  # a pair not measured in B is listed, not a regression
    assert d.only_in_a == ["pair 5,6 (measured)"] and d.only_in_b == []
