"""Reading a run folder: every raw file parsed into one :class:`RunFolder`, with what could not
be read accounted for (docs/run-folder.md).

A run that crashed may leave a cut last line in a JSON-lines file: it is skipped and noted, never
fatal, because everything before it is still good data. Every skipped line is kept
(``skipped_lines``) and counted per file in one note each ("measurements.jsonl: 336 of 1008
lines skipped ..."), measurements appended twice are counted once, and a kernel log's unread
lines are listed: ``damaged`` says all of it, one line each, so a report built from a third of
the data says so instead of reading like a clean run. A ``schema_version`` this gputopo does not
read is refused (exit 2, naming the file and line): guessing at a newer layout would turn a
field it renamed into "nothing measured".

This module gives facts; gputopo.report turns them into findings (report/run_folder.py adds what
makes a folder as a whole unreadable and judges it).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Set, Tuple, TypeGuard

from gputopo.errors import InputFileError, UsageError
from gputopo.model import Finding, Measurement, Topology, topology_from_json
from gputopo.model.step_failure import FAILURE_KINDS, STEP_FAILED, StepFailure, numerics_failure

from .layout import (EVENTS_JSONL, HISTORY_FINDINGS_JSON, IMPORTED_JSON, KERNEL_LOG_JSON, KERNEL_LOG_TOOL,
                     MEASUREMENTS_JSONL, NCCL_DEBUG_JSON, NCCL_DEBUG_TOOL, NCCL_TESTS_JSON, NCCL_TESTS_TOOL, NCCL_TESTS_TOOLS,
                     NUMERICS_JSONL, READABLE_SCHEMA_VERSIONS, RUN_JSON, TOPOLOGY_JSON)

Pair = Tuple[int, int]

# ----------------------------------------------------------------------------- files


def read_jsonl(path, notes: Optional[List[str]] = None) -> Iterator[Tuple[int, Dict[str, Any]]]:
    """Yield (line number, object) from a JSON-lines file; a missing file yields nothing.

    A line that does not parse, or is not a JSON object, is skipped: the last line of a run
    stopped mid-write is expected to be cut. With ``notes`` each skipped line is noted there
    (a cut last line says so)."""
    path = Path(path)
    if not path.exists():
        return
    unparsed = None  # a line that did not parse: noted once it is known whether it was the last

    def note(lineno: int, why: str) -> None:
        if notes is not None:
            notes.append(f"{path.name}:{lineno}: skipped, {why}")

    from gputopo.inputs import user_file_problem

    problem = user_file_problem(path)  # /dev/zero has no lines to end; a FIFO blocks the open
    if problem:
        raise InputFileError(path, f"cannot read: {problem}")
    try:
        f = open(path, encoding="utf-8", errors="replace")
    except OSError as e:  # a directory, no permission: the user's file, not our bug
        raise InputFileError(path, f"cannot read: {e.strerror or e}") from None
    with f:
        for lineno, text in enumerate(f, 1):
            if not text.strip():
                continue
            if unparsed is not None:
                note(unparsed, "not JSON")
                unparsed = None
            try:
                obj = json.loads(text)
            except json.JSONDecodeError:
                unparsed = lineno
                continue
            if isinstance(obj, dict):
                yield lineno, obj
            else:
                note(lineno, "not a JSON object")
    if unparsed is not None:
        note(unparsed, "truncated last line (the run stopped while writing it)")


def read_json(path: Path) -> Dict[str, Any]:
    """A JSON document of the folder (InputFileError, naming the line, when it is not one)."""
    from gputopo.inputs import MAX_TEXT_BYTES, read_user_text

    try:
        doc = json.loads(read_user_text(path, path.name, MAX_TEXT_BYTES, fifo_ok=False))
    except json.JSONDecodeError as e:
        raise InputFileError(path, f"not valid JSON: {e.msg}", line=e.lineno) from None
    if not isinstance(doc, dict):
        raise InputFileError(path, "expected a JSON object")
    return doc


def count_lines(path: Path) -> int:
    """Non-empty lines of a JSON-lines file (0 when it is missing or unreadable)."""
    from gputopo.inputs import user_file_problem

    if user_file_problem(path):
        return 0
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return sum(1 for line in f if line.strip())
    except OSError:
        return 0


def check_schema(doc: Mapping[str, Any], path, line: Optional[int] = None) -> None:
    """Refuse a document (or JSON line) whose ``schema_version`` this gputopo does not read."""
    if "schema_version" not in doc:
        return
    v = doc["schema_version"]
    if isinstance(v, bool) or v not in READABLE_SCHEMA_VERSIONS:
        readable = ", ".join(map(str, READABLE_SCHEMA_VERSIONS))
        raise InputFileError(path, f"schema_version {v!r} is not one this gputopo reads (it reads "
                                   f"{readable}): use the gputopo version that wrote it", line=line)


# ----------------------------------------------------------------------------- run.json

#: run.json keys every reader (and a resume) reads, and the JSON types each may have.
_INFO_TYPES = {
    "fabric": (str,), "machine": (str, type(None)), "sim": (str, type(None)),
    "sim_path": (str, type(None)), "status": (str, type(None)), "options": (dict,),
}
_TYPE_NAMES = {str: "text", dict: "an object", list: "a list", type(None): "null",
               int: "an integer", float: "a number", bool: "true/false"}


def check_run_json(info: Any, path) -> Dict[str, Any]:
    """``info`` (run.json parsed) if it is an object whose top-level keys have the types every
    reader needs (a report read ``options`` as an object and crashed on text); InputFileError,
    naming the key, otherwise."""
    if not isinstance(info, dict):
        raise InputFileError(path, f"expected a JSON object, got {type(info).__name__}; "
                             "not a gputopo run.json")
    for key, types in _INFO_TYPES.items():
        if key in info and not isinstance(info[key], types):
            what = " or ".join(_TYPE_NAMES[t] for t in types)
            raise InputFileError(path, f"must be {what}, got {info[key]!r}"[:200], key=key)
    return info


def planned_pairs(info: Dict[str, Any]) -> List[Pair]:
    """The GPU pairs run.json says the run was asked to measure (none for imports/clusters)."""
    out = []
    for p in ((info.get("options") or {}).get("pairs") or []):
        if isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(g, int) for g in p):
            out.append((min(p), max(p)))
    return sorted(set(out))


# ----------------------------------------------------------------------------- lines

_FINDING_FIELDS = ("kind", "severity", "message", "gpus", "link_class", "evidence", "cause", "remedies")


def finding_from_event(rec: Dict[str, Any]) -> Finding:
    """The Finding of an events.jsonl ``{"type": "finding", ...}`` line. Context a writer added
    beside the finding's fields (e.g. the numerics' ``"step"``) is kept in its evidence.
    Raises KeyError, TypeError or ValueError when the line is not a finding."""
    d = {k: v for k, v in rec.items() if k in _FINDING_FIELDS}
    context = {k: v for k, v in rec.items() if k not in _FINDING_FIELDS and k != "type"}
    if context:
        d["evidence"] = {**context, **(d.get("evidence") or {})}
    return Finding.from_json(d)


def is_gpu_list(v, lengths=(1, 2)) -> bool:
    """A list of ``lengths`` GPU indices (non-negative integers), as the JSON-lines files hold."""
    return (isinstance(v, list) and len(v) in lengths
            and all(isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in v))


def is_number(v) -> TypeGuard[float]:
    """An int or float of JSON (true/false are not numbers)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


