"""The run folder as the bench writes it, line by line, and reads it back for ``--resume``.

Layout (CONTRACTS.md): ``run.json`` (what was asked, rewritten atomically when the run's status
changes), ``topology.json``, ``measurements.jsonl`` (one Measurement per line, appended and
flushed the moment it reaches the parent), ``events.jsonl`` (``{"type": "finding", ...}`` for
hang/crash, ``{"type": "step-done", "step": id, ...}``), ``workers/*.log`` (each worker
process's stdout/stderr). A run stopped at any point (Ctrl-C, a crash of the parent) leaves
every completed line readable; a truncated last line is skipped by readers.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Set, Tuple

from gputopo import SCHEMA_VERSION, __version__
from gputopo.errors import UsageError
from gputopo.model import Finding, Measurement, Topology, topology_to_json

RUN_JSON = "run.json"
TOPOLOGY_JSON = "topology.json"
MEASUREMENTS_JSONL = "measurements.jsonl"
EVENTS_JSONL = "events.jsonl"
WORKERS_DIR = "workers"

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def new_run_dir(base, machine: str, now: Optional[_dt.datetime] = None) -> Path:
    """Create ``base/<YYYYmmdd-HHMMSS>-<machine>/``, never reusing a folder (adds -2, -3...)."""
    base = Path(base)
    base.mkdir(parents=True, exist_ok=True)
    stamp = (now or _dt.datetime.now()).strftime("%Y%m%d-%H%M%S")
    name = f"{stamp}-{_UNSAFE.sub('_', machine or '').strip('_') or 'machine'}"
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
        if any(p.iterdir()):
            raise UsageError(f"--out {p}: folder is not empty (use --resume {p} to continue a run)")
    p.mkdir(parents=True, exist_ok=True)
    return p


def _dumps(obj) -> str:
    return json.dumps(obj, separators=(",", ":"), default=_default)


def _default(x):
    if hasattr(x, "to_json"):
        return x.to_json()
    if isinstance(x, (set, tuple)):
        return list(x)
    if isinstance(x, Path):
        return str(x)
    raise TypeError(f"not JSON serializable: {type(x).__name__}")


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
        now = _dt.datetime.now().astimezone().isoformat(timespec="seconds")
        path = self.dir / RUN_JSON
        if path.exists():
            self._info = json.loads(path.read_text(encoding="utf-8"))
            self._info.setdefault("resumed", []).append(now)
            self._info.update(status="running", **more)
        else:
            self._info = {"schema_version": SCHEMA_VERSION, "gputopo_version": __version__,
                          "started": now, "argv": list(argv), "fabric": fabric,
                          "simulated": simulated, "machine": machine, "options": options,
                          "status": "running", **more}
        self._write_json(path, self._info)
        tpath = self.dir / TOPOLOGY_JSON
        if not tpath.exists():
            self._write_json(tpath, dict(topology_to_json(topology), schema_version=SCHEMA_VERSION))

    def finish(self, status: str, **more) -> None:
        self._info.update(status=status,
                          finished=_dt.datetime.now().astimezone().isoformat(timespec="seconds"),
                          **more)
        self._write_json(self.dir / RUN_JSON, self._info)

    def measurement(self, record: Dict[str, Any]) -> None:
        self._append(self.measurements_path, record)

    def finding(self, f: Finding) -> None:
        """``{"type": "finding", ...Finding.to_json()}`` (the step id is in its evidence)."""
        self._append(self.events_path, {"type": "finding", **f.to_json()})

    def step_done(self, step_id: str, status: str, **more) -> None:
        self._append(self.events_path, {"type": "step-done", "step": step_id, "status": status,
                                        **more})

    def worker_log(self, key: str, generation: int) -> Path:
        return self.dir / WORKERS_DIR / f"{key}.{generation}.log"

    @staticmethod
    def _append(path: Path, obj) -> None:
        line = _dumps(obj) + "\n"
        with open(path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()

    @staticmethod
    def _write_json(path: Path, obj) -> None:
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=2, default=_default)
            f.write("\n")
        os.replace(tmp, path)


def _read_lines(path: Path):
    if not path.exists():
        return
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a stop mid-write
            if isinstance(obj, dict):
                yield obj


def read_run_info(run_dir) -> Dict[str, Any]:
    """run.json of a run folder (UsageError when it is not one)."""
    p = Path(run_dir)
    path = p / RUN_JSON
    if not path.is_file():
        raise UsageError(f"--resume {p}: not a gputopo run folder (no {RUN_JSON})")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise UsageError(f"--resume {p}: cannot read {RUN_JSON}: {e}") from None


def read_progress(run_dir) -> Tuple[Set[str], List[Measurement], List[Finding]]:
    """Steps already done, measurements already taken, findings already recorded."""
    p = Path(run_dir)
    done: Set[str] = set()
    findings: List[Finding] = []
    for rec in _read_lines(p / EVENTS_JSONL):
        if rec.get("type") == "step-done":
            done.add(rec.get("step"))
        elif rec.get("type") == "finding":
            d = {k: v for k, v in rec.items() if k not in ("type", "step")}
            try:
                findings.append(Finding.from_json(d))
            except (TypeError, ValueError):
                pass
    measurements = []
    for rec in _read_lines(p / MEASUREMENTS_JSONL):
        try:
            measurements.append(Measurement.from_json(rec))
        except (KeyError, TypeError, ValueError):
            pass
    return done, measurements, findings
