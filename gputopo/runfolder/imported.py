"""The writer of an imported run: another tool's output (nccl-tests, nvbandwidth,
p2pBandwidthLatencyTest, a kernel log) written as a run folder the way bench writes one, so
`report`, `check`, `diff` and `place` read it like any run (docs/run-folder.md).

An import writes ``run.json`` (``source`` names the tool; no ``status``: an import is judged as
complete), ``topology.json``, ``measurements.jsonl`` (empty when the tool measured nothing) and
one document of what it parsed (``nccl_tests.json``, ``imported.json`` or ``kernel_log.json``),
into ``--out`` or a new folder under ``reports/``. Run folders are never overwritten.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gputopo import SCHEMA_VERSION
from gputopo.errors import UsageError
from gputopo.model import Measurement, Topology, topology_to_json
from gputopo.writable import check_writable_dir

from .layout import MEASUREMENTS_JSONL, RUN_JSON, TOPOLOGY_JSON
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
                       document_name: str, document: dict[str, Any]) -> None:
    """Write the folder of an import of ``source`` (the tool): run.json, topology.json, every
    measurement (the file exists even when there is none), then ``document_name`` holding
    ``document`` (what the tool's output held, with ``schema_version``)."""
    if topology.notes:  # what reading --topo said (cut, no legend): the report says it
        options = {**options, "topology_notes": list(topology.notes)}
    info = run_info(fabric=fabric, simulated=simulated, machine=topology.machine, argv=argv, options=options,
                    source=source)
    write_json(run_dir / RUN_JSON, info)
    write_json(run_dir / TOPOLOGY_JSON, {"schema_version": SCHEMA_VERSION, **topology_to_json(topology)})
    append_jsonl_all(run_dir / MEASUREMENTS_JSONL, (m.to_json() for m in measurements))  # the file even when empty
    write_json(run_dir / document_name, {"schema_version": SCHEMA_VERSION, **document})