#: The families of measurement names (bench suites and importers): a line of another name
#: would be read by no table or rule, its result silently dropped.
TEST_FAMILIES = ("p2p.", "dp.", "collective.", "self.", "nvbandwidth.")
#: The longest time one sample can take: a step is a hang after --timeout (at most 7 days).
MAX_SAMPLE_S = 604800.0


def measurement_value_problem(rec: Mapping[str, Any], gpu_indices: Optional[set]) -> Optional[str]:
    """Why a measurements.jsonl line of the right types holds values no measurement can have
    (a negative or zero time, a negative size or #wrong, one GPU twice, a GPU the topology does
    not have), or None. Lines of the wrong types are left to Measurement.from_json."""
    gpus = rec.get("gpus")
    if isinstance(gpus, list) and all(isinstance(g, int) and not isinstance(g, bool) for g in gpus):
        if len(set(gpus)) != len(gpus) or any(g < 0 for g in gpus):
            return f"gpus {gpus} names a GPU twice or a negative index"
        if gpu_indices and any(g not in gpu_indices for g in gpus):
            return f"gpus {gpus}: the run's topology has no GPU {[g for g in gpus if g not in gpu_indices][0]}"
    test = rec.get("test")
    if isinstance(test, str) and not test.startswith(TEST_FAMILIES):
        return f"test {test[:40]!r} is not one gputopo measures or imports (no {', '.join(TEST_FAMILIES)}...)"
    samples = rec.get("samples_s")
    if isinstance(samples, list) and all(is_number(x) for x in samples):
        if any(not 0 < x < math.inf for x in samples):
            return "samples_s holds a time that is not a positive finite number of seconds"
        if any(x > MAX_SAMPLE_S for x in samples):
            return f"samples_s holds a time longer than any step may run ({MAX_SAMPLE_S:.0f} s, --timeout's maximum)"
        if not samples and rec.get("error") is None and not (rec.get("extra") or {}).get("time_not_available"):
            return "samples_s is empty, yet no error or reason says why nothing was timed"
    for key in ("size_bytes", "wrong", "bytes_per_iter"):
        v = rec.get(key)
        if is_number(v) and v < 0:
            return f"{key} is negative ({v})"
    return None


