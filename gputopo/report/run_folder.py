"""A run folder on disk: load it into a `Run` record. The helpers that write one, and the
JSON-lines reader used here, are the bench's (gputopo.bench.runlog), shared by every writer.

Layout (docs/run-folder.md): ``run.json``, ``topology.json``, ``measurements.jsonl`` (one Measurement
per line, appended as each completes), ``events.jsonl`` (step findings such as hang/crash),
``numerics.jsonl`` (training results per pair and way). A run that crashed may leave a truncated
last line in a JSON-lines file: it is skipped and noted, never fatal, because everything before
it is still good data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from gputopo.bench.resume_check import check_run_info
from gputopo.bench.runlog import (EVENTS_JSONL, MEASUREMENTS_JSONL, NUMERICS_JSONL, RUN_JSON,
                                  TOPOLOGY_JSON, finding_from_event, read_jsonl)
from gputopo.errors import InputFileError, UsageError
from gputopo.model import Finding, Measurement, Topology, topology_from_json

from .coverage import folder_problems, planned_pairs
from .history_record import HISTORY_FINDINGS_JSON, HistoryRecord, history_record
from .folder_checks import (check_schema, class_disagreement, event_finding_problem, measurement_value_problem,
                            nccl_tests_logs, numerics_record_problem,
                            skipped_line_notes, summarize_skipped)

#: Optional: per-log facts of imported nccl-tests output (avg bus bandwidth as printed, ...).
NCCL_TESTS_JSON = "nccl_tests.json"
#: Optional: NCCL's transport per pair imported from a job's NCCL_DEBUG=INFO log (import nccl-debug).
NCCL_DEBUG_JSON = "nccl_debug.json"
#: Optional: per-file facts of imported nvbandwidth / p2pBandwidthLatencyTest outputs (matrices as
#: printed, failed testcases, what could not be read); importers/import_folder.py writes it.
IMPORTED_JSON = "imported.json"
#: Optional: what an imported kernel log held and which of its lines could not be read (import kernel-log).
KERNEL_LOG_JSON = "kernel_log.json"


@dataclass
class Run:
    """Everything a run folder holds, parsed. ``notes`` lists what was skipped while loading."""

    path: Path
    info: Dict[str, Any]  # run.json
    topology: Optional[Topology]
    measurements: List[Measurement] = field(default_factory=list)
    event_findings: List[Finding] = field(default_factory=list)
    events: List[Dict[str, Any]] = field(default_factory=list)
    numerics: List[Dict[str, Any]] = field(default_factory=list)
    nccl_tests: List[Dict[str, Any]] = field(default_factory=list)
    nccl_debug: Dict[str, Any] = field(default_factory=dict)  # nccl_debug.json, when imported
    imported: List[Dict[str, Any]] = field(default_factory=list)  # imported.json's "imports"
    notes: List[str] = field(default_factory=list)
    #: What makes the folder's data incomplete (skipped lines, an emptied file) or doubled; the
    #: report turns each into a finding (data_findings.py) so it never reads like a clean run.
    problems: List[str] = field(default_factory=list)
    #: Each line skipped, as read ("measurements.jsonl:4: skipped, not a measurement (...)"),
    #: before the notes fold them into one per file: diff and resume refuse to go on without them.
    skipped_lines: List[str] = field(default_factory=list)
    #: history_findings.json: what the machine's history said when the run was recorded (None:
    #: never recorded, e.g. --no-history)
    history: Optional[HistoryRecord] = None

    @property
    def simulated(self) -> bool:
        if "simulated" in self.info:
            return bool(self.info["simulated"])
        return bool(self.topology and self.topology.simulated)

    @property
    def fabric(self) -> Optional[str]:
        if self.info.get("fabric"):
            return self.info["fabric"]
        fabrics = sorted({m.fabric for m in self.measurements})
        return ",".join(fabrics) if fabrics else None

    @property
    def machine(self) -> str:
        return self.info.get("machine") or (self.topology.machine if self.topology else "") or ""


def load_run(run_dir) -> Run:
    """Read a run folder. Raises UsageError when it is not one, InputFileError on a broken file."""
    path = Path(run_dir)
    if not path.is_dir():
        raise UsageError(f"{path}: not a run folder (no such directory)")
    if not (path / RUN_JSON).exists() and not (path / MEASUREMENTS_JSONL).exists():
        raise UsageError(f"{path}: not a run folder (no {RUN_JSON} or {MEASUREMENTS_JSONL})")
    notes: List[str] = []
    info = _read_json(path / RUN_JSON) if (path / RUN_JSON).exists() else {}
    check_schema(info, path / RUN_JSON)
    check_run_info(info, path / RUN_JSON, options=False)  # a key of the wrong type: one line, exit 2
    topo = None
    if (path / TOPOLOGY_JSON).exists():
        doc = _read_json(path / TOPOLOGY_JSON)
        check_schema(doc, path / TOPOLOGY_JSON)
        try:
            topo = topology_from_json(doc)
        except (KeyError, TypeError, ValueError) as e:
            raise InputFileError(path / TOPOLOGY_JSON, f"not a gputopo topology: {e}") from None
    elif not planned_pairs(info):  # a bench run's missing topology is a problem (coverage.py)
        notes.append(f"no {TOPOLOGY_JSON}: link classes and expected rates come from the measurements only")

    measurements, seen, doubled = [], set(), 0
    gpu_indices = set(topo.indices) if topo is not None and topo.gpus else None
    for lineno, rec in read_jsonl(path / MEASUREMENTS_JSONL, notes):
        check_schema(rec, path / MEASUREMENTS_JSONL, lineno)
        key = json.dumps(rec, sort_keys=True)
        if key in seen:
            doubled += 1
            continue
        seen.add(key)
        why = measurement_value_problem(rec, gpu_indices)
        if why:
            notes.append(f"{MEASUREMENTS_JSONL}:{lineno}: skipped, impossible values ({why})")
            continue
        try:
            measurements.append(Measurement.from_json(rec))
        except (KeyError, TypeError, ValueError) as e:
            notes.append(f"{MEASUREMENTS_JSONL}:{lineno}: skipped, not a measurement ({e})")

    events: List[dict] = []
    event_findings: List[Finding] = []
    for lineno, rec in read_jsonl(path / EVENTS_JSONL, notes):
        check_schema(rec, path / EVENTS_JSONL, lineno)
        events.append(rec)
        if rec.get("type") == "step-redo":  # a resume ran the step again: its new result counts
            event_findings = [f for f in event_findings
                              if (f.evidence or {}).get("step") != rec.get("step")]
        if rec.get("type") == "finding":
            try:
                why = event_finding_problem(rec)
                if why:
                    raise ValueError(why)
                event_findings.append(finding_from_event(rec))
            except (KeyError, TypeError, ValueError) as e:
                notes.append(f"{EVENTS_JSONL}:{lineno}: skipped, not a finding ({e})")

    numerics = []
    for lineno, rec in read_jsonl(path / NUMERICS_JSONL, notes):
        check_schema(rec, path / NUMERICS_JSONL, lineno)
        why = numerics_record_problem(rec, gpu_indices)
        if why:
            notes.append(f"{NUMERICS_JSONL}:{lineno}: skipped, not a numerics record ({why})")
            continue
        numerics.append(rec)
    numerics = latest_numerics(numerics, notes)
    nccl = []
    if (path / NCCL_TESTS_JSON).exists():
        doc = _read_json(path / NCCL_TESTS_JSON)
        check_schema(doc, path / NCCL_TESTS_JSON)
        nccl = nccl_tests_logs(doc, path / NCCL_TESTS_JSON)
    nccl_debug = _read_json(path / NCCL_DEBUG_JSON) if (path / NCCL_DEBUG_JSON).exists() else {}
    imported: List[Dict[str, Any]] = []
    if (path / IMPORTED_JSON).exists():
        doc = _read_json(path / IMPORTED_JSON)
        check_schema(doc, path / IMPORTED_JSON)
        imported = [d for d in doc.get("imports") or [] if isinstance(d, dict)]
    unread_kernel_lines = []
    if (path / KERNEL_LOG_JSON).exists():
        kernel = _read_json(path / KERNEL_LOG_JSON)
        unread_kernel_lines = [f"kernel log {kernel.get('file', '?')}: {p}" for p in kernel.get("problems") or []]
    history = None
    if (path / HISTORY_FINDINGS_JSON).exists():
        doc = _read_json(path / HISTORY_FINDINGS_JSON)
        check_schema(doc, path / HISTORY_FINDINGS_JSON)
        history = history_record(doc, notes)
    skipped_lines = [n for n in notes if ": skipped" in n]
    notes = summarize_skipped(notes, {name: _count_lines(path / name)
                                      for name in (MEASUREMENTS_JSONL, EVENTS_JSONL, NUMERICS_JSONL)})
    problems = skipped_line_notes(notes)
    notes = [n for n in notes if n not in problems]
    problems += unread_kernel_lines
    if doubled:
        problems.append(f"{MEASUREMENTS_JSONL}: {doubled} line(s) repeat an earlier measurement exactly "
                        "(the same results appended twice): counted once")
    problems += [p for p in folder_problems(path, info, events, len(measurements) + doubled, numerics)
                 if p not in problems]
    mixed = class_disagreement(measurements, topo)
    if mixed:
        problems.append(f"{MEASUREMENTS_JSONL}: {mixed}")
    if (path / MEASUREMENTS_JSONL).exists() and not measurements and info.get("status") == "complete":
        problems.append(f"{MEASUREMENTS_JSONL}: no measurement in it, yet run.json says the run completed: "
                        "the file was emptied or replaced, so no transfer can be judged")
    return Run(path=path, info=info, topology=topo, measurements=measurements,
               event_findings=event_findings, events=events, numerics=numerics,
               nccl_tests=nccl, nccl_debug=nccl_debug, imported=imported, notes=notes, problems=problems,
               skipped_lines=skipped_lines, history=history)


def latest_numerics(records: List[Dict[str, Any]], notes: List[str]) -> List[Dict[str, Any]]:
    """The last record per (GPUs, way): a numerics step re-run into the same folder (resume)
    supersedes its earlier result instead of doubling its findings."""
    latest: Dict[tuple, Dict[str, Any]] = {}
    for rec in records:
        key = (tuple(sorted(int(g) for g in (rec.get("gpus") or []))), rec.get("way"))
        latest.pop(key, None)  # re-insert so the order is that of the latest results
        latest[key] = rec
    if len(latest) < len(records):
        notes.append(f"{NUMERICS_JSONL}: {len(records) - len(latest)} earlier result(s) superseded by "
                     "later ones for the same GPUs and way")
    return list(latest.values())


def _count_lines(path: Path) -> int:
    """Non-empty lines of a JSON-lines file (0 when it is missing or unreadable)."""
    from gputopo.inputs import user_file_problem

    if user_file_problem(path):
        return 0
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return sum(1 for line in f if line.strip())
    except OSError:
        return 0


def _read_json(path: Path) -> Dict[str, Any]:
    from gputopo.inputs import MAX_TEXT_BYTES, read_user_text

    try:
        doc = json.loads(read_user_text(path, path.name, MAX_TEXT_BYTES))
    except json.JSONDecodeError as e:
        raise InputFileError(path, f"not valid JSON: {e.msg}", line=e.lineno) from None
    if not isinstance(doc, dict):
        raise InputFileError(path, "expected a JSON object")
    return doc
