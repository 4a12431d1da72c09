"""The history database (issue 19): schema and migrations, one transaction per run, two
writers at once, bad databases refused in one line; drift and counter-growth measured from
recorded runs and judged by report/history_findings.py."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import time
from pathlib import Path

import pytest

from gputopo.history import db as hdb
from gputopo.history.counters import growth
from gputopo.history.db import HistoryError, open_history
from gputopo.history.query import (
    RunFilter,
    baseline,
    counter_history,
    list_runs,
    machine_id,
)
from gputopo.history.record import (
    CounterValue,
    Figure,
    MachineIdentity,
    RunRecord,
    record_run,
)
from gputopo.recording import save
from helpers.paths import REPO, TESTS

#: This file's folder: the killed writer imports this module from there.
HERE = Path(__file__).resolve().parent
DAY = 86400.0
T0 = 1_790_000_000.0


def machine(simulated=False, host="node07"):
    return MachineIdentity(host, simulated, "box" if simulated else None, "550.54",
                           [(0, "GPU-a", "0000:1b:00.0", "A100"), (1, "GPU-b", "0000:1c:00.0", "A100")])


def run(t, gbps=100.0, counters=(), errors=0, status="complete", gpus=(0, 1), series="p2p.copy"):
    figs = [Figure(gpus, "NV4", series, "0->1", 64 << 20, gbps, "algbw", 0, "cuda-events", True),
            Figure(gpus, "NV4", series, "0->1", 1 << 20, gbps / 2, "algbw", 0, "cuda-events", False)]
    return RunRecord("bench", t, "wall", ["bench"], None, False, None, "cuda", status, "ok", errors,
                     "test", figs, [], [CounterValue("GPU-a", 0, "0000:1b:00.0", "nvlink_recovery", 3, v)
                                    for v in counters])


def _mid(conn) -> int:
    mid = machine_id(conn, machine())
    assert mid is not None
    return mid


def test_new_database_has_the_current_schema_and_wal(tmp_path):
    conn = open_history(tmp_path / "sub" / "h.sqlite")
    assert hdb.schema_version(conn) == hdb.SCHEMA_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_a_newer_schema_is_refused_in_one_line(tmp_path):
    path = tmp_path / "h.sqlite"
    open_history(path).close()
    c = sqlite3.connect(path)
    c.execute("UPDATE schema_version SET version = ?", (hdb.SCHEMA_VERSION + 1,))
    c.commit()
    c.close()
    with pytest.raises(HistoryError) as e:
        open_history(path)
    assert "newer" in str(e.value) and "\n" not in str(e.value)


def test_migrations_run_in_order_from_an_old_version(tmp_path, monkeypatch):
    """A database at version 1 gets migration 2 (a test migration) and says version 2."""
    path = tmp_path / "h.sqlite"
    open_history(path).close()
    extra = ("a test column", lambda c: c.executescript("ALTER TABLE runs ADD COLUMN note TEXT"))
    monkeypatch.setattr(hdb, "MIGRATIONS", hdb.MIGRATIONS + [extra])
    monkeypatch.setattr(hdb, "SCHEMA_VERSION", len(hdb.MIGRATIONS))
    conn = open_history(path)
    assert hdb.schema_version(conn) == hdb.SCHEMA_VERSION
    assert "note" in [r[1] for r in conn.execute("PRAGMA table_info(runs)")]


@pytest.mark.parametrize("content", [b"this is not a database at all" * 100, b""])
def test_corrupt_or_foreign_files_are_refused(tmp_path, content):
    path = tmp_path / "h.sqlite"
    path.write_bytes(content)
    if not content:  # an empty file is a new database: fine
        open_history(path).close()
        return
    with pytest.raises(HistoryError) as e:
        open_history(path)
    assert "corrupt" in str(e.value)


def test_a_database_of_another_program_is_refused(tmp_path):
    path = tmp_path / "h.sqlite"
    c = sqlite3.connect(path)
    c.execute("CREATE TABLE t (x)")
    c.commit()
    c.close()
    with pytest.raises(HistoryError, match="not a gputopo history"):
        open_history(path)


@pytest.mark.serial  # a wall-time bound: run alone, after the parallel part
def test_a_locked_database_is_refused_after_the_busy_timeout(tmp_path, monkeypatch):
    path = tmp_path / "h.sqlite"
    open_history(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    monkeypatch.setattr(hdb, "BUSY_TIMEOUT_S", 0.2)
    try:
        started = time.monotonic()
        with pytest.raises(HistoryError, match="locked"):
            save(path, machine(), run(T0))
        assert time.monotonic() - started < 10
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert save(path, machine(), run(T0)).run_id == 1  # free again: it records


def test_a_run_that_fails_mid_write_leaves_nothing(tmp_path):
    path = tmp_path / "h.sqlite"
    conn = open_history(path)
    bad = run(T0)
    bad.findings = [{"kind": "slow"}]  # no severity: the findings insert fails after runs/figures
    with pytest.raises(KeyError):
        record_run(conn, machine(), bad)
    assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM figures").fetchone()[0] == 0
    record_run(conn, machine(), run(T0))
    assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 1


def _writer(path, k, n):
    for i in range(n):
        save(path, machine(host=f"w{k}"), run(T0 + i))


@pytest.mark.slow
def test_two_writers_at_once_lose_nothing(tmp_path):
    path = tmp_path / "h.sqlite"
    open_history(path).close()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(path), k, 15)) for k in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    conn = open_history(path)
    assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 30
    assert conn.execute("SELECT count(*) FROM figures").fetchone()[0] == 60
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_baseline_is_the_median_of_error_free_complete_runs_of_the_same_machine(tmp_path):
    path = tmp_path / "h.sqlite"
    for k, g in enumerate([100, 90, 110, 10, 105]):
        save(path, machine(), run(T0 + k * DAY, gbps=g, errors=1 if g == 10 else 0))
    save(path, machine(), run(T0 + 6 * DAY, gbps=5, status="interrupted"))
    save(path, machine(simulated=True), run(T0 + 7 * DAY, gbps=1))  # a sim: never in the real baseline
    conn = open_history(path)
    base = baseline(conn, _mid(conn), runs=5)
    b = base[("0,1", "p2p.copy", "0->1", 64 << 20, "cuda-events")]
    assert b.runs == 4 and b.median_gbps == pytest.approx(102.5)
    b3 = baseline(conn, _mid(conn), runs=3)[("0,1", "p2p.copy", "0->1", 64 << 20, "cuda-events")]
    assert b3.median_gbps == pytest.approx(105)  # 90, 110, 105


def test_drift_is_a_warning_below_the_fraction_and_only_then(tmp_path):
    path = tmp_path / "h.sqlite"
    for k in range(3):
        assert save(path, machine(), run(T0 + k * DAY, gbps=100)).findings == []
    ok = save(path, machine(), run(T0 + 3 * DAY, gbps=85))
    assert ok.findings == []  # 85 % of the baseline: above 80 %
    low = save(path, machine(), run(T0 + 4 * DAY, gbps=60))
    (f,) = low.findings
    assert f.kind == "drift" and f.severity == "warning" and f.gpus == [0, 1]
    # the median of 100, 100, 100, 85 is 100: 60 / 100
    assert f.evidence["baseline_gbps"] == pytest.approx(100) and f.evidence["ratio"] == pytest.approx(0.6)
    assert "60.0 GB/s" in f.message and "baseline" in f.message
    other = save(path, machine(), run(T0 + 5 * DAY, gbps=60, series="p2p.staged"))
    assert other.findings == []  # another series has no baseline: nothing judged


def test_counter_growth_warns_then_errors_when_the_rate_keeps_rising(tmp_path):
    path = tmp_path / "h.sqlite"
    got = [save(path, machine(), run(T0 + k * DAY, counters=[v])).findings
           for k, v in enumerate([0, 0, 2, 6, 14, 30])]
    assert got[0] == [] and got[1] == []
    (g2,) = got[2]
    assert g2.kind == "counter-growth" and g2.severity == "warning"
    assert g2.evidence["delta"] == 2 and g2.evidence["rate_per_day"] == pytest.approx(2.0)
    assert g2.evidence["link"] == 3 and g2.evidence["counter"] == "nvlink_recovery"
    assert got[3][0].severity == "warning"  # two rising intervals: not yet three
    (g4,) = got[4]  # 2, 4, 8 per day: three intervals, each faster
    assert g4.severity == "error" and g4.evidence["keeps_rising"]
    assert g4.evidence["since"] == g2.evidence["time"]  # growing at every scan since scan 2
    assert got[5][0].severity == "error"


def test_counter_growth_at_a_steady_rate_stays_a_warning_and_a_reset_starts_over(tmp_path):
    path = tmp_path / "h.sqlite"
    found = [save(path, machine(), run(T0 + k * DAY, counters=[v])).findings
             for k, v in enumerate([0, 5, 10, 15, 20])]
    assert [f[0].severity for f in found[1:]] == ["warning"] * 4
    after_reset = save(path, machine(), run(T0 + 5 * DAY, counters=[1])).findings
    assert after_reset == []  # fell (driver reload): not growth
    again = save(path, machine(), run(T0 + 6 * DAY, counters=[4])).findings
    assert again[0].evidence["previous"] == 1 and again[0].severity == "warning"


def test_growth_with_no_time_between_scans_says_so():
    now = T0
    cur = [CounterValue("GPU-a", 0, None, "pcie_replay", None, 9)]
    (g,) = growth(cur, now, {("GPU-a", "pcie_replay", None): [(now, 3)]})
    assert g.rate_per_day is None and g.delta == 6 and not g.keeps_rising


def test_list_runs_filters(tmp_path):
    path = tmp_path / "h.sqlite"
    for k in range(4):
        save(path, machine(), run(T0 + k * DAY))
    save(path, machine(host="other"), run(T0 + 5 * DAY, gpus=(2, 3)))
    conn = open_history(path)
    assert len(list_runs(conn, RunFilter())) == 5
    assert len(list_runs(conn, RunFilter(machine="other"))) == 1
    assert len(list_runs(conn, RunFilter(since_s=T0 + 2 * DAY))) == 3
    runs = list_runs(conn, RunFilter(pair=(0, 1)))
    assert len(runs) == 4 and all(r["figures"][0]["gbps"] == 100.0 for r in runs)
    assert len(runs[0]["figures"]) == 1  # headline figures only
    assert len(list_runs(conn, RunFilter(link_class="NV4"))) == 5
    assert list_runs(conn, RunFilter(link_class="SYS")) == []
    assert counter_history(conn, _mid(conn)) == {}


def test_a_folder_recorded_again_keeps_its_figures_once(tmp_path):
    """`gputopo check DIR` of a recorded bench run adds a run row, not the figures again."""
    path = tmp_path / "h.sqlite"
    first, again = run(T0, gbps=100), run(T0 + DAY, gbps=100)
    first.run_dir = again.run_dir = "/reports/one"
    save(path, machine(), first)
    save(path, machine(), again)
    conn = open_history(path)
    assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 2
    assert conn.execute("SELECT count(DISTINCT run_id) FROM figures").fetchone()[0] == 1


def test_a_folder_judged_again_later_is_compared_with_the_runs_before_it(tmp_path):
    """`check DIR` of an old run folder: its baseline is the runs before that run, not the
    later ones (nor itself), and it keeps that run's time."""
    path = tmp_path / "h.sqlite"
    old = run(T0, gbps=50)
    old.run_dir = "/reports/old"
    save(path, machine(), old)
    save(path, machine(), run(T0 + DAY, gbps=100))
    save(path, machine(), run(T0 + 2 * DAY, gbps=100))
    again = run(T0 + 30 * DAY, gbps=50)
    again.run_dir = "/reports/old"
    assert save(path, machine(), again).findings == []  # nothing before it: no baseline, no drift
    assert again.time_s == T0