def event_finding_problem(rec: Mapping[str, Any]) -> Optional[str]:
    """Why an events.jsonl finding line cannot be shown, or None (the kind and severity are
    checked by the Finding itself)."""
    gpus = rec.get("gpus")
    if gpus is not None and not is_gpu_list(gpus, lengths=range(1, 1 << 16)):
        return f"gpus must be a list of GPU indices, got {gpus!r}"
    if not isinstance(rec.get("message", ""), str):
        return "message must be a string"
    return None


def nccl_tests_logs(doc: Mapping[str, Any], path) -> List[Dict[str, Any]]:
    """The ``logs`` of nccl_tests.json (a folder imported before imported.json held every tool):
    a list of objects, else the file is refused."""
    logs = doc.get("logs", [])
    if not isinstance(logs, list) or not all(isinstance(x, dict) for x in logs):
        raise InputFileError(path, "\"logs\" must be a list of objects (one per imported nccl-tests log)")
    return logs


def read_imports(path: Path) -> List[Dict[str, Any]]:
    """Every import's entries, each naming its ``tool``: imported.json's ``imports``, then what a
    folder imported before that one shape kept in a file of its tool (nccl_tests.json's ``logs``,
    nccl_debug.json, kernel_log.json), read into the same entries. InputFileError on a file that is
    not JSON, of a schema this gputopo does not read, or of the wrong shape."""
    imports: List[Dict[str, Any]] = []
    if (path / IMPORTED_JSON).exists():
        doc = read_json(path / IMPORTED_JSON)
        check_schema(doc, path / IMPORTED_JSON)
        imports = [d for d in doc.get("imports") or [] if isinstance(d, dict)]
    if (path / NCCL_TESTS_JSON).exists():
        doc = read_json(path / NCCL_TESTS_JSON)
        check_schema(doc, path / NCCL_TESTS_JSON)
        imports += [{"tool": NCCL_TESTS_TOOL, **log} for log in nccl_tests_logs(doc, path / NCCL_TESTS_JSON)]
    for name, tool in ((NCCL_DEBUG_JSON, NCCL_DEBUG_TOOL), (KERNEL_LOG_JSON, KERNEL_LOG_TOOL)):
        if (path / name).exists():
            imports.append({"tool": tool, **read_json(path / name)})
    return imports


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


