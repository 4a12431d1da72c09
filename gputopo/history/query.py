"""Read the history: list runs, a machine's baseline figures, the last scans' counters.

The baseline of a figure is the median of the same machine's last N runs that had no error
finding (and completed), at the same pair, series, direction, size and time source. The
machine key separates simulated from real machines, so the two never share a baseline.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
from dataclasses import dataclass
from typing import Any

from .record import MachineIdentity

#: (gpus "5,6", series, direction, size_bytes, timing) -> the figure's identity across runs.
FigureKey = tuple[str, str, str | None, int, str]
#: (gpu uuid, counter, link) -> one counter's identity across scans.
CounterKey = tuple[str, str, int | None]


@dataclass
class BaselineFigure:
    median_gbps: float
    runs: int  # how many runs the median is over
    link_class: str | None
    first_s: float
    last_s: float


def machine_id(conn: sqlite3.Connection, identity: MachineIdentity) -> int | None:
    row = conn.execute("SELECT id FROM machines WHERE key = ?", (identity.key,)).fetchone()
    return int(row[0]) if row else None


def baseline(conn: sqlite3.Connection, mid: int, runs: int = 5,
             before_s: float | None = None, size_bytes: int | None = None) -> dict[FigureKey, BaselineFigure]:
    """Median GB/s per headline figure (the size each series is judged at; drift compares
    nothing else) over the machine's last ``runs`` complete error-free runs that measured
    something (before ``before_s`` when given). With ``size_bytes``: every figure measured at
    that size instead, headline or not (`gate` copies at one size of its own)."""
    ids = baseline_run_ids(conn, mid, runs, before_s)
    if not ids:
        return {}
    marks = ",".join("?" * len(ids))
    which, args = ("f.size_bytes = ?", [size_bytes]) if size_bytes is not None else ("f.headline = 1", [])
    values: dict[FigureKey, list[tuple[float, str | None, float]]] = {}
    for gpus, series, direction, size, timing, gbps, lc, t in conn.execute(
            "SELECT f.gpus, f.series, f.direction, f.size_bytes, f.timing, f.gbps, f.link_class, r.time_s "
            f"FROM figures f JOIN runs r ON r.id = f.run_id WHERE f.run_id IN ({marks}) "
            f"AND f.gbps IS NOT NULL AND {which}", (*ids, *args)):
        values.setdefault((gpus, series, direction, size, timing), []).append((gbps, lc, t))
    return {k: BaselineFigure(statistics.median(g for g, _lc, _t in v), len(v), v[0][1],
                              min(t for *_x, t in v), max(t for *_x, t in v))
            for k, v in values.items()}


def baseline_run_ids(conn: sqlite3.Connection, mid: int, runs: int = 5,
                     before_s: float | None = None) -> list[int]:
    """The runs a baseline is the median of, newest first (see ``baseline``)."""
    sql = ("SELECT id FROM runs WHERE machine_id = ? AND errors = 0 AND status = 'complete' "
           "AND EXISTS (SELECT 1 FROM figures f WHERE f.run_id = runs.id AND f.gbps IS NOT NULL)")
    args: list[Any] = [mid]
    if before_s is not None:
        sql += " AND time_s < ?"
        args.append(before_s)
    return [r[0] for r in conn.execute(sql + " ORDER BY time_s DESC, id DESC LIMIT ?", (*args, runs))]


@dataclass
class LayoutSeen:
    """The most NVLinks a GPU or pair had in the runs read, and the run that saw it."""

    link_class: str | None
    nvlinks: int
    fabric: str | None
    run_id: int
    time_s: float


#: How many of the machine's latest runs that recorded a layout `gate` reads its declared layer from.
LAYOUT_RUNS = 10


def layout_history(conn: sqlite3.Connection, mid: int, runs: int = LAYOUT_RUNS
                   ) -> tuple[list[int], dict[tuple[str, ...], LayoutSeen]]:
    """What the machine's last ``runs`` runs with a layout saw of each GPU and pair (keyed by UUIDs,
    record.py LayoutRow): the row with the most NVLinks (the newest of equals), so that a fault a
    later scan recorded does not become what the machine should be. (run ids newest first, rows)."""
    ids = [r[0] for r in conn.execute(
        "SELECT id FROM runs WHERE machine_id = ? AND EXISTS (SELECT 1 FROM layout l WHERE l.run_id = runs.id) "
        "ORDER BY time_s DESC, id DESC LIMIT ?", (mid, runs))]
    out: dict[tuple[str, ...], LayoutSeen] = {}
    if not ids:
        return ids, out
    marks = ",".join("?" * len(ids))
    for uuids, lc, nvlinks, fabric, rid, t in conn.execute(
            "SELECT l.uuids, l.link_class, l.nvlinks, l.fabric, r.id, r.time_s FROM layout l JOIN runs r "
            f"ON r.id = l.run_id WHERE l.run_id IN ({marks}) ORDER BY r.time_s DESC, r.id DESC", ids):
        key = tuple(uuids.split(" "))
        seen = out.get(key)
        if seen is None or int(nvlinks) > seen.nvlinks:
            out[key] = LayoutSeen(lc, int(nvlinks), fabric if seen is None else fabric or seen.fabric, rid, t)
        elif fabric and not seen.fabric:
            seen.fabric = fabric
    return ids, out


def counter_run_ids(conn: sqlite3.Connection, mid: int, scans: int = 3,
                    before_s: float | None = None) -> list[int]:
    """The last ``scans`` runs that read error counters, newest first (see ``counter_history``)."""
    sql = "SELECT id FROM runs WHERE machine_id = ? AND EXISTS (SELECT 1 FROM counters c WHERE c.run_id = runs.id)"
    args: list[Any] = [mid]
    if before_s is not None:
        sql += " AND time_s < ?"
        args.append(before_s)
    return [r[0] for r in conn.execute(sql + " ORDER BY time_s DESC, id DESC LIMIT ?", (*args, scans))]


def run_refs(conn: sqlite3.Connection, ids: list[int]) -> list[dict[str, Any]]:
    """Who each run is, for a reader: id, time (and its source), command, run folder; in ``ids``' order."""
    if not ids:
        return []
    marks = ",".join("?" * len(ids))
    rows = {r[0]: r for r in conn.execute(
        f"SELECT id, time_s, time_source, command, run_dir FROM runs WHERE id IN ({marks})", ids)}
    return [{"id": i, "time_s": rows[i][1], "time_source": rows[i][2], "command": rows[i][3],
             "run_dir": rows[i][4]} for i in ids if i in rows]


