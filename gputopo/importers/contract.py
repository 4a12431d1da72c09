"""The importer contract (issue 51): what every `gputopo import TOOL` declares and returns.

An importer is one module that reads one tool's output. It declares an :class:`Importer`: its
name (the subcommand), its options beyond the files, ``--out`` and ``--topo``
(:class:`Option`, plain data: the CLI makes the click options from them), and
``parse(paths, topology, **options) -> Imported``: the topology the run folder gets, the
measurements, the entries of what the tool's output held (imported.json's ``imports``), and what could not be read. It
writes nothing, prints nothing and judges nothing: ``importers/run.py``'s ``run_import`` makes
or attaches to the run folder, writes it, renders its report and records it in the history,
the same for every tool; the report (``gputopo/report/``) makes the findings.

A module that reads a tool's text imports the model, the probe, the run folder's names and the
small base modules only (tests/unit/importers/test_importer_contract.py); ``run.py`` alone may
import the report, to render.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pathlib import Path

from gputopo.errors import UsageError
from gputopo.model import Measurement, Topology


@dataclass
class Imported:
    """What an importer's ``parse`` read, ready to be written as a run folder (or attached to one)."""

    #: The run folder's topology: ``--topo``'s (with what the output adds) or the GPUs / NICs the
    #: output names; None only where nothing is written (nccl-debug without a folder).
    topology: Topology | None
    #: What the tool measured, as gputopo's measurements (empty where it measured no GPU pair).
    measurements: list[Measurement]
    #: What the tool's output held: the run folder's imports (imported.json), one entry per file,
    #: log or run, each naming its ``tool``; the one document shape of every tool.
    imports: list[dict[str, Any]]
    #: What could not be read, each said in words (the report says each as ``incomplete-data``).
    not_read: list[str]
    #: run.json's ``source`` (the tool, or the form it read) and ``fabric`` ("cuda" where the
    #: figures are GPUs' figures, "none" where the tool measured no GPU pair), and its options.
    source: str
    fabric: str = "none"
    options: dict[str, Any] = field(default_factory=dict)
    #: The parser's own record (the logs, the kernel-log read), for a caller that shows it.
    parsed: Any = None


@dataclass(frozen=True)
class Option:
    """One command-line option of an importer, beyond FILE..., ``--out`` and ``--topo``: passed
    to ``parse`` as the keyword ``name``."""

    flag: str
    name: str
    help: str
    #: "text", "int", "file" (a path the importer reads), or "flag"
    kind: str = "text"
    metavar: str | None = None
    multiple: bool = False


@dataclass(frozen=True)
class Importer:
    """One `gputopo import NAME` command."""

    name: str
    #: parse(paths, topology, **options) -> Imported; raises InputFileError / UsageError on bad input
    parse: Callable[..., Imported]
    #: The command's help (its first line is the summary `gputopo import --help` lists).
    help: str
    options: tuple[Option, ...] = ()
    #: Several files (FILE...) or one; ``-`` reads stdin where ``stdin`` is True.
    many: bool = True
    #: What the command's usage line calls a file (FILE, LOG; several: FILES..., LOGS...).
    metavar: str = "FILE"
    stdin: bool = True
    #: Takes ``--topo`` (the machine's topology the output is matched to).
    topo: bool = True
    #: The ``--topo`` option's help where it is not the shared one (perftest reads NIC ports from it).
    topo_help: str | None = None
    #: Makes a run folder (nccl-debug attaches to an existing one instead: ``--into``).
    makes_folder: bool = True
    #: An attaching importer's ``--into DIR`` help: what attaching adds to the folder's report.
    into_help: str | None = None
    #: An attaching importer's ``--json`` help: it prints what it read (its document and its
    #: findings) as JSON instead of tables.
    json_help: str | None = None


def one_file(paths: Any) -> str:
    """The one file of an importer that reads one (``many=False``): a path, or a list of one."""
    files = [paths] if isinstance(paths, (str, Path)) else list(paths)
    if len(files) != 1:
        raise UsageError(f"one file expected, {len(files)} given")
    return str(files[0])
