"""The run folder as the bench writes it, line by line, and reads it back for ``--resume``.

Layout (docs/run-folder.md): ``run.json`` (what was asked, rewritten atomically when the run's status
changes), ``topology.json``, ``measurements.jsonl`` (one Measurement per line, appended and
flushed the moment it reaches the parent), ``events.jsonl`` (``{"type": "finding", ...}`` for
hang/crash, ``{"type": "step-done", "step": id, ...}``), ``workers/*.log`` (each worker
process's stdout/stderr); the numerics add ``numerics.jsonl``. A run stopped at any point
(Ctrl-C, a crash of the parent) leaves every completed line readable; a truncated last line is
skipped by readers (:func:`read_jsonl`).

The file helpers here (``new_run_dir``, ``append_jsonl``, ``write_json``, ``read_jsonl``,
``run_info``, ``finding_from_event``) are the only ones: the numerics, the report's loader and
the importers use them.
"""

from __future__ import annotations

import datetime as _dt
import contextlib
import json
import os
import re
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

from gputopo import SCHEMA_VERSION, __version__
from gputopo.errors import InputFileError, UsageError
from gputopo.model import Finding, Measurement, Topology, topology_to_json
from gputopo.writable import check_writable_dir

RUN_JSON = "run.json"
TOPOLOGY_JSON = "topology.json"
MEASUREMENTS_JSONL = "measurements.jsonl"
EVENTS_JSONL = "events.jsonl"
#: Written by the numerics (DP-vs-DDP training results per pair and way) into the same folder.
NUMERICS_JSONL = "numerics.jsonl"
WORKERS_DIR = "workers"

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def new_run_dir(base, machine: str, now: Optional[_dt.datetime] = None) -> Path:
    """Create ``base/<YYYYmmdd-HHMMSS>-<machine>/`` and return it; never reuses a folder.

    When the name exists (two runs in one second) a ``-2``, ``-3``... suffix is added; the
    folder is created with ``exist_ok=False`` so two processes cannot both get the same one.
    """
    base = Path(base)
    check_writable_dir(base, "reports folder")
    base.mkdir(parents=True, exist_ok=True)
    stamp = (now or _dt.datetime.now()).strftime("%Y%m%d-%H%M%S")
    # the machine's name is user text (a description's `name`): only safe characters, and short
    name = f"{stamp}-{_UNSAFE.sub('_', machine or '').strip('_')[:60] or 'machine'}"
    for k in range(1, 10_000):
        cand = base / (name if k == 1 else f"{name}-{k}")
        try:
            cand.mkdir()
            return cand
        except FileExistsError:
            continue
    raise UsageError(f"{base}: cannot create a new run folder named {name}")


def claim_out_dir(path) -> Path:
    """``--out DIR``: create it, or accept an empty one; never write into an existing run."""
    p = Path(path)
    if p.exists():
        if not p.is_dir():
            raise UsageError(f"--out {p}: exists and is not a folder")
        if (p / RUN_JSON).exists():
            raise UsageError(f"--out {p}: holds a run already (use --resume {p} to continue it, or "
                             "give --out a new or empty folder)")
        if any(p.iterdir()):
            raise UsageError(f"--out {p}: folder is not empty and not a run folder: give --out a new or "
                             "empty folder")
    check_writable_dir(p, "--out")
    p.mkdir(parents=True, exist_ok=True)
    return p


# ----------------------------------------------------------------------------- JSON files


def json_default(x):
    """``json`` fallback for records: ``to_json()``, sets and tuples as lists, paths as text."""
    if hasattr(x, "to_json"):
        return x.to_json()
    if isinstance(x, (set, tuple)):
        return list(x)
    if isinstance(x, Path):
        return str(x)
    raise TypeError(f"not JSON serializable: {type(x).__name__}")


def append_jsonl(path, obj: Dict[str, Any], *, allow_nan: bool = True) -> None:
    """Append one JSON object as a line and flush it, so a crash loses nothing before it.

    The flush hands the line to the OS before the call returns (no fsync: speed)."""
    line = json.dumps(obj, separators=(",", ":"), default=json_default, allow_nan=allow_nan)
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()


