"""The history keeps what each run's verdict judged (issue 46): every run is stored with its judged
record, a later run of the same machine whose series nothing else judges is judged against the
machine's own past and says that this is its only basis, `gputopo history` shows how much of each
run was judged, and `gputopo export` has a gauge of the newest run's series not judged.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from gputopo.export.cache import Snapshot
from gputopo.export.sources import history_reader
from gputopo.history import db as hdb
from gputopo.history.db import open_history
from gputopo.history.query import RunFilter, list_runs
from gputopo.report.run_folder import load_run
from helpers.cli import gputopo_here
from helpers.metric_samples import snapshot_samples


def _bench(tmp: Path, db: Path, n: int) -> tuple[Path, str]:
    """A bench whose series no published or theoretical rate judges (DataParallel's primitives on
    a V100 PXB pair)."""
    out = tmp / f"run{n}"
    rc, _out, err = gputopo_here("bench", "--sim", "pcie-4gpu", "--quick", "--pairs", "0,1", "--tests", "dp",
                                 "--out", out, env={"GPUTOPO_HISTORY": str(db)}, timeout=300)
    assert rc == 0, err
    return out, err


def _metric(snap: Snapshot, name: str) -> list[float]:
    return [s.value for s in snapshot_samples(snap) if s.name == name]


@pytest.mark.slow
def test_a_later_run_is_judged_against_the_machines_past_and_says_it_is_the_only_basis(tmp_path):
    db = tmp_path / "h.sqlite"
    first, _ = _bench(tmp_path, db, 1)
    doc1 = json.loads((first / "summary.json").read_text())
    assert doc1["verdict"] == "not-judged" and doc1["judged"]["series_judged"] == 0  # no past yet
    second, err = _bench(tmp_path, db, 2)
    doc2 = json.loads((second / "summary.json").read_text())
    n = doc2["judged"]["series"]
    assert doc2["verdict"] == "ok" and doc2["judged"]["bases"] == {"history": n} and doc2["judged"]["history_only"]
    assert "own past only" in doc2["verdict_detail"] and "own past only" in (second / "report.md").read_text()
    assert f"history: {n} series judged against this machine's own past only" in err and "now ok" in err
    conn = open_history(db, create=False)
    try:
        runs = list_runs(conn, RunFilter())
    finally:
        conn.close()
    stored = {r["run_dir"]: r["judged"] for r in runs}
    assert stored[str(first.resolve())]["series_not_judged"] == n  # each run stored with its coverage
    rc, out, _ = gputopo_here("history", env={"GPUTOPO_HISTORY": str(db)})
    assert rc == 0 and f"not-judged (0 of {n} series judged)" in out
    facts = history_reader(db)(load_run(second).topology)
    assert facts.series_not_judged == 0  # the newest run (the second): judged against the first
    snap = Snapshot(topology=None, findings=[], history=facts, scanned_s=1.0, scan_duration_s=0.1, scans=1,
                    scan_errors=0)
    assert _metric(snap, "gputopo_series_not_judged") == [0.0]


@pytest.mark.slow
def test_the_gauge_counts_the_newest_runs_series_not_judged(tmp_path):
    db = tmp_path / "h.sqlite"
    first, _ = _bench(tmp_path, db, 1)
    facts = history_reader(db)(load_run(first).topology)
    n = json.loads((first / "summary.json").read_text())["judged"]["series"]
    assert facts.series_not_judged == n > 0
    snap = Snapshot(topology=None, findings=[], history=facts, scanned_s=1.0, scan_duration_s=0.1, scans=1,
                    scan_errors=0)
    assert _metric(snap, "gputopo_series_not_judged") == [float(n)]


def test_a_database_of_version_1_gains_the_judged_column_and_keeps_its_runs(tmp_path, monkeypatch):
    path = tmp_path / "h.sqlite"
    monkeypatch.setattr(hdb, "MIGRATIONS", hdb.MIGRATIONS[:1])
    monkeypatch.setattr(hdb, "SCHEMA_VERSION", 1)
    conn = open_history(path)
    conn.execute("INSERT INTO machines (key, hostname, simulated, first_seen_s) VALUES ('k', 'h', 0, 1.0)")
    conn.execute("INSERT INTO runs (machine_id, command, time_s, time_source, recorded_s, argv, simulated, "
                 "status, verdict, errors) VALUES (1, 'bench', 1.0, 'wall', 1.0, '[]', 0, 'complete', 'ok', 0)")
    conn.close()
    monkeypatch.undo()
    conn = open_history(path)
    try:
        assert hdb.schema_version(conn) == hdb.SCHEMA_VERSION >= 2
        assert "judged" in [r[1] for r in conn.execute("PRAGMA table_info(runs)")]
        (old,) = list_runs(conn, RunFilter())
        assert old["verdict"] == "ok" and old["judged"] is None  # recorded before: not known
    finally:
        conn.close()
    assert sqlite3.connect(path).execute("SELECT count(*) FROM runs").fetchone()[0] == 1
