"""Every `gputopo import TOOL`: the registry of importers and the one flow that runs them.

``IMPORTERS`` lists each importer's declaration (importers/contract.py), in the order
`gputopo import --help` lists them; the CLI makes its import commands from it. ``run_import``
is the one tail every import shares: parse the files (the importer's ``parse``), then either
make a run folder (``--out`` or a new one under reports/), write it (runfolder/imported.py:
run.json, topology.json, measurements.jsonl, the document), render its report and hand it to
the history (``after``, the CLI's hook), or, for an importer that attaches (nccl-debug's
``--into``), read the existing folder's topology, add its entries to the folder's imports
(runfolder/imported.py attach_import) and render that folder again.

This module alone among importers/ imports the report: to render the folder it wrote.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gputopo.errors import UsageError
from gputopo.model import Topology
from gputopo.runfolder.imported import attach_import, import_run_dir, write_imported_run
from gputopo.runfolder.layout import DEFAULT_BASE_DIR

from . import ibstat_import, kernel_log_import, nccl_debug, nccl_tests_import, nvbandwidth_import, p2pbw_import
from . import perftest_import
from .contract import Imported, Importer

#: Every importer, in the order `gputopo import --help` lists them.
IMPORTERS: dict[str, Importer] = {i.name: i for i in (
    nvbandwidth_import.IMPORTER, p2pbw_import.IMPORTER, ibstat_import.IMPORTER, perftest_import.IMPORTER,
    nccl_tests_import.IMPORTER, kernel_log_import.IMPORTER, nccl_debug.IMPORTER)}


@dataclass
class ImportResult:
    """Where an import went and what it read."""

    run_dir: Path | None  # None: nothing written (nccl-debug without --into)
    imported: Imported
    summary: Any = None  # gputopo.report.summary.Summary when rendered


def importer(name: str) -> Importer:
    try:
        return IMPORTERS[name]
    except KeyError:
        raise UsageError(f"no importer {name!r}; known: {', '.join(IMPORTERS)}") from None


def run_import(name: str, paths: Sequence[Any] | str | Path, *, topology: Topology | None = None,
               topology_file: str | None = None, out_dir=None, base_dir=DEFAULT_BASE_DIR, into=None,
               argv: list[str] | None = None, render: bool = True, console=None,
               show: Callable[[Imported, Any], None] | None = None,
               announce: Callable[[str], None] | None = None, after: Callable[[Path], None] | None = None,
               **options: Any) -> ImportResult:
    """Import ``paths`` with the importer ``name``; ``options`` are its declared options.

    A folder-making importer writes ``out_dir`` (made; refused where it holds a run: run folders
    are never overwritten) or a new folder under ``base_dir``; an attaching one (``into``) adds its
    document to that run folder (refused where it has one already) and writes nothing without it.
    Then ``show(imported, console)`` (what the command prints before the report), the report
    rendered (``render``), ``announce`` told the folder, and ``after(run_dir)`` (the history).
    InputFileError / UsageError on bad input, before anything is written."""
    imp = importer(name)
    files = [paths] if isinstance(paths, (str, Path)) else list(paths)
    topo_kw: dict[str, Any] = {"topology_file": topology_file} if imp.topo else {}
    if not imp.makes_folder:
        return _attach(imp, files, topology, topology_file, into, render, console, options)
    imported = imp.parse(files, topology, **topo_kw, **options)
    topo = imported.topology
    assert topo is not None, f"{name}: a folder-making importer returns a topology"
    run_dir = import_run_dir(out_dir, base_dir, topo.machine or name)
    write_imported_run(run_dir, source=imported.source, fabric=imported.fabric, simulated=bool(topo.simulated),
                       topology=topo, argv=argv if argv is not None else ["import", name, *map(str, files)],
                       options=imported.options, measurements=imported.measurements, imports=imported.imports)
    result = ImportResult(run_dir=run_dir, imported=imported)
    if show is not None:
        show(imported, console)
    if render:
        from gputopo.report.render import render_run

        result.summary = render_run(run_dir, console=console)
    if announce is not None:
        announce(f"\nrun folder: {run_dir}")
    if after is not None:
        after(run_dir)
    return result


def _attach(imp: Importer, files: list, topology: Topology | None, topology_file: str | None, into,
            render: bool, console, options: dict[str, Any]) -> ImportResult:
    """An attaching importer (nccl-debug): without ``into`` only parsed; with it, matched to that
    run folder's topology and its document added there (never over one it has), then rendered."""
    if into is None:
        imported = imp.parse(files, topology, topology_file=topology_file, **options)
        return ImportResult(run_dir=None, imported=imported)
    if topology is not None:
        raise UsageError(f"--topo {topology_file}: --into {into} matches the log to that run's own "
                         "topology; give one of --into and --topo")
    from gputopo.report.run_folder import load_run

    run = load_run(into)  # not a run folder, or a broken one: one line, before anything is written
    imported = imp.parse(files, run.topology, into=into, **options)
    attach_import(Path(into), imported.imports)  # refused where the folder has this tool's import
    result = ImportResult(run_dir=Path(into), imported=imported)
    if render:
        from gputopo.report.render import render_run

        result.summary = render_run(into, console=console)
    return result


__all__ = ["IMPORTERS", "ImportResult", "importer", "run_import"]