def with_numerics_failures(step_failures: List[StepFailure], numerics: List[Dict[str, Any]],
                           event_findings: List[Finding], linenos: Mapping[int, int],
                           notes: List[str]) -> List[StepFailure]:
    """``step_failures`` (events.jsonl's) with the numerics ways' failures made current: a
    way's ``step-failed`` line (the last one per way) counts while its latest numerics.jsonl
    record (``numerics``, as latest_numerics left them) is missing or says the same (a resume
    that ran the way again supersedes the earlier failure); a hang or crash record without one
    (a folder written before the numerics wrote them) gets the record derived from it
    (model/step_failure.py's ``numerics_failure``), unless the folder holds its finding as
    written then (an events.jsonl ``finding`` line of the numerics, read as written). A record
    no failure can be made of is skipped and said (``linenos``: each record's line)."""
    def key(gpus, way) -> tuple:
        return tuple(sorted(int(g) for g in gpus or [])), way

    latest = {key(r.get("gpus"), r.get("way")): r for r in numerics}
    written: Dict[tuple, StepFailure] = {}
    for f in step_failures:
        if f.numerics:
            k = key(f.gpus, f.evidence.get("way"))
            written.pop(k, None)  # (the last one per way, in the order of the latest)
            written[k] = f
    current = {k: f for k, f in written.items() if k not in latest or latest[k].get("verdict") == f.kind}
    as_findings = {(f.kind, tuple(f.gpus or ()), (f.evidence or {}).get("way")) for f in event_findings
                   if (f.evidence or {}).get("test") == "numerics"}
    out = [f for f in step_failures if not f.numerics or current.get(key(f.gpus, f.evidence.get("way"))) is f]
    for k, rec in latest.items():
        if rec.get("verdict") not in FAILURE_KINDS or k in current or (rec.get("verdict"), *k) in as_findings:
            continue
        try:
            out.append(numerics_failure(rec))
        except (TypeError, ValueError) as e:
            notes.append(f"{NUMERICS_JSONL}:{linenos.get(id(rec), '?')}: skipped, not a step failure ({e})")
    return out


# ----------------------------------------------------------------------------- skipped lines

#: How read_jsonl words a skipped line: "<file>:<line>: skipped, <why>".
_SKIPPED = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): skipped, (?P<why>.*)$")
#: Line numbers listed in a note before "and N more".
SHOWN_LINES = 5


def summarize_skipped(notes: List[str], totals: Dict[str, int]) -> List[str]:
    """Fold per-line 'skipped' notes into one note per file, with the count, the reasons and the
    first line numbers; ``totals`` maps a file name to its number of non-empty lines. Other
    notes are kept as they are, in order."""
    by_file: Dict[str, List[tuple]] = {}
    out: List[str] = []
    for note in notes:
        m = _SKIPPED.match(note)
        if m is None:
            out.append(note)
            continue
        if m["file"] not in by_file:
            by_file[m["file"]] = []
            out.append(m["file"])  # placeholder, replaced below in the same place
        by_file[m["file"]].append((int(m["line"]), m["why"]))
    for name, skipped in by_file.items():
        lines = [n for n, _ in skipped]
        whys = list(dict.fromkeys(re.sub(r" \(.*", "", why) for _, why in skipped))
        shown = ", ".join(map(str, lines[:SHOWN_LINES]))
        if len(lines) > SHOWN_LINES:
            shown += f" and {len(lines) - SHOWN_LINES} more"
        of = f" of {totals[name]}" if totals.get(name) else ""
        text = (f"{name}: {len(lines)}{of} line(s) skipped ({'; '.join(whys)}): line(s) {shown}; "
                "the report covers only the lines that were read")
        out[out.index(name)] = text
    return out


def skipped_line_notes(notes: List[str]) -> List[str]:
    """The notes that say lines were skipped (as summarize_skipped words them)."""
    return [n for n in notes if "line(s) skipped" in n]


# ----------------------------------------------------------------------------- the folder

