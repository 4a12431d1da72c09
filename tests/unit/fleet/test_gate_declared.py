"""`gputopo gate`'s declared layer from the machine's own history (gputopo/fleet/gate_declared.py,
judged in gputopo/fleet/gate.py): a lab box's healthy scan is recorded through the real recording
path (gputopo/recording.py record_scan) into a database made here, then the same box (same name,
so the same hostname and GPU UUIDs: the same machine key) is scanned with its NVLink bridge 0-1
gone. The scans are the real probe's on the fake NVML; only the copies are written by hand."""

import sqlite3
from pathlib import Path
import pytest

import gputopo.history.db as hdb
from gputopo.bench.options import all_pairs
from gputopo.fleet.gate import judge_gate
from gputopo.fleet.gate_declared import read_declared
from gputopo.history.db import open_history
from gputopo.history.query import layout_history, machine_id
from gputopo.history.record import machine_identity
from gputopo.model import Measurement
from gputopo.recording import record_scan
from gputopo.report.rules import scan_findings
from gputopo.sim.scan import scan_simulated
from helpers.gate_box import box

SIZE = 4 << 20


def record(db: Path, sim: str) -> None:
    topo = scan_simulated(sim)
    record_scan(db, topo, scan_findings(topo), ["scan", "--sim", sim], sim)


def copies(topo, gbps=None):
    """Both copies of every pair at ``gbps`` (default: 80 GB/s over NVLink, 24 over PCIe, the sim's)."""
    out = []
    for a, b in all_pairs(range(len(topo.gpus))):
        lc = topo.link_class(a, b)
        rate = gbps if gbps is not None else 80.0 if lc.is_nvlink else 24.0
        out += [Measurement("p2p.copy", (a, b), SIZE, [SIZE / rate / 1e9], "modeled", "sim", "simulated-gpus",
                            str(lc), d, wrong=0) for d in (f"{a}->{b}", f"{b}->{a}")]
    return out


def gate(sim, db):
    topo = scan_simulated(sim)
    declared = read_declared(db, topo, SIZE)
    gpus = list(range(len(topo.gpus)))
    v = judge_gate(topo, scan_findings(topo), gpus, {"gpus": gpus, "source": "test"},
                   measurements=copies(topo), fabric_name="sim", budget_s=10, used_s=1, time_s=0,
                   declared=declared)
    return v, declared


def test_a_bridge_the_history_saw_and_the_scan_does_not_is_a_degraded_link(tmp_path):
    db = tmp_path / "h.sqlite"
    record(db, box(tmp_path, "good"))
    v, declared = gate(box(tmp_path, "bad", bridge_01=False, day=5), db)
    assert declared.known and not declared.why_none and declared.runs == 1
    gpus = {g.index: g for g in v.gpus}
    pairs = {p.gpus: p for p in v.pairs}
    for g in (0, 1):
        j = gpus[g].judgement
        assert (j.status, j.scope, j.kind) == ("degraded", "link", "nvlink-down")
        assert "0 active NVLink(s), 4 in this machine's history (run 1 of 2026-11-01)" in j.detail
        assert gpus[g].layers["declared"].startswith("this machine's history: 4 active NVLink(s)")
    for g in (2, 3):  # their bridge is still there
        assert gpus[g].judgement.status == "ok"
    lost = pairs[(0, 1)]
    assert lost.link_class == "PHB" and lost.layers["declared"].startswith("this machine's history: NV4")
    assert (lost.judgement.status, lost.judgement.scope) == ("degraded", "link")
    assert lost.judgement.evidence["explained_by"] in ("gpu0", "gpu1")  # named once, on its GPUs
    assert pairs[(2, 3)].layers["declared"].startswith("this machine's history: NV4")
    assert v.verdict == "warn"
    assert [s for s, _j, _a in v.problems()] == ["gpu0", "gpu1"]


