"""No import cycle inside gputopo/ (issue 13): data flows one way through the layers.

Every import counts, a lazy one inside a function too: a lazy import hides a cycle from Python's
import machinery but not from a reader, who still has to hold both modules in mind at once.
A package's ``__init__`` importing its own submodules is not an edge back to the package from
those submodules (Python imports the parent first anyway), so only written imports are edges.

Below, the packages' layers (issue 36), and that no module imports another one's private
(``_name``) names: what two modules share has a public name in one place.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

from helpers.paths import REPO

PACKAGE = REPO / "gputopo"


def _modules() -> Dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _resolve(name: str, mods: Dict[str, Path]) -> str:
    """The module ``name`` lives in: itself, or the nearest enclosing module (``a.b.func``)."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name


def import_graph() -> Dict[str, Set[str]]:
    """module -> the gputopo modules it imports anywhere in its text."""
    mods = _modules()
    graph: Dict[str, Set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        package = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
                # `from pkg import sub` imports the submodule; `from mod import name` the module
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            for t in targets:
                if t.split(".")[0] == "gputopo":
                    dep = _resolve(t, mods)
                    if dep and dep != mod:
                        graph[mod].add(dep)
    return graph


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_no_import_cycle_inside_gputopo():
    found = cycles(import_graph())
    assert not found, "import cycles (each list imports itself round): " + "; ".join(map(str, found))


def test_the_cycle_finder_sees_a_lazy_cycle():
    """The checker itself: a cycle through a lazy import is found, a one-way chain is not."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    graph = import_graph()
    assert "gputopo.cli.group" in graph["gputopo.cli.scan"]  # commands add themselves to the group
    assert "gputopo.cli.scan" in graph["gputopo.cli.main"]   # main imports them (lazily), not back


# ----------------------------------------------------------------------------- packages (issue 36)

#: docs/architecture.md's layers, top first: a package imports only from the layers above it
#: (data flows down, imports point up). ``cli`` may import every layer; ``model`` none.
LAYERS = ("model", "runfolder", "probe", "sim", "workers", "bench", "numerics", "history", "report", "check",
          "cluster", "importers", "export", "jobs", "recording", "fleet", "cli", "__main__")
#: The small modules at the top of the package that serve every layer (and import only each
#: other): exception types, user files, streamed text, writable folders, consoles, tables, and
#: ``gputopo/__init__.py`` (SCHEMA_VERSION).
BASE = ("gputopo", "errors", "inputs", "text_input", "line_prefixes", "writable", "console",
        "fit_table")


def package_of(module: str) -> str:
    """``gputopo.bench.fabrics.cpu`` -> ``bench``; ``gputopo.jobs`` -> ``jobs``; ``gputopo`` -> ``gputopo``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def package_graph(graph: Dict[str, Set[str]]) -> Dict[str, Dict[str, List[str]]]:
    """package -> {package it imports: ["module -> module", ...]} (lazy imports too)."""
    out: Dict[str, Dict[str, List[str]]] = {package_of(m): {} for m in graph}
    for mod, deps in sorted(graph.items()):
        for dep in sorted(deps):
            a, b = package_of(mod), package_of(dep)
            if a != b:
                out[a].setdefault(b, []).append(f"{mod} -> {dep}")
    return out


def layer_violations(packages: Dict[str, Dict[str, List[str]]]) -> List[str]:
    """Every import of a package from a layer below its own (or from no known layer), named."""
    bad = []
    for pkg, deps in sorted(packages.items()):
        for dep, edges in sorted(deps.items()):
            if pkg in BASE:
                ok = dep in BASE
            elif pkg == "model":
                ok = False  # plain records: imports nothing of gputopo
            elif pkg in LAYERS:
                ok = dep in BASE or (dep in LAYERS and LAYERS.index(dep) < LAYERS.index(pkg))
            else:
                ok = False  # a package docs/architecture.md does not place: place it first
            if not ok:
                bad += edges
    return bad


def test_no_import_cycle_between_packages():
    """Packages, not only modules: report/ reads what bench/ and numerics/ record, so neither
    may import report/ back (measuring code returns measurements; report/ alone judges)."""
    packages = package_graph(import_graph())
    found = cycles({p: set(d) for p, d in packages.items()})
    assert not found, "package cycles: " + "; ".join(
        f"{c}: " + ", ".join(e for p in c for d, es in packages[p].items() if d in c for e in es)
        for c in found)


def test_imports_point_up_the_layers():
    """The direction docs/architecture.md gives: every package imports only from the layers
    above it, and every package of gputopo/ has its place there."""
    packages = package_graph(import_graph())
    unplaced = sorted(p for p in packages if p not in LAYERS + BASE)
    assert not unplaced, f"packages docs/architecture.md's layers do not place: {unplaced}"
    bad = layer_violations(packages)
    assert not bad, "imports against the layers (a lower layer imports a higher one):\n" + "\n".join(bad)


def test_the_layer_check_sees_an_import_against_the_layers():
    """The checker itself: measuring code importing the report is named (and with the report
    reading the bench, a package cycle), the report reading the bench is not, and model/ may
    import nothing of gputopo."""
    packages = package_graph({"gputopo.bench.api": {"gputopo.report.measured_findings", "gputopo.model"},
                              "gputopo.report.analysis": {"gputopo.bench.results", "gputopo.errors"},
                              "gputopo.model.finding": {"gputopo.errors"},
                              "gputopo.report.measured_findings": set(), "gputopo.model": set(),
                              "gputopo.bench.results": set(), "gputopo.errors": set()})
    assert layer_violations(packages) == ["gputopo.bench.api -> gputopo.report.measured_findings",
                                          "gputopo.model.finding -> gputopo.errors"]
    assert cycles({p: set(d) for p, d in packages.items()}) == [["bench", "report"]]
    assert package_of("gputopo.bench.fabrics.cpu") == "bench" and package_of("gputopo.jobs") == "jobs"


def test_only_the_report_makes_findings():
    """Measuring code returns measurements and facts; report/ alone judges: no module outside
    gputopo/report/ builds a Finding (reading one back, ``Finding.from_json``, is no judgement)."""
    makers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] in ("report", "model"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Finding":
                makers.append(f"gputopo/{rel}:{node.lineno}")
    assert not makers, "Findings built outside gputopo/report/: " + ", ".join(makers)


# ------------------------------------------------------------------- private names (issue 36)

def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _dotted(node: ast.AST) -> str:
    """``a.b.c`` for a chain of names and attributes, else ''."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    return ".".join([node.id] + parts[::-1])


def private_uses(mod: str, source: str, mods: Dict[str, Path], is_package: bool = False) -> List[str]:
    """Where module ``mod`` reaches another gputopo module's private (``_name``) names: ``from m
    import _name`` (relative too), and ``m._name`` on a name bound to a gputopo module
    (``import gputopo.m as m``, ``from gputopo import m``, ``import gputopo.m`` then
    ``gputopo.m._name``). A public name imported under a private alias (``import x as _x``) is fine."""
    package = mod.split(".") if is_package else mod.split(".")[:-1]
    bound: Dict[str, str] = {}  # local name -> the gputopo module it names
    found: List[str] = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "gputopo" and a.name in mods:
                    if a.asname:
                        bound[a.asname] = a.name
                    else:
                        bound["gputopo"] = "gputopo"
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            if base.split(".")[0] != "gputopo":
                continue
            for a in node.names:
                if f"{base}.{a.name}" in mods:
                    bound[a.asname or a.name] = f"{base}.{a.name}"
                elif _is_private(a.name) and base != mod:
                    found.append(f"{mod}:{node.lineno}: from {base} import {a.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            chain = _dotted(node.value)
            head, _, rest = chain.partition(".")
            if head in bound:
                target = bound[head] + ("." + rest if rest else "")
                if target in mods and target != mod:
                    found.append(f"{mod}:{node.lineno}: {chain}.{node.attr}")
    return found


def test_no_module_imports_another_modules_private_names():
    """What two modules share has a public name in one place: no module of gputopo/ imports
    another one's ``_name`` (nor reaches it as ``module._name``)."""
    mods = _modules()
    found = []
    for mod, path in sorted(mods.items()):
        found += private_uses(mod, path.read_text(encoding="utf-8"), mods, path.name == "__init__.py")
    assert not found, "private names used across modules:\n" + "\n".join(found)


def test_the_private_name_check_sees_each_way_in():
    """The checker itself: a private name imported (absolute, relative, in a function) or reached
    through a module is named; a public one, one aliased private, or a module's own is not."""
    mods = {m: Path() for m in ("gputopo", "gputopo.a", "gputopo.a.b", "gputopo.a.c")}
    source = ("from gputopo.a.c import _x, y\n"
              "from .c import z as _z\n"
              "import gputopo.a.c as c\n"
              "import gputopo.a.c\n"
              "from gputopo.a import c as cc\n"
              "def f():\n"
              "    from .c import _w\n"
              "    return c._v, cc._u, gputopo.a.c._t, c.pub, c.__name__, os._exit\n")
    assert private_uses("gputopo.a.b", source, mods) == [
        "gputopo.a.b:1: from gputopo.a.c import _x", "gputopo.a.b:7: from gputopo.a.c import _w",
        "gputopo.a.b:8: c._v", "gputopo.a.b:8: cc._u", "gputopo.a.b:8: gputopo.a.c._t"]
    assert private_uses("gputopo.a.c", "from gputopo.a.c import _x\n", mods) == []