#: Why a numerics.jsonl line is not a record a report can use (None: it is one), given the
#: run's GPU indices (None: unknown). The numerics' verdicts are theirs, so the caller says.
NumericsCheck = Callable[[Mapping[str, Any], Optional[Set[int]]], Optional[str]]


@dataclass
class RunFolder:
    """Everything a run folder's raw files hold, parsed. ``notes`` lists what was noted while
    reading (a missing topology, superseded numerics); ``damaged`` what could not be read."""

    path: Path
    info: Dict[str, Any]  # run.json
    topology: Optional[Topology]
    measurements: List[Measurement] = field(default_factory=list)
    event_findings: List[Finding] = field(default_factory=list)
    #: The bench steps and numerics ways that hung or crashed, one failure record each
    #: (events.jsonl ``step-failed``; a step a resume ran again has only its new result, a
    #: numerics way only that of its latest record). A folder from before these were facts has
    #: them as ``event_findings``; one from before a numerics way's failure was a
    #: ``step-failed`` line has it derived from its numerics.jsonl record
    #: (:func:`with_numerics_failures`).
    step_failures: List[StepFailure] = field(default_factory=list)
    events: List[Dict[str, Any]] = field(default_factory=list)
    numerics: List[Dict[str, Any]] = field(default_factory=list)
    #: What every import kept (imported.json's ``imports``, each entry naming its ``tool``; a
    #: folder imported before that shape: nccl_tests.json, nccl_debug.json, kernel_log.json read
    #: into the same entries, read_imports). The report reads them by tool through the views below.
    imports: List[Dict[str, Any]] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    #: Each line skipped, as read ("measurements.jsonl:4: skipped, not a measurement (...)"),
    #: before the notes fold them into one per file: diff and resume refuse to go on without them.
    skipped_lines: List[str] = field(default_factory=list)
    #: What of the files could not be read, one line each: the skipped lines per file, a kernel
    #: log's unread lines, measurements appended twice (counted once).
    damaged: List[str] = field(default_factory=list)
    #: Measurement lines that repeat an earlier one exactly (dropped).
    doubled: int = 0
    #: history_findings.json as written (None: never recorded, e.g. --no-history)
    history_doc: Optional[Dict[str, Any]] = None

    @property
    def nccl_tests(self) -> List[Dict[str, Any]]:
        """The imported nccl-tests (or rccl-tests) logs, one entry each (``tool`` the one that printed it)."""
        return [d for d in self.imports if d.get("tool") in NCCL_TESTS_TOOLS]

    @property
    def nccl_debug(self) -> Dict[str, Any]:
        """What an imported NCCL_DEBUG log said ({} when none was imported)."""
        return next((d for d in self.imports if d.get("tool") == NCCL_DEBUG_TOOL), {})

    @property
    def kernel_log(self) -> Optional[Dict[str, Any]]:
        """What an imported kernel log held beyond its Xid events (None when none was imported)."""
        return next((d for d in self.imports if d.get("tool") == KERNEL_LOG_TOOL), None)

    @property
    def imported(self) -> List[Dict[str, Any]]:
        """The imports of the tools judged by import_findings and its kin (nvbandwidth,
        p2pBandwidthLatencyTest, perftest, ibstat): every entry but the three above."""
        return [d for d in self.imports if d.get("tool") not in (*NCCL_TESTS_TOOLS, NCCL_DEBUG_TOOL, KERNEL_LOG_TOOL)]

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


