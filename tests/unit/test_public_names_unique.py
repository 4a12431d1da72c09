"""No two public module-level functions of gputopo/ share a name (issue 51 item 3): a reader who
greps a name, or meets it in a traceback, finds one function. Two ``normalize_bus_id`` beside
model/bus_id.py (each a thin wrapper of its decoders) were how it went wrong before.

Public: a module-level ``def`` (or ``async def``) whose name does not start with ``_``, in any
module of the package. Methods are not module-level and are not listed.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from typing import Dict, List

from helpers.paths import REPO

PACKAGE = REPO / "gputopo"

#: Duplicates whose every definition lies in a package another branch is rewriting now (the
#: worker-pool refactor, issue 49, owns bench/, numerics/, workers/ and cluster/); renamed when it
#: lands. Nothing outside those packages may be added here.
PENDING = {
    "judge": {"gputopo/numerics/verdict.py", "gputopo/cluster/rounds.py"},
}
PENDING_PACKAGES = ("gputopo/bench/", "gputopo/numerics/", "gputopo/workers/", "gputopo/cluster/")


def public_functions() -> Dict[str, List[str]]:
    """{name: the modules (paths from the repository root) that define a public function of it}."""
    where: Dict[str, List[str]] = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                where[node.name].append(path.relative_to(REPO).as_posix())
    return where


def duplicates(where: Dict[str, List[str]]) -> Dict[str, List[str]]:
    """The names defined in more than one module, each name's pending definitions not counted."""
    out = {}
    for name, paths in where.items():
        if len([p for p in paths if p not in PENDING.get(name, set())]) > 1:
            out[name] = paths
    return out


def test_no_two_public_functions_share_a_name():
    dups = duplicates(public_functions())
    assert not dups, "public functions sharing a name (rename one; grep its callers):\n" + "\n".join(
        f"  {name}: {', '.join(paths)}" for name, paths in sorted(dups.items()))


def test_pending_duplicates_are_only_in_the_packages_being_rewritten():
    for name, paths in PENDING.items():
        assert all(p.startswith(PENDING_PACKAGES) for p in paths), name


def test_the_check_finds_a_duplicate_it_is_given():
    """The check itself: a name defined in two modules is found; one defined once is not."""
    assert duplicates({"f": ["gputopo/a.py", "gputopo/b.py"], "g": ["gputopo/a.py"]}) == {
        "f": ["gputopo/a.py", "gputopo/b.py"]}
    # a pending pair plus a third definition elsewhere is a duplicate again
    three = ["gputopo/numerics/verdict.py", "gputopo/cluster/rounds.py", "gputopo/report/rules.py"]
    assert "judge" not in duplicates({"judge": three})  # the two pending ones are not counted
    assert "judge" in duplicates({"judge": three + ["gputopo/export/sources.py"]})
