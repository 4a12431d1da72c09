"""What the machine's history said about a run, kept in its run folder: ``history_findings.json``.

The `drift` and `counter-growth` findings are judged when a run is recorded in the history
database (history_findings.py makes them). A person reading the run folder, `gputopo report
RUN` later, `diff` and `check` need them without that database, so the recording writes them
here with what they were compared against (the baseline runs, the last counter reading); the
report loads this file beside the run's own data and renders it. A run never recorded (
``--no-history``) has no such file, and the report then says nothing about the history.

The file holds the LATEST recording's judgement of the folder: a re-recording that finds the
same (``check RUN`` of a recorded folder: the same baseline) leaves it untouched.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from gputopo import SCHEMA_VERSION
from gputopo.model import Finding
from gputopo.model.finding_kinds import is_history_kind
from gputopo.runfolder.layout import HISTORY_FINDINGS_JSON

from .history_findings import when

# The kinds judged against the history (the table's ``history`` kinds,
# gputopo/model/finding_kinds.py); only they may come from history_findings.json.


def is_history_finding(f: Finding) -> bool:
    return isinstance(f.evidence, dict) and f.evidence.get("basis") == "history"


def run_ref(ref: Dict[str, Any]) -> Dict[str, Any]:
    """A history run as the folder keeps it (history/query.run_refs' record, its time readable)."""
    return {"id": ref["id"], "time": when(ref["time_s"]), "time_source": ref["time_source"],
            "command": ref["command"], "run_dir": ref["run_dir"]}


def history_document(findings: List[Finding], *, database, time_s: float, time_source: str,
                     fraction: float, runs_wanted: int, baseline_runs: List[Dict[str, Any]],
                     counter_runs: List[Dict[str, Any]], read_counters: bool,
                     compared: Optional[List[List[Any]]] = None) -> Dict[str, Any]:
    """The file's content: the findings and what they were compared against (``compared``: each
    pair series the baseline held, [series, gpus, direction])."""
    return {
        "schema_version": SCHEMA_VERSION,
        "database": str(database),
        "run_time": when(time_s), "time_source": time_source,
        "drift": {"fraction": fraction, "runs_wanted": runs_wanted,
                  "baseline_runs": [run_ref(r) for r in baseline_runs], "compared": list(compared or [])},
        "counters": {"read": read_counters,
                     "compared_with": run_ref(counter_runs[0]) if counter_runs and read_counters else None},
        "findings": [f.to_json() for f in findings],
    }


def write_history_document(run_dir, doc: Dict[str, Any]) -> bool:
    """Write ``doc`` into the run folder (atomically: a reader never sees half a file); False
    when the folder holds the same judgement already (nothing written)."""
    path = Path(run_dir) / HISTORY_FINDINGS_JSON
    text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    try:
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            return False
    except (OSError, UnicodeDecodeError):
        pass
    tmp = path.with_name(f".{HISTORY_FINDINGS_JSON}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return True


def stored_findings(run_dir) -> int:
    """How many findings the folder's history_findings.json holds (0: none, or no such file)."""
    try:
        doc = json.loads((Path(run_dir) / HISTORY_FINDINGS_JSON).read_text(encoding="utf-8"))
        return len(doc.get("findings") or []) if isinstance(doc, dict) else 0
    except (OSError, ValueError):
        return 0


@dataclass
class HistoryRecord:
    """history_findings.json as read: its document (without the findings) and the findings."""

    doc: Dict[str, Any]
    findings: List[Finding] = field(default_factory=list)

    def table(self, key: str) -> Dict[str, Any]:
        """A table of the document, {} when it is missing or not a table (a hand-edited file)."""
        t = self.doc.get(key)
        return t if isinstance(t, dict) else {}

    @property
    def baseline_runs(self) -> List[Dict[str, Any]]:
        runs = self.table("drift").get("baseline_runs")
        return [r for r in runs if isinstance(r, dict)] if isinstance(runs, list) else []

    @property
    def counters_read(self) -> bool:
        return bool(self.table("counters").get("read"))

    @property
    def counters_compared_with(self) -> Optional[Dict[str, Any]]:
        ref = self.table("counters").get("compared_with")
        return ref if isinstance(ref, dict) else None

    def judged(self, kind: str) -> bool:
        """Whether the recording could judge ``kind`` at all: drift needs a baseline run,
        counter-growth an earlier counter reading (else "no such finding" means nothing)."""
        return bool(self.baseline_runs) if kind == "drift" else self.counters_compared_with is not None


def history_record(doc: Dict[str, Any], notes: List[str]) -> HistoryRecord:
    """Read the document; an entry that is not a history finding is skipped with a note."""
    found = []
    entries = doc.get("findings")
    for k, d in enumerate(entries if isinstance(entries, list) else []):
        try:
            f = Finding.from_json(d)
            if not is_history_kind(f.kind) or not is_history_finding(f):
                raise ValueError(f"kind {f.kind!r} is not judged against the history")
            found.append(f)
        except (TypeError, ValueError) as e:
            notes.append(f"{HISTORY_FINDINGS_JSON}: finding {k + 1} skipped, not a history finding ({e})")
    return HistoryRecord({k: v for k, v in doc.items() if k != "findings"}, found)


def _ref_text(r: Dict[str, Any]) -> str:
    clock = " (sim clock)" if r.get("time_source") == "sim-clock" else ""
    where = f" {r['run_dir']}" if r.get("run_dir") else ""
    return f"#{r.get('id')} {r.get('command')} of {r.get('time')}{clock}{where}"


def _fraction(v: Any) -> str:
    return f"{v:.0%}" if isinstance(v, (int, float)) and not isinstance(v, bool) else "?"


def history_points_lines(record: HistoryRecord) -> List[str]:
    """The report's "Against this machine's history" points, plain text."""
    d = record.doc
    drift = record.table("drift")
    clock = " (the simulated machine's clock)" if d.get("time_source") == "sim-clock" else ""
    lines = [f"Judged when the run was recorded in the history database {d.get('database')}, as a run "
             f"of {d.get('run_time')}{clock}; kept in the run folder's {HISTORY_FINDINGS_JSON}."]
    base = record.baseline_runs
    if base:
        lines.append(f"drift: each headline figure against the median of this machine's last {len(base)} "
                     f"error-free run(s) (up to {drift.get('runs_wanted')}); below "
                     f"{_fraction(drift.get('fraction'))} of it is drift. Runs: "
                     + "; ".join(_ref_text(r) for r in base))
    else:
        lines.append("drift: not judged, no earlier error-free run of this machine with figures")
    earlier = record.counters_compared_with
    if not record.counters_read:
        lines.append("error counters: the run read none, so no growth can be judged")
    elif earlier:
        lines.append("error counters: compared with the last earlier reading, run " + _ref_text(earlier))
    else:
        lines.append("error counters: not judged, no earlier reading of this machine's counters")
    counts: Dict[str, int] = {}
    for f in record.findings:
        counts[f.kind] = counts.get(f.kind, 0) + 1
    lines.append("found: " + (", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
                              + " (listed with the other findings)" if counts
                              else "no drift and no counter growth"))
    return lines