def counter_history(conn: sqlite3.Connection, mid: int, scans: int = 3,
                    before_s: float | None = None) -> dict[CounterKey, list[tuple[float, int]]]:
    """Each counter's (time, value) over the machine's last ``scans`` runs that read counters,
    oldest first."""
    ids = counter_run_ids(conn, mid, scans, before_s)
    out: dict[CounterKey, list[tuple[float, int]]] = {}
    if not ids:
        return out
    marks = ",".join("?" * len(ids))
    for uuid, counter, link, value, t in conn.execute(
            "SELECT c.gpu_uuid, c.counter, c.link, c.value, r.time_s FROM counters c JOIN runs r "
            f"ON r.id = c.run_id WHERE c.run_id IN ({marks}) ORDER BY r.time_s, r.id", ids):
        out.setdefault((uuid, counter, link), []).append((t, value))
    return out


@dataclass
class RunFilter:
    machine: str | None = None  # hostname or sim name, substring
    since_s: float | None = None
    pair: tuple[int, int] | None = None
    link_class: str | None = None
    limit: int | None = None


def list_runs(conn: sqlite3.Connection, flt: RunFilter) -> list[dict[str, Any]]:
    """Runs newest first, each with its findings and (with --pair/--class) its headline figures."""
    where: list[str] = ["1 = 1"]
    args: list[Any] = []
    if flt.machine:
        where.append("(m.hostname LIKE ? OR coalesce(r.sim_name, '') LIKE ?)")
        args += [f"%{flt.machine}%"] * 2
    if flt.since_s is not None:
        where.append("r.time_s >= ?")
        args.append(flt.since_s)
    fig_where: str = ""
    fig_args: list[Any] = []
    if flt.pair:
        fig_where, fig_args = "f.gpus = ?", [f"{flt.pair[0]},{flt.pair[1]}"]
    elif flt.link_class:
        fig_where, fig_args = "f.link_class = ?", [flt.link_class]
    if fig_where:
        where.append(f"EXISTS (SELECT 1 FROM figures f WHERE f.run_id = r.id AND {fig_where})")
        args += fig_args
    sql = ("SELECT r.id, r.time_s, r.time_source, m.hostname, r.simulated, r.sim_name, r.command, "
           "r.fabric, r.status, r.verdict, r.errors, r.run_dir, r.argv, r.driver, r.judged "
           f"FROM runs r JOIN machines m ON m.id = r.machine_id WHERE {' AND '.join(where)} "
           "ORDER BY r.time_s DESC, r.id DESC")
    if flt.limit:
        sql += f" LIMIT {int(flt.limit)}"
    runs = []
    for row in conn.execute(sql, args):
        (rid, t, tsrc, host, sim, sim_name, cmd, fabric, status, verdict, errors, run_dir, argv,
         driver, judged) = row
        runs.append({"id": rid, "time_s": t, "time_source": tsrc, "hostname": host,
                     "simulated": bool(sim), "sim_name": sim_name, "command": cmd,
                     "fabric": fabric, "status": status, "verdict": verdict, "errors": errors,
                     "run_dir": run_dir, "argv": json.loads(argv), "driver": driver,
                     "judged": json.loads(judged) if judged else None,
                     "findings": [], "figures": []})
    _attach(conn, runs, fig_where, fig_args)
    return runs


