"""Writing a run folder: claim it (a new ``reports/<stamp>-<machine>/`` or an empty ``--out``),
hold its lock, write ``run.json`` and ``topology.json``, rewrite run.json's status atomically,
and append measurements / events / numerics lines, each flushed the moment it exists
(docs/run-folder.md). A run stopped at any point leaves every completed line readable; a cut
last line is skipped by the reader (reader.read_jsonl) and cleared before a resume appends
(resume.clear_cut_lines).

Every writer of the raw files goes through them: the bench (:class:`RunLog`), the numerics, the
imports (imported.py) and the cluster's folder.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import re
import time
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional

from gputopo import SCHEMA_VERSION, __version__
from gputopo.errors import UsageError
from gputopo.model import Finding, Topology, topology_to_json
from gputopo.writable import check_writable_dir

from .layout import (EVENTS_JSONL, LOCK_FILE, MEASUREMENTS_JSONL, RUN_JSON, STATUSES, TOPOLOGY_JSON,
                     WORKERS_DIR)

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


def append_jsonl_all(path, objs: Iterable[Dict[str, Any]], *, allow_nan: bool = True) -> int:
    """Append every object of ``objs`` as a line through one open file (an import's records,
    written at once: one open per line made a 200,000-row import spend most of its time opening
    the file); flushed at the end. The number of lines written."""
    n = 0
    # One encoder, not one per line; records are trees made by to_json(), so the encoder's
    # circular-reference bookkeeping (a dict per container) is left out.
    encode = json.JSONEncoder(separators=(",", ":"), default=json_default, allow_nan=allow_nan,
                              check_circular=False).encode
    with open(path, "a", encoding="utf-8") as f:
        for obj in objs:
            f.write(encode(obj) + "\n")
            n += 1
        f.flush()
    return n


def write_json(path, obj: Dict[str, Any]) -> None:
    """Write a JSON document atomically (temp file + rename): readers never see half of it.
    The temp file is always a new one (a leftover of that name - a killed write, or a FIFO in a
    run folder a user names, which an open would wait on forever - is removed first)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0),
                 0o666)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, default=json_default)
        f.write("\n")
    os.replace(tmp, path)


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
        self._info.update(status=_status(status), finished=_now(), **more)
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
    _status(status)
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


def _status(status: str) -> str:
    """``status`` if it is one run.json may hold (layout.STATUSES): a reader takes any other as
    a damaged file, so a writer never writes one."""
    if status not in STATUSES:
        raise ValueError(f"run.json status {status!r} is not one of {', '.join(STATUSES)}")
    return status


# ----------------------------------------------------------------------------- the lock

_HELD: Dict[str, List[Any]] = {}  # real path -> [fd, depth]

#: Seconds a lock held elsewhere is waited for before another writer is named. Why: a flock
#: belongs to the open file, and a process this one starts (the multiprocessing forkserver, from
#: a thread, while a phase holds the lock) shares it until it closes its inherited descriptors
#: at exec, milliseconds later; the next phase's lock in that window was refused as "another
#: gputopo" (seen once in the tests). A real other writer holds it for the whole run.
LOCK_GRACE_S = 2.0


@contextlib.contextmanager
def run_folder_lock(run_dir) -> Iterator[None]:
    """Hold the run folder's write lock: one writer per folder (two resumes of one folder at
    once would append the same steps twice). ``fcntl.flock`` on ``.gputopo.lock`` in the folder,
    held while the job writes; UsageError (one line, exit 2) when another process holds it.
    Re-entrant within one process (the bench phase and the numerics phase of one job)."""
    import fcntl

    key = os.path.realpath(run_dir)
    held = _HELD.get(key)
    if held is not None:
        held[1] += 1
        try:
            yield
        finally:
            held[1] -= 1
        return
    fd = os.open(os.path.join(key, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + LOCK_GRACE_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if time.monotonic() < deadline:  # maybe our own lock, still shared with a child
                time.sleep(0.02)             # this process is starting (see LOCK_GRACE_S)
                continue
            os.close(fd)
            raise UsageError(f"{run_dir}: another gputopo is writing this run folder (it holds "
                             f"{LOCK_FILE}); wait for it to finish, then run this again") from None
        except OSError:  # a filesystem without flock (ENOLCK on some NFS): go on unlocked
            pass
        break
    _HELD[key] = [fd, 1]
    try:
        yield
    finally:
        del _HELD[key]
        os.close(fd)  # closing the descriptor releases the flock
