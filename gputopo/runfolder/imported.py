"""The writer of an imported run: another tool's output (nccl-tests, nvbandwidth,
p2pBandwidthLatencyTest, a kernel log) written as a run folder the way bench writes one, so
`report`, `check`, `diff` and `place` read it like any run (docs/run-folder.md).

An import writes ``run.json`` (``source`` names the tool; no ``status``: an import is judged as
complete), ``topology.json``, ``measurements.jsonl`` (empty when the tool measured nothing) and
``imported.json``: what it parsed, one entry per file, log or run, each naming its ``tool`` (the one
document shape of every tool; folders imported before it kept nccl_tests.json, kernel_log.json or
nccl_debug.json, still read), into ``--out`` or a new folder under ``reports/``. Run folders are
never overwritten; ``attach_import`` adds one tool's entry to a folder that has none of it
(`import nccl-debug --into`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gputopo import SCHEMA_VERSION
from gputopo.errors import UsageError
from gputopo.model import Measurement, Topology, topology_to_json
from gputopo.writable import check_writable_dir

from .layout import IMPORTED_JSON, MEASUREMENTS_JSONL, RUN_JSON, TOPOLOGY_JSON
from .writer import append_jsonl_all, new_run_dir, run_info, write_json


def import_run_dir(out_dir, base_dir, name: str) -> Path:
    """The folder an import writes: ``--out`` (made if missing; never one that holds a run:
    run folders are never overwritten), else a new one under ``base_dir`` named after ``name``."""
    if out_dir is None:
        return new_run_dir(base_dir, name)
    run_dir = Path(out_dir)
    if run_dir.exists() and ((run_dir / RUN_JSON).exists() or (run_dir / MEASUREMENTS_JSONL).exists()):
        raise UsageError(f"{run_dir}: already holds a run; run folders are never overwritten")
    check_writable_dir(run_dir, "--out")
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def write_imported_run(run_dir: Path, *, source: str, fabric: str, simulated: bool, topology: Topology,
                       argv: list[str], options: dict[str, Any], measurements: Iterable[Measurement],
                       imports: list[dict[str, Any]]) -> None:
    """Write the folder of an import of ``source`` (the tool): run.json, topology.json, every
    measurement (the file exists even when there is none), then imported.json holding
    ``imports`` (what the tool's output held, one entry each naming its ``tool``)."""
    if topology.notes:  # what reading --topo said (cut, no legend): the report says it
        options = {**options, "topology_notes": list(topology.notes)}
    info = run_info(fabric=fabric, simulated=simulated, machine=topology.machine, argv=argv, options=options,
                    source=source)
    write_json(run_dir / RUN_JSON, info)
    write_json(run_dir / TOPOLOGY_JSON, {"schema_version": SCHEMA_VERSION, **topology_to_json(topology)})
    append_jsonl_all(run_dir / MEASUREMENTS_JSONL, (m.to_json() for m in measurements))  # the file even when empty
    write_json(run_dir / IMPORTED_JSON, {"schema_version": SCHEMA_VERSION, "imports": _with_tools(imports)})


def _with_tools(imports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for entry in imports:
        if not entry.get("tool"):
            raise ValueError(f"an import's entry names no tool: {sorted(entry)[:6]}")
    return list(imports)


def attach_import(run_dir: Path, entries: list[dict[str, Any]]) -> Path:
    """Add ``entries`` (one tool's) to the imports of the run folder ``run_dir``: imported.json
    made, or rewritten whole with them added (temp file + rename). UsageError where the folder
    holds that tool's import already (in imported.json, or the file of a folder imported before
    the one shape): a run folder's import is never replaced."""
    from .reader import read_imports

    tools = {e.get("tool") for e in _with_tools(entries)}
    had = [e for e in read_imports(run_dir) if e.get("tool") in tools]
    if had:
        raise UsageError(f"{run_dir / IMPORTED_JSON}: already holds an import of {', '.join(sorted(map(str, tools)))}; "
                         "run folders are never overwritten")
    target = run_dir / IMPORTED_JSON
    kept = []
    if target.exists():
        from .reader import read_json

        kept = [d for d in read_json(target).get("imports") or [] if isinstance(d, dict)]
    write_json(target, {"schema_version": SCHEMA_VERSION, "imports": kept + list(entries)})
    return target
