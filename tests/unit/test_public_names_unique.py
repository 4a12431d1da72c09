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
    """The names defined in more than one module."""
    return {name: paths for name, paths in where.items() if len(paths) > 1}


def test_no_two_public_functions_share_a_name():
    dups = duplicates(public_functions())
    assert not dups, "public functions sharing a name (rename one; grep its callers):\n" + "\n".join(
        f"  {name}: {', '.join(paths)}" for name, paths in sorted(dups.items()))


def test_the_check_finds_a_duplicate_it_is_given():
    """The check itself: a name defined in two modules is found; one defined once is not."""
    assert duplicates({"f": ["gputopo/a.py", "gputopo/b.py"], "g": ["gputopo/a.py"]}) == {
        "f": ["gputopo/a.py", "gputopo/b.py"]}
