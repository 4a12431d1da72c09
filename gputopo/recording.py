"""Record a finished run in the machine's history and judge it against that history.

This sits above report and history (like jobs.py): it reads a finished run folder through the
report's Summary (or a scan's Topology), turns it into history records, compares it with the
same machine's baseline and earlier scans, lets report/ make the `drift` / `counter-growth`
findings, and writes everything in one transaction. It runs only after the run folder is
complete, so a database problem can never cost a measurement.
"""

from __future__ import annotations

import datetime as _dt
import time
from dataclasses import dataclass
from pathlib import Path

from gputopo import __version__
from gputopo.history.counters import SCANS_BACK, growth
from gputopo.history.db import open_history
from gputopo.history.drift import (
    DEFAULT_FRACTION,
    DEFAULT_RUNS,
    DriftPoint,
    drift_points,
    drifted,
)
from gputopo.history.query import baseline, counter_history, machine_id
from gputopo.history.record import (
    Figure,
    MachineIdentity,
    RunRecord,
    counters_of,
    layout_of,
    machine_identity,
    record_run,
)
from gputopo.model import Finding, Topology
from gputopo.report.judged import unjudged_keys, with_history


@dataclass
class Recorded:
    """What recording a run gave: its id and the findings made against the history, and the
    run folder's history_findings.json document (None for a scan, which has no folder)."""

    path: Path
    run_id: int
    findings: list[Finding]
    document: dict | None = None


def sim_clock(sim: str | None) -> float | None:
    """The ``clock`` of a simulated machine's description, when it sets one."""
    if not sim:
        return None
    from gputopo.sim.description import load_description

    return load_description(sim).clock