def test_the_declared_layer_is_the_most_nvlinks_of_the_last_runs_not_the_last_fault(tmp_path):
    """A scan recorded after the bridge went (health records scans) does not make the fault what
    the machine should be."""
    db = tmp_path / "h.sqlite"
    record(db, box(tmp_path, "good"))
    bad = box(tmp_path, "bad", bridge_01=False, day=5)
    record(db, bad)
    conn = open_history(db)
    try:
        ids, rows = layout_history(conn, machine_id(conn, machine_identity(scan_simulated(bad))))
    finally:
        conn.close()
    assert len(ids) == 2
    v, _declared = gate(bad, db)
    assert {p.gpus: p.judgement.status for p in v.pairs}[(0, 1)] == "degraded"
    again, _declared = gate(box(tmp_path, "good2", day=6), db)  # the bridge back: all as before
    assert {g.judgement.status for g in again.gpus} == {"ok"}
    assert not any(p.judgement.kind == "nvlink-down" for p in again.pairs)


def test_without_history_the_declared_layer_says_so_and_judges_as_before(tmp_path):
    sim = box(tmp_path, "bad", bridge_01=False)
    v, declared = gate(sim, tmp_path / "none.sqlite")
    assert declared.why_none.startswith("no history of this machine (no database at")
    assert all("declared: no history of this machine" in g.layers["declared"] for g in v.gpus)
    assert {g.judgement.status for g in v.gpus} == {"ok"}  # NVML alone flags nothing here
    other = tmp_path / "other.sqlite"
    record(other, "pcie-4gpu")  # another machine's history: not this one's
    _v, declared = gate(sim, other)
    assert declared.why_none == f"no history of this machine in {other}" and not declared.known


def test_a_database_of_version_2_gains_the_layout_table_and_keeps_its_runs(tmp_path, monkeypatch):
    path = tmp_path / "h.sqlite"
    monkeypatch.setattr(hdb, "MIGRATIONS", hdb.MIGRATIONS[:2])
    monkeypatch.setattr(hdb, "SCHEMA_VERSION", 2)
    conn = open_history(path)
    conn.execute("INSERT INTO machines (key, hostname, simulated, first_seen_s) VALUES ('k', 'h', 0, 1.0)")
    conn.execute("INSERT INTO runs (machine_id, command, time_s, time_source, recorded_s, argv, simulated, "
                 "status, verdict, errors) VALUES (1, 'scan', 1.0, 'wall', 1.0, '[]', 0, 'scan', NULL, 0)")
    conn.close()
    monkeypatch.undo()
    conn = open_history(path)
    try:
        assert hdb.schema_version(conn) == hdb.SCHEMA_VERSION >= 3
        assert conn.execute("SELECT count(*) FROM layout").fetchone()[0] == 0
    finally:
        conn.close()
    assert sqlite3.connect(path).execute("SELECT count(*) FROM runs").fetchone()[0] == 1


@pytest.mark.parametrize("gbps, status", [(24.0, "ok"), (7.0, "degraded")])
def test_a_pcie_pair_is_judged_against_the_machines_own_bench(tmp_path, gbps, status):
    """A PCIe pair has no declared rate; the machine's own bench figure at gate's size gives one."""
    from gputopo.history.query import BaselineFigure

    sim = box(tmp_path, "good")
    db = tmp_path / "h.sqlite"
    record(db, sim)
    topo = scan_simulated(sim)
    declared = read_declared(db, topo, SIZE)
    fig = BaselineFigure(24.5, 3, "NODE", 1.7619e9, 1.7619e9)
    declared.copies = {((0, 2), d, "modeled"): fig for d in ("0->2", "2->0")}
    ms = [m for m in copies(topo, gbps) if m.gpus == (0, 2)]
    v = judge_gate(topo, scan_findings(topo), [0, 2], {"gpus": [0, 2], "source": "test"}, measurements=ms,
                   fabric_name="sim", budget_s=10, used_s=1, time_s=0, declared=declared)
    (pair,) = v.pairs
    assert pair.judgement.status == status
    assert "this machine's own bench of 2025-10-31 (3 run(s), median 24.5 GB/s" in pair.judgement.detail