def test_a_class_that_drifts_as_a_whole_is_one_class_finding_beside_its_pairs(tmp_path):
    def node_run(t, gbps, slow_pair_gbps=None):
        rec = run(t)
        rec.figures = [Figure(p, "NODE", "p2p.copy", f"{p[0]}->{p[1]}", 64 << 20,
                              slow_pair_gbps if (slow_pair_gbps and p == (0, 2)) else gbps, "algbw",
                              0, "cuda-events", True) for p in ((0, 2), (1, 3), (0, 3))]
        return rec

    path = tmp_path / "h.sqlite"
    for k in range(3):
        save(path, machine(), node_run(T0 + k * DAY, 25.0))
    one = save(path, machine(), node_run(T0 + 3 * DAY, 25.0, slow_pair_gbps=10.0)).findings
    assert [(f.evidence["scope"], f.gpus) for f in one] == [("pair", [0, 2])]  # the class median holds
    everyone = save(path, machine(), node_run(T0 + 4 * DAY, 12.0)).findings
    scopes = sorted(f.evidence["scope"] for f in everyone)
    assert scopes == ["class", "pair", "pair", "pair"]
    (cls,) = [f for f in everyone if f.evidence["scope"] == "class"]
    assert cls.link_class == "NODE" and cls.gpus is None and "NODE pairs (median of 3)" in cls.message


