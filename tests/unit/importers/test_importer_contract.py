"""The importer contract (issue 51 item 2): every importer is declared in one registry, reads its
tool's text without judging it, and runs through one ``run_import``.

- The modules that read a tool's text import the model, the probe, the run folder's package and
  the small base modules only (and each other): never the report, the CLI, bench or the history.
  ``importers/run.py`` alone may import the report, to render the folder it wrote.
- Every `gputopo import` subcommand is an importer of the registry, and every importer a command.
- ``parse`` writes nothing: the folder is made by ``run_import``.
"""

from __future__ import annotations

import ast

from helpers.paths import REPO

from gputopo.importers.contract import Imported
from gputopo.importers.run import IMPORTERS, run_import

IMPORTERS_DIR = REPO / "gputopo" / "importers"
#: What a module reading a tool's text may import from gputopo (packages and base modules).
ALLOWED = ("gputopo.model", "gputopo.probe", "gputopo.runfolder", "gputopo.importers", "gputopo.errors",
           "gputopo.inputs", "gputopo.text_input", "gputopo.line_prefixes", "gputopo.writable")
#: The one module of importers/ that may render (and so import the report).
RUNNER = "run.py"


def gputopo_imports(path) -> list[str]:
    """Every gputopo module ``path`` imports, lazily inside a function too (relative ones resolved)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.split(".")[0] == "gputopo"]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = "gputopo.importers" + (f".{base}" if base else "")
            if base.split(".")[0] == "gputopo":
                out.append(base)
    return out


def forbidden(imports: list[str]) -> list[str]:
    return [m for m in imports if m != "gputopo" and not any(m == a or m.startswith(a + ".") for a in ALLOWED)]


def test_modules_reading_a_tools_text_import_no_report_and_no_cli():
    bad = {}
    for path in sorted(IMPORTERS_DIR.glob("*.py")):
        if path.name == RUNNER:
            continue
        found = forbidden(gputopo_imports(path))
        if found:
            bad[path.name] = found
    assert not bad, f"importers/ modules importing beyond model, probe, runfolder and the base modules: {bad}"


def test_the_check_names_a_report_import_it_is_given(tmp_path):
    """The check itself: a lazy import of the report inside a function is found; model is not."""
    mod = tmp_path / "x.py"
    mod.write_text("from gputopo.model import Topology\nfrom .contract import Imported\n"
                   "def f():\n    from gputopo.report.expected import class_of\n")
    assert forbidden(gputopo_imports(mod)) == ["gputopo.report.expected"]


def test_every_import_command_is_a_registered_importer():
    from gputopo.cli.importer import import_group

    assert sorted(import_group.commands) == sorted(IMPORTERS)
    for name, imp in IMPORTERS.items():
        command = import_group.commands[name]
        assert command.help and command.help.split("\n")[0] == imp.help.split("\n")[0]
        flags = {o for p in command.params for o in getattr(p, "opts", [])}
        assert {o.flag for o in imp.options} <= flags, name
        assert ("--topo" in flags) == imp.topo, name
        # an attaching importer (nccl-debug) gets --into and --json from the registry too; a
        # folder-making one --out
        assert ({"--into", "--json"} <= flags) == (not imp.makes_folder), name
        assert ("--out" in flags) == imp.makes_folder, name


def test_parse_writes_nothing_and_run_import_writes_the_folder(tmp_path, monkeypatch):
    """``parse`` returns what the folder gets; ``run_import`` makes the folder from it."""
    from helpers.paths import FIXTURES

    log = FIXTURES / "nccl-tests" / "autodl_2x2080ti_all_reduce.txt"
    monkeypatch.chdir(tmp_path)
    imported = IMPORTERS["nccl-tests"].parse([log], None)
    assert isinstance(imported, Imported) and imported.measurements and imported.source == "nccl-tests"
    assert list(tmp_path.iterdir()) == []  # nothing written
    res = run_import("nccl-tests", [log], out_dir=tmp_path / "run", render=False)
    assert res.run_dir == tmp_path / "run"
    assert {p.name for p in res.run_dir.iterdir()} >= {"run.json", "topology.json", "measurements.jsonl"}
    lines = (res.run_dir / "measurements.jsonl").read_text().splitlines()
    assert len(lines) == len(res.imported.measurements) == len(imported.measurements)