def write_json(path, obj: Dict[str, Any]) -> None:
    """Write a JSON document atomically (temp file + rename): readers never see half of it."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, default=json_default)
        f.write("\n")
    os.replace(tmp, path)


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


def run_info(*, fabric: str, simulated: bool, machine: str, argv: Optional[List[str]] = None,
             options: Optional[Dict[str, Any]] = None, **more) -> Dict[str, Any]:
    """The ``run.json`` document of a new run (docs/run-folder.md)."""
    return {"schema_version": SCHEMA_VERSION, "gputopo_version": __version__,
            "started": _now(), "argv": list(argv or []), "fabric": fabric,
            "simulated": simulated, "machine": machine, "options": dict(options or {}), **more}


def _now() -> str:
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


class RunLog:
    """Appends to one run folder. Every write reaches the OS before the call returns."""

    def __init__(self, run_dir):
        self.dir = Path(run_dir)
        (self.dir / WORKERS_DIR).mkdir(parents=True, exist_ok=True)
        self._info: Dict[str, Any] = {}

    @property
    def measurements_path(self) -> Path:
        return self.dir / MEASUREMENTS_JSONL

    @property
    def events_path(self) -> Path:
        return self.dir / EVENTS_JSONL

    def start(self, *, fabric: str, simulated: bool, machine: str, options: Dict[str, Any],
              topology: Topology, argv: List[str], **more) -> None:
        """Write run.json and topology.json of a new run (or note a resumption)."""
        path = self.dir / RUN_JSON
        if path.exists():
            self._info = json.loads(path.read_text(encoding="utf-8"))
            self._info.setdefault("resumed", []).append(_now())
            self._info.update(status="running", **more)
        else:
            self._info = run_info(fabric=fabric, simulated=simulated, machine=machine, argv=argv,
                                  options=options, **{"status": "running", **more})
        write_json(path, self._info)
        tpath = self.dir / TOPOLOGY_JSON
        if not tpath.exists():
            write_json(tpath, dict(topology_to_json(topology), schema_version=SCHEMA_VERSION))

    def finish(self, status: str, **more) -> None:
        self._info.update(status=status, finished=_now(), **more)
        write_json(self.dir / RUN_JSON, self._info)

    def measurement(self, record: Dict[str, Any]) -> None:
        append_jsonl(self.measurements_path, record)

    def finding(self, f: Finding) -> None:
        """``{"type": "finding", ...Finding.to_json()}`` (the step id is in its evidence)."""
        append_jsonl(self.events_path, {"type": "finding", **f.to_json()})

    def step_done(self, step_id: str, status: str, **more) -> None:
        append_jsonl(self.events_path, {"type": "step-done", "step": step_id, "status": status,
                                        **more})

    def event(self, record: Dict[str, Any]) -> None:
        """Any other ``{"type": ...}`` line (a step a resume redoes, a worker that died idle)."""
        append_jsonl(self.events_path, record)

    def worker_log(self, key: str, generation: int) -> Path:
        return self.dir / WORKERS_DIR / f"{key}.{generation}.log"


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


def read_run_info(run_dir) -> Dict[str, Any]:
    """run.json of a run folder (UsageError when it is not one)."""
    p = Path(run_dir)
    path = p / RUN_JSON
    if not path.is_file():
        raise UsageError(f"--resume {p}: not a gputopo run folder (no {RUN_JSON})")
    from gputopo.inputs import MAX_TEXT_BYTES, read_user_text

    try:
        info = json.loads(read_user_text(path, RUN_JSON, MAX_TEXT_BYTES))
    except InputFileError as e:
        raise UsageError(f"--resume {p}: {e}") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"--resume {p}: cannot read {RUN_JSON}: {e}") from None
    from .resume_check import check_run_info

    return check_run_info(info, path)


@contextlib.contextmanager
def errors_belong_to(run_dir):
    """Tag an exception escaping the block with ``run_dir`` (unless an inner block already
    did), so the CLI saves an internal error's traceback into that run folder (docs/run-folder.md)."""
    try:
        yield
    except Exception as e:
        if getattr(e, "run_dir", None) is None:
            try:
                setattr(e, "run_dir", str(run_dir))  # noqa: B010 (a tag no Exception type declares)
            except AttributeError:  # exceptions without a __dict__
                pass
        raise


def set_run_status(run_dir, status: str, **more) -> None:
    """Rewrite run.json's ``status`` (atomically), e.g. when a phase after the bench steps (the
    numerics) runs, completes or is interrupted. Nothing happens where there is no run.json."""
    path = Path(run_dir) / RUN_JSON
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return
    info.update(status=status, **more)
    if status == "running":
        info.pop("finished", None)
    else:
        info["finished"] = _now()
    write_json(path, info)


def read_progress(run_dir) -> Tuple[Dict[str, str], List[Measurement], List[Finding]]:
    """The last status of each step marked done, measurements already taken, findings already
    recorded."""
    p = Path(run_dir)
    done: Dict[str, str] = {}
    findings: List[Finding] = []
    for _, rec in read_jsonl(p / EVENTS_JSONL):
        if rec.get("type") == "step-done":
            step, status = rec.get("step"), rec.get("status")
            if isinstance(step, str) and isinstance(status, str):  # else not a step we can resume
                done[step] = status
        elif rec.get("type") == "finding":
            try:
                findings.append(finding_from_event(rec))
            except (KeyError, TypeError, ValueError):
                pass
    measurements = []
    for lineno, rec in read_jsonl(p / MEASUREMENTS_JSONL):
        try:
            measurements.append(Measurement.from_json(rec))
        except (KeyError, TypeError, ValueError) as e:  # a resume would build on a broken file
            raise InputFileError(p / MEASUREMENTS_JSONL, f"not a measurement ({e}); fix or "
                                 "remove that line to resume", line=lineno) from None
    return done, measurements, findings