def test_a_resumed_folder_is_recorded_with_its_figures_after_an_interrupted_recording(tmp_path):
    path = tmp_path / "h.sqlite"
    part = run(T0, status="interrupted")
    part.run_dir = "/reports/resumed"
    save(path, machine(), part)
    done = run(T0 + 60)
    done.run_dir = "/reports/resumed"
    save(path, machine(), done)
    conn = open_history(path)
    rows = conn.execute("SELECT r.status, count(f.run_id) FROM runs r LEFT JOIN figures f ON f.run_id = r.id "
                        "GROUP BY r.id ORDER BY r.id").fetchall()
    assert rows == [("interrupted", 2), ("complete", 2)]
    assert len(baseline(conn, _mid(conn))) == 1  # the complete one is a baseline run


_KILLED_WRITER = r"""
import sys, time
sys.path.insert(0, {repo!r})
from gputopo.history.db import open_history
from gputopo.history.record import record_run
import test_history_db as t

class Stalls:
    '''Delegates to the connection; stalls forever at the counters insert (mid-transaction).'''
    def __init__(self, conn):
        self.conn = conn
    def execute(self, *a):
        return self.conn.execute(*a)
    def executemany(self, sql, rows):
        if "INTO counters" in sql:
            print("inside", flush=True)
            time.sleep(120)
        return self.conn.executemany(sql, rows)

record_run(Stalls(open_history({path!r})), t.machine(), t.run(t.T0, counters=[1, 2]))
"""


@pytest.mark.slow
def test_a_run_killed_mid_write_leaves_nothing_and_no_damage(tmp_path):
    import signal
    import subprocess
    import sys

    path = tmp_path / "h.sqlite"
    save(path, machine(), run(T0 - DAY))
    repo = str(REPO)
    code = _KILLED_WRITER.format(repo=repo, path=str(path))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            cwd=str(HERE), env={**os.environ, "PYTHONPATH": os.pathsep.join([repo, str(TESTS)])})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "inside"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(30)
    conn = open_history(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 1  # the earlier run only
    assert conn.execute("SELECT count(*) FROM figures").fetchone()[0] == 2
    conn.close()
    assert save(path, machine(), run(T0)).run_id == 2  # writable again at once