def _started_s(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return _dt.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def figures_of(summary) -> list[Figure]:
    """Every measured point of a run, the headline ones marked (report/headline.py decides which)."""
    from gputopo.report.headline import (
        link_class_of,
        measured_gbps,
        metric_of,
        series_name,
    )

    topo = summary.run.topology
    heads = {(h.series, tuple(h.gpus), h.direction, h.size_bytes) for h in summary.analysis.headlines}
    out = []
    for m in summary.run.measurements:
        series = series_name(m)
        out.append(Figure(gpus=tuple(m.gpus), link_class=link_class_of(topo, m), series=series,
                          direction=m.direction, size_bytes=int(m.size_bytes),
                          gbps=measured_gbps(m), metric=metric_of(m),
                          wrong=None if m.error is not None else int(m.wrong), timing=m.timing,
                          headline=(series, tuple(m.gpus), m.direction, m.size_bytes) in heads))
    return out


def record_from_summary(summary, command: str, argv: list[str], clock: float | None) -> tuple[MachineIdentity, RunRecord]:
    from gputopo.report.history_record import is_history_finding

    run, topo = summary.run, summary.run.topology
    # the folder's history_findings.json (an earlier recording's judgement) is not the run's own
    # finding: recorded as such it would count twice and keep the run out of every baseline
    own = [f for f in summary.findings if not is_history_finding(f)]
    sim_name = run.machine if run.simulated else None
    if topo is None:
        topo = Topology(gpus=[], pairs=[], machine=run.machine or "unknown", simulated=run.simulated)
    identity = machine_identity(topo, sim_name)
    t = clock if clock is not None else (_started_s(run.info.get("started")) or time.time())
    rec = RunRecord(command=command, time_s=t, time_source="sim-clock" if clock is not None else "wall",
                    argv=list(argv), run_dir=str(Path(run.path).resolve()), simulated=run.simulated,
                    sim_name=sim_name, fabric=run.fabric, status=str(run.info.get("status") or "unknown"),
                    verdict=summary.verdict, judged=summary.judged.to_json(),
                    unjudged=unjudged_keys(summary.judged),
                    errors=sum(1 for f in own if f.severity == "error"),
                    gputopo_version=__version__, figures=figures_of(summary),
                    findings=[f.to_json() for f in own], counters=counters_of(topo),
                    layout=layout_of(topo))
    return identity, rec


def record_from_scan(topo: Topology, findings: list[Finding], argv: list[str],
                     clock: float | None, command: str = "scan") -> tuple[MachineIdentity, RunRecord]:
    sim_name = topo.machine if topo.simulated else None
    rec = RunRecord(command=command, time_s=clock if clock is not None else time.time(),
                    time_source="sim-clock" if clock is not None else "wall", argv=list(argv),
                    run_dir=None, simulated=topo.simulated, sim_name=sim_name, fabric=None,
                    status="complete", verdict=None,
                    errors=sum(1 for f in findings if f.severity == "error"),
                    gputopo_version=__version__, findings=[f.to_json() for f in findings],
                    counters=counters_of(topo), layout=layout_of(topo))
    return machine_identity(topo, sim_name), rec


def history_findings(conn, identity: MachineIdentity, rec: RunRecord,
                     fraction: float = DEFAULT_FRACTION, runs: int = DEFAULT_RUNS) -> list[Finding]:
    """`drift` and `counter-growth` of this run against the history recorded before it."""
    from gputopo.report.history_findings import counter_growth_findings, drift_findings

    mid = machine_id(conn, identity)
    if mid is None:
        return []
    found = drift_findings(drifted(drift_points(rec.figures, baseline(conn, mid, runs, before_s=rec.time_s)),
                                   fraction), fraction)
    if rec.counters:
        found += counter_growth_findings(growth(rec.counters, rec.time_s,
                                                counter_history(conn, mid, SCANS_BACK, before_s=rec.time_s)))
    return found


def recorded_before(conn, rec: RunRecord) -> bool:
    """Whether ``rec``'s run folder is in the history already (`check DIR` of a bench run). If
    so, ``rec`` takes that run's time, so that its baseline is the runs before the folder's own
    run (the folder itself and later runs excluded), whenever it is judged."""
    if not rec.run_dir:
        return False
    # an interrupted recording of the folder does not count: a --resume that completes it is
    # recorded with its figures (the interrupted row never enters a baseline)
    row = conn.execute("SELECT time_s, time_source FROM runs WHERE run_dir = ? AND status = 'complete' "
                       "ORDER BY id LIMIT 1", (rec.run_dir,)).fetchone()
    if row is None:
        return False
    rec.time_s, rec.time_source = float(row[0]), str(row[1])
    return True


def compared_with(conn, identity: MachineIdentity, rec: RunRecord, found: list[Finding],
                  runs: int = DEFAULT_RUNS) -> dict:
    """The run folder's history_findings.json: the findings and the runs they were judged
    against (the same queries as ``history_findings``)."""
    from gputopo.history.query import baseline_run_ids, counter_run_ids, run_refs
    from gputopo.report.history_record import history_document

    mid = machine_id(conn, identity)
    base = run_refs(conn, baseline_run_ids(conn, mid, runs, rec.time_s)) if mid is not None else []
    counters = run_refs(conn, counter_run_ids(conn, mid, 1, rec.time_s)) if mid is not None else []
    # the series the baseline held: their basis is this machine's own past (report/judged.py)
    points = drift_points(rec.figures, baseline(conn, mid, runs, before_s=rec.time_s)) if mid is not None else []
    compared = [[p.series, list(p.gpus), p.direction] for p in points if p.scope == "pair" and p.gpus]
    return history_document(found, database=Path(conn_path(conn)), time_s=rec.time_s,
                            time_source=rec.time_source, fraction=DEFAULT_FRACTION, runs_wanted=runs,
                            baseline_runs=base, counter_runs=counters, read_counters=bool(rec.counters),
                            compared=compared)


def conn_path(conn) -> str:
    row = conn.execute("PRAGMA database_list").fetchone()
    return str(Path(row[2]).resolve()) if row and row[2] else "?"


def save(path, identity: MachineIdentity, rec: RunRecord) -> Recorded:
    """Judge ``rec`` against the history at ``path`` and record both (HistoryError on a bad DB)."""
    conn = open_history(path)
    try:
        again = recorded_before(conn, rec)
        found = history_findings(conn, identity, rec)
        doc = compared_with(conn, identity, rec, found) if rec.run_dir else None
        if doc is not None and rec.judged is not None:  # stored as the report of the folder will judge it
            rec.judged = with_history(rec.judged, rec.unjudged, doc["drift"]["compared"])
        if again:  # the run row again; its figures and counters never count twice in a baseline
            rec.figures, rec.counters = [], []
        run_id = record_run(conn, identity, rec, [f.to_json() for f in found])
    finally:
        conn.close()
    return Recorded(Path(path), run_id, found, doc)


def record_folder(path, run_dir, command: str, argv: list[str], sim: str | None = None) -> Recorded:
    from gputopo.report.summary import summarize_dir

    identity, rec = record_from_summary(summarize_dir(run_dir), command, argv, sim_clock(sim))
    return save(path, identity, rec)


def keep_in_folder(run_dir, recorded: Recorded) -> bool:
    """Write what the history said into the run folder (history_findings.json) and, when that
    changes its findings, re-render its report (summary.json, report.md/html, plots: a drifted
    pair is outlined) so the folder tells it without the database. True when re-rendered.
    OSError when the folder cannot be written."""
    from gputopo.report.history_record import stored_findings, write_history_document
    from gputopo.report.render import OUTPUT_FILES, render_run

    if recorded.document is None:
        return False
    run_dir = Path(run_dir)
    had_findings = stored_findings(run_dir) > 0
    if not write_history_document(run_dir, recorded.document):
        return False
    if not recorded.findings and not had_findings and not _history_judges(run_dir, recorded.document):
        return False  # nothing to show beyond "compared, nothing found": `gputopo report` adds it
    plots = any((run_dir / n).exists() for n in OUTPUT_FILES if n.endswith(".png"))
    render_run(run_dir, plots=plots)
    return True


def _history_judges(run_dir: Path, doc: dict) -> bool:
    """Whether the history compared series the folder's summary.json has not judged: then the
    history is their only basis, and the report must say so (report/judged.py)."""
    import json

    drift = doc.get("drift") if isinstance(doc, dict) else None
    if not (isinstance(drift, dict) and drift.get("compared")):
        return False
    try:
        judged = json.loads((run_dir / "summary.json").read_text(encoding="utf-8")).get("judged") or {}
    except (OSError, ValueError):
        return True
    return bool(judged.get("series_not_judged"))


def record_scan(path, topo: Topology, findings: list[Finding], argv: list[str],
                sim: str | None = None) -> Recorded:
    identity, rec = record_from_scan(topo, findings, argv, sim_clock(sim))
    return save(path, identity, rec)


def baseline_drift(path, summary, runs: int, sim: str | None = None
                   ) -> tuple[list[DriftPoint], int]:
    """For `gputopo check`'s [history] rule: every headline figure of ``summary`` against the
    baseline of ``runs`` earlier runs, and how many runs that baseline had (0: none yet)."""
    identity, rec = record_from_summary(summary, "check", [], sim_clock(sim))
    conn = open_history(path)
    try:
        recorded_before(conn, rec)
        mid = machine_id(conn, identity)
        if mid is None:
            return [], 0
        base = baseline(conn, mid, runs, before_s=rec.time_s)
    finally:
        conn.close()
    return drift_points(rec.figures, base), max((b.runs for b in base.values()), default=0)