def _attach(conn: sqlite3.Connection, runs: list[dict[str, Any]], fig_where: str, fig_args: list[Any]) -> None:
    """Findings of each run, and its headline figures matching the pair/class filter."""
    by_id = {r["id"]: r for r in runs}
    ids = list(by_id)
    for k in range(0, len(ids), 500):  # SQLite's limit on bound parameters
        chunk = ids[k:k + 500]
        marks = ",".join("?" * len(chunk))
        for rid, kind, sev, gpus, lc, msg, origin, evidence in conn.execute(
                f"SELECT run_id, kind, severity, gpus, link_class, message, origin, evidence "
                f"FROM findings WHERE run_id IN ({marks})", chunk):
            by_id[rid]["findings"].append({"kind": kind, "severity": sev, "gpus": _gpus(gpus),
                                           "link_class": lc, "message": msg, "origin": origin,
                                           "evidence": json.loads(evidence) if evidence else None})
        if not fig_where:
            continue
        for rid, gpus, lc, series, direction, size, gbps, metric, wrong, timing in conn.execute(
                "SELECT f.run_id, f.gpus, f.link_class, f.series, f.direction, f.size_bytes, f.gbps, "
                f"f.metric, f.wrong, f.timing FROM figures f WHERE f.run_id IN ({marks}) "
                f"AND f.headline = 1 AND {fig_where}", (*chunk, *fig_args)):
            by_id[rid]["figures"].append({"gpus": _gpus(gpus), "link_class": lc, "series": series,
                                          "direction": direction, "size_bytes": size, "gbps": gbps,
                                          "metric": metric, "wrong": wrong, "timing": timing})


def _gpus(text: str | None) -> list[int] | None:
    return [int(x) for x in text.split(",")] if text else None


def last_figures(conn: sqlite3.Connection, mid: int) -> tuple[float | None, list[dict[str, Any]]]:
    """The headline figures of the machine's newest run that measured any (for the exporter)."""
    row = conn.execute("SELECT r.id, r.time_s FROM runs r WHERE r.machine_id = ? AND EXISTS "
                       "(SELECT 1 FROM figures f WHERE f.run_id = r.id) ORDER BY r.time_s DESC, "
                       "r.id DESC LIMIT 1", (mid,)).fetchone()
    if not row:
        return None, []
    figs = [{"gpus": g, "link_class": lc, "series": s, "direction": d, "gbps": gbps, "wrong": wrong}
            for g, lc, s, d, gbps, wrong in conn.execute(
                "SELECT gpus, link_class, series, direction, gbps, wrong FROM figures WHERE "
                "run_id = ? AND headline = 1", (row[0],))]
    return float(row[1]), figs


def last_run_time(conn: sqlite3.Connection, mid: int) -> float | None:
    row = conn.execute("SELECT max(time_s) FROM runs WHERE machine_id = ?", (mid,)).fetchone()
    return float(row[0]) if row and row[0] is not None else None


def last_measured_drift(conn: sqlite3.Connection, mid: int
                        ) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The machine's last run that measured figures (its id, command and time) and the `drift`
    findings the history made of it: what a check that measures nothing (`gputopo health`) says of
    the machine's speed against its own past. (None, []) when no run measured anything."""
    row = conn.execute("SELECT id, command, time_s, time_source FROM runs WHERE machine_id = ? AND EXISTS "
                       "(SELECT 1 FROM figures f WHERE f.run_id = runs.id AND f.gbps IS NOT NULL) "
                       "ORDER BY time_s DESC, id DESC LIMIT 1", (mid,)).fetchone()
    if row is None:
        return None, []
    run = {"id": int(row[0]), "command": row[1], "time_s": float(row[2]), "time_source": row[3]}
    found = [{"kind": k, "severity": s, "gpus": _gpus(g), "link_class": lc, "message": m,
              "evidence": json.loads(ev) if ev else {}}
             for k, s, g, lc, m, ev in conn.execute(
                 "SELECT kind, severity, gpus, link_class, message, evidence FROM findings "
                 "WHERE run_id = ? AND origin = 'history' AND kind = 'drift'", (run["id"],))]
    return run, found
