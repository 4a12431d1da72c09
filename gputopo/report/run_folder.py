"""A run folder on disk: load it into a `Run` record, and the small helpers that write one.

Layout (CONTRACTS.md): ``run.json``, ``topology.json``, ``measurements.jsonl`` (one Measurement
per line, appended as each completes), ``events.jsonl`` (step findings such as hang/crash),
``numerics.jsonl`` (training results per pair and way). A run that crashed may leave a truncated
last line in a JSON-lines file: it is skipped and noted, never fatal, because everything before
it is still good data.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from gputopo import SCHEMA_VERSION
from gputopo.errors import InputFileError, UsageError
from gputopo.model import Finding, Measurement, Topology, topology_from_json

RUN_JSON = "run.json"
TOPOLOGY_JSON = "topology.json"
MEASUREMENTS_JSONL = "measurements.jsonl"
EVENTS_JSONL = "events.jsonl"
NUMERICS_JSONL = "numerics.jsonl"
#: Optional: per-log facts of imported nccl-tests output (avg bus bandwidth as printed, ...).
NCCL_TESTS_JSON = "nccl_tests.json"


_FINDING_FIELDS = ("kind", "severity", "message", "gpus", "link_class", "evidence", "cause", "remedies")


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
    notes: List[str] = field(default_factory=list)

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
    topo = None
    if (path / TOPOLOGY_JSON).exists():
        doc = _read_json(path / TOPOLOGY_JSON)
        try:
            topo = topology_from_json(doc)
        except (KeyError, TypeError, ValueError) as e:
            raise InputFileError(path / TOPOLOGY_JSON, f"not a gputopo topology: {e}") from None
    else:
        notes.append(f"no {TOPOLOGY_JSON}: link classes and expected rates come from the measurements only")

    measurements = []
    for lineno, rec in read_jsonl(path / MEASUREMENTS_JSONL, notes):
        try:
            measurements.append(Measurement.from_json(rec))
        except (KeyError, TypeError, ValueError) as e:
            notes.append(f"{MEASUREMENTS_JSONL}:{lineno}: skipped, not a measurement ({e})")

    events, event_findings = [], []
    for lineno, rec in read_jsonl(path / EVENTS_JSONL, notes):
        events.append(rec)
        if rec.get("type") == "finding":
            # Writers may add context (e.g. the bench's "step"); keep it in the evidence.
            d = {k: v for k, v in rec.items() if k in _FINDING_FIELDS}
            context = {k: v for k, v in rec.items() if k not in _FINDING_FIELDS and k != "type"}
            if context:
                d["evidence"] = {**context, **(d.get("evidence") or {})}
            try:
                event_findings.append(Finding.from_json(d))
            except (KeyError, TypeError, ValueError) as e:
                notes.append(f"{EVENTS_JSONL}:{lineno}: skipped finding ({e})")

    numerics = latest_numerics([rec for _, rec in read_jsonl(path / NUMERICS_JSONL, notes)], notes)
    nccl = []
    if (path / NCCL_TESTS_JSON).exists():
        nccl = _read_json(path / NCCL_TESTS_JSON).get("logs", [])
    return Run(path=path, info=info, topology=topo, measurements=measurements,
               event_findings=event_findings, events=events, numerics=numerics,
               nccl_tests=nccl, notes=notes)


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


def read_jsonl(path: Path, notes: List[str]):
    """Yield (line number, object) from a JSON-lines file; missing file yields nothing.

    A line that does not parse is skipped with a note; when it is the last line it is the
    expected leftover of a crash mid-write and says so.
    """
    if not path.exists():
        return
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    # A file ending with "\n" leaves one empty string at the end; drop blank lines.
    numbered = [(k + 1, ln) for k, ln in enumerate(lines) if ln.strip()]
    for idx, (lineno, text) in enumerate(numbered):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError:
            last = idx == len(numbered) - 1
            why = "truncated last line (the run stopped while writing it)" if last else "not JSON"
            notes.append(f"{path.name}:{lineno}: skipped, {why}")
            continue
        if isinstance(obj, dict):
            yield lineno, obj
        else:
            notes.append(f"{path.name}:{lineno}: skipped, not a JSON object")


def _read_json(path: Path) -> Dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except json.JSONDecodeError as e:
        raise InputFileError(path, f"not valid JSON: {e.msg}", line=e.lineno) from None
    except OSError as e:
        raise InputFileError(path, f"cannot read: {e.strerror}") from None
    if not isinstance(doc, dict):
        raise InputFileError(path, "expected a JSON object")
    return doc


# ----------------------------------------------------------------------------- writing

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def new_run_dir(base, machine: str, now: Optional[_dt.datetime] = None) -> Path:
    """Create ``base/<YYYYmmdd-HHMMSS>-<machine>/`` and return it; never reuses a folder.

    When the name exists (two runs in one second) a ``-2``, ``-3``... suffix is added; the
    folder is created with ``exist_ok=False`` so two processes cannot both get the same one.
    """
    base = Path(base)
    base.mkdir(parents=True, exist_ok=True)
    stamp = (now or _dt.datetime.now()).strftime("%Y%m%d-%H%M%S")
    name = f"{stamp}-{_UNSAFE.sub('_', machine).strip('_') or 'machine'}"
    for k in range(1, 10_000):
        cand = base / (name if k == 1 else f"{name}-{k}")
        try:
            cand.mkdir()
            return cand
        except FileExistsError:
            continue
    raise UsageError(f"{base}: cannot create a new run folder named {name}")


def append_jsonl(path, obj: Dict[str, Any]) -> None:
    """Append one JSON object as a line and flush it to disk, so a crash loses nothing before it."""
    line = json.dumps(obj, separators=(",", ":"), default=_json_default)
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()  # reaches the OS now: a crash of this process loses nothing (no fsync: speed)


def write_json(path, obj: Dict[str, Any]) -> None:
    """Write a JSON document atomically (temp file + rename): readers never see half of it."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, default=_json_default)
        f.write("\n")
    os.replace(tmp, path)


def run_info(*, fabric: str, simulated: bool, machine: str, argv: Optional[List[str]] = None,
             options: Optional[Dict[str, Any]] = None, **more) -> Dict[str, Any]:
    """The ``run.json`` document (CONTRACTS.md)."""
    from gputopo import __version__

    return {"schema_version": SCHEMA_VERSION, "gputopo_version": __version__,
            "started": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "argv": list(argv or []), "fabric": fabric, "simulated": simulated,
            "machine": machine, "options": dict(options or {}), **more}


def _json_default(x):
    if hasattr(x, "to_json"):
        return x.to_json()
    if isinstance(x, (set, tuple)):
        return list(x)
    if isinstance(x, Path):
        return str(x)
    raise TypeError(f"not JSON serializable: {type(x).__name__}")