def read_folder(run_dir, *, numerics_check: NumericsCheck) -> RunFolder:
    """Read a run folder. Raises UsageError when it is not one, InputFileError on a broken file
    (one that is not JSON, a schema this gputopo does not read); a line that cannot be read is
    skipped and accounted for. ``numerics_check``: which numerics.jsonl lines to skip."""
    path = Path(run_dir)
    if not path.is_dir():
        raise UsageError(f"{path}: not a run folder (no such directory)")
    if not (path / RUN_JSON).exists() and not (path / MEASUREMENTS_JSONL).exists():
        raise UsageError(f"{path}: not a run folder (no {RUN_JSON} or {MEASUREMENTS_JSONL})")
    notes: List[str] = []
    info = read_json(path / RUN_JSON) if (path / RUN_JSON).exists() else {}
    check_schema(info, path / RUN_JSON)
    check_run_json(info, path / RUN_JSON)  # a key of the wrong type: one line, exit 2
    topo = None
    if (path / TOPOLOGY_JSON).exists():
        doc = read_json(path / TOPOLOGY_JSON)
        check_schema(doc, path / TOPOLOGY_JSON)
        try:
            topo = topology_from_json(doc)
        except (KeyError, TypeError, ValueError) as e:
            raise InputFileError(path / TOPOLOGY_JSON, f"not a gputopo topology: {e}") from None
    elif not planned_pairs(info):  # a bench run's missing topology is a problem (report/coverage.py)
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
    step_failures: List[StepFailure] = []
    for lineno, rec in read_jsonl(path / EVENTS_JSONL, notes):
        check_schema(rec, path / EVENTS_JSONL, lineno)
        events.append(rec)
        if rec.get("type") == "step-redo":  # a resume ran the step again: its new result counts
            event_findings = [f for f in event_findings
                              if (f.evidence or {}).get("step") != rec.get("step")]
            step_failures = [f for f in step_failures if f.step != rec.get("step")]
        if rec.get("type") == STEP_FAILED:
            try:
                step_failures.append(StepFailure.from_event(rec))
            except (KeyError, TypeError, ValueError) as e:
                notes.append(f"{EVENTS_JSONL}:{lineno}: skipped, not a step failure ({e})")
        if rec.get("type") == "finding":
            try:
                why = event_finding_problem(rec)
                if why:
                    raise ValueError(why)
                event_findings.append(finding_from_event(rec))
            except (KeyError, TypeError, ValueError) as e:
                notes.append(f"{EVENTS_JSONL}:{lineno}: skipped, not a finding ({e})")

    numerics = []
    linenos: Dict[int, int] = {}  # id(record) -> its line
    for lineno, rec in read_jsonl(path / NUMERICS_JSONL, notes):
        check_schema(rec, path / NUMERICS_JSONL, lineno)
        why = numerics_check(rec, gpu_indices)
        if why:
            notes.append(f"{NUMERICS_JSONL}:{lineno}: skipped, not a numerics record ({why})")
            continue
        numerics.append(rec)
        linenos[id(rec)] = lineno
    numerics = latest_numerics(numerics, notes)
    step_failures = with_numerics_failures(step_failures, numerics, event_findings, linenos, notes)
    imports = read_imports(path)
    kernel = next((d for d in imports if d.get("tool") == KERNEL_LOG_TOOL), None)
    history_doc = None
    if (path / HISTORY_FINDINGS_JSON).exists():
        history_doc = read_json(path / HISTORY_FINDINGS_JSON)
        check_schema(history_doc, path / HISTORY_FINDINGS_JSON)
    skipped_lines = [n for n in notes if ": skipped" in n]
    notes = summarize_skipped(notes, {name: count_lines(path / name)
                                      for name in (MEASUREMENTS_JSONL, EVENTS_JSONL, NUMERICS_JSONL)})
    damaged = skipped_line_notes(notes)
    notes = [n for n in notes if n not in damaged]
    if kernel is not None:
        damaged += [f"kernel log {kernel.get('file', '?')}: {p}" for p in kernel.get("problems") or []]
    if doubled:
        damaged.append(f"{MEASUREMENTS_JSONL}: {doubled} line(s) repeat an earlier measurement exactly "
                       "(the same results appended twice): counted once")
    return RunFolder(path=path, info=info, topology=topo, measurements=measurements,
                     event_findings=event_findings, step_failures=step_failures, events=events, numerics=numerics, imports=imports,
                     notes=notes, skipped_lines=skipped_lines, damaged=damaged, doubled=doubled,
                     history_doc=history_doc)
