"""What loading a run folder must not let pass silently: a file written by a gputopo whose
schema this one does not know, and lines of the JSON-lines files that had to be skipped.

A ``schema_version`` this gputopo does not read is refused (exit 2, naming the file and line):
guessing at a newer layout would turn a field it renamed into "nothing measured". Skipped lines
are kept, counted per file, in one note each ("measurements.jsonl: 336 of 1008 lines skipped
..."), which the verdict line and the story then show: a report built from a third of the data
must say so, not read like a clean run.
"""

from __future__ import annotations

import math
import re
from typing import Any, Dict, List, Mapping, Optional, TypeGuard

from gputopo import SCHEMA_VERSION
from gputopo.errors import InputFileError

#: Schema versions of run-folder files this gputopo reads.
READABLE_SCHEMA_VERSIONS = (SCHEMA_VERSION,)
#: How read_jsonl words a skipped line: "<file>:<line>: skipped, <why>".
_SKIPPED = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): skipped, (?P<why>.*)$")
#: Line numbers listed in a note before "and N more".
SHOWN_LINES = 5


def check_schema(doc: Mapping[str, Any], path, line: Optional[int] = None) -> None:
    """Refuse a document (or JSON line) whose ``schema_version`` this gputopo does not read."""
    if "schema_version" not in doc:
        return
    v = doc["schema_version"]
    if isinstance(v, bool) or v not in READABLE_SCHEMA_VERSIONS:
        readable = ", ".join(map(str, READABLE_SCHEMA_VERSIONS))
        raise InputFileError(path, f"schema_version {v!r} is not one this gputopo reads (it reads "
                                   f"{readable}): use the gputopo version that wrote it", line=line)


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


def _int_list(v, lengths=(1, 2)) -> bool:
    return (isinstance(v, list) and len(v) in lengths
            and all(isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in v))


def _number_or_text(v) -> bool:
    """A loss as numerics.jsonl writes it: a number, null, or "nan"/"inf"/"-inf"."""
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) or v in ("nan", "inf", "-inf")


def numerics_record_problem(rec: Mapping[str, Any], gpu_indices: Optional[set] = None) -> Optional[str]:
    """Why a numerics.jsonl line is not a numerics record a report can use, or None: the wrong
    types, a verdict or way numerics never writes (an unknown verdict read as "not bad" would
    pass a gate), one GPU twice, or a GPU the run's topology does not have."""
    from gputopo.numerics.verdict import FAILED_VERDICTS, VERDICTS

    gpus = rec.get("gpus")
    if not _int_list(gpus):
        return f"gpus must be a list of one or two GPU indices, got {gpus!r}"
    assert isinstance(gpus, list)
    if len(set(gpus)) != len(gpus):
        return f"gpus {gpus} names a GPU twice"
    if gpu_indices and any(g not in gpu_indices for g in gpus):
        return f"gpus {gpus}: the run's topology has no GPU {[g for g in gpus if g not in gpu_indices][0]}"
    if not isinstance(rec.get("way"), str) or not isinstance(rec.get("verdict"), str):
        return "way and verdict must be strings"
    if rec["verdict"] not in VERDICTS + FAILED_VERDICTS:
        return (f"verdict {rec['verdict'][:40]!r} is not one numerics writes "
                f"({', '.join(VERDICTS + FAILED_VERDICTS)})")
    step = rec.get("step")
    if step is not None and (not isinstance(step, int) or isinstance(step, bool) or step < 0):
        return f"step must be a step number or null, got {step!r}"
    losses = rec.get("losses")
    if losses is not None and (not isinstance(losses, list) or not all(_number_or_text(x) for x in losses)):
        return "losses must be a list of numbers"
    if rec["verdict"] == "ok" and any(x in ("nan", "inf", "-inf") or (_is_num(x) and not math.isfinite(x))
                                      for x in losses or []):
        return "verdict ok, yet a loss is NaN or infinite"
    return None


def event_finding_problem(rec: Mapping[str, Any]) -> Optional[str]:
    """Why an events.jsonl finding line cannot be shown, or None (the kind and severity are
    checked by the Finding itself)."""
    gpus = rec.get("gpus")
    if gpus is not None and not _int_list(gpus, lengths=range(1, 1 << 16)):
        return f"gpus must be a list of GPU indices, got {gpus!r}"
    if not isinstance(rec.get("message", ""), str):
        return "message must be a string"
    return None


def nccl_tests_logs(doc: Mapping[str, Any], path) -> List[Dict[str, Any]]:
    """The ``logs`` of nccl_tests.json: a list of objects, else the file is refused."""
    logs = doc.get("logs", [])
    if not isinstance(logs, list) or not all(isinstance(x, dict) for x in logs):
        raise InputFileError(path, "\"logs\" must be a list of objects (one per imported nccl-tests log)")
    return logs


def _is_num(v) -> TypeGuard[float]:
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
    if isinstance(samples, list) and all(_is_num(x) for x in samples):
        if any(not 0 < x < math.inf for x in samples):
            return "samples_s holds a time that is not a positive finite number of seconds"
        if any(x > MAX_SAMPLE_S for x in samples):
            return f"samples_s holds a time longer than any step may run ({MAX_SAMPLE_S:.0f} s, --timeout's maximum)"
        if not samples and rec.get("error") is None and not (rec.get("extra") or {}).get("time_not_available"):
            return "samples_s is empty, yet no error or reason says why nothing was timed"
    for key in ("size_bytes", "wrong", "bytes_per_iter"):
        v = rec.get(key)
        if _is_num(v) and v < 0:
            return f"{key} is negative ({v})"
    return None


def class_disagreement(measurements, topology) -> Optional[str]:
    """Why topology.json cannot be the measured machine's, or None: measurements that name another
    link class for their pair than topology.json does (a topology copied from another machine, or
    a measurements file from another run). Every writer takes a measurement's class from the same
    topology it saves, so one disagreement means the files do not belong together, and judging
    a pair by a class it was not measured on is a wrong verdict."""
    if topology is None or not topology.pairs:
        return None
    wrong, example = 0, ""
    for m in measurements:
        if len(m.gpus) != 2 or not m.link_class:
            continue
        try:
            in_topology = str(topology.link_class(*m.gpus))
        except KeyError:
            continue
        if in_topology != m.link_class:
            wrong += 1
            example = example or f"GPUs {m.gpus[0]},{m.gpus[1]}: {m.link_class} measured, {in_topology} in topology.json"
    if not wrong:
        return None
    return (f"{wrong} measurement(s) name another link class for their pair than topology.json ({example}): "
            "the topology is not the measured machine's, so no pair can be judged by its class")
