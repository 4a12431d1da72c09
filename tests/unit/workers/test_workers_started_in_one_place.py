"""Issue 49, item 1: every worker process is started in one package (gputopo/workers/); the
bench's runner and the numerics' pool call its ``start_process``, and start none themselves."""

from __future__ import annotations

import ast

from helpers.paths import REPO

PACKAGE = REPO / "gputopo"


def process_starts(path) -> list:
    """``X.Process(...)`` calls and ``Process`` imported from multiprocessing, in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "Process":
            found.append(f"{path.relative_to(REPO)}:{node.lineno}")
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("multiprocessing") \
                and any(a.name == "Process" for a in node.names):
            found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    return found


def test_no_module_outside_the_workers_package_starts_a_process():
    outside = [hit for path in sorted(PACKAGE.rglob("*.py"))
               if "workers" not in path.relative_to(PACKAGE).parts
               for hit in process_starts(path)]
    assert outside == []
    inside = [hit for path in sorted((PACKAGE / "workers").rglob("*.py")) for hit in process_starts(path)]
    assert len(inside) == 1  # start_processes


def test_both_supervisors_start_their_workers_through_start_process():
    for module in ("bench/runner.py",):
        tree = ast.parse((PACKAGE / module).read_text(encoding="utf-8"))
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
                 and getattr(n.func, "id", getattr(n.func, "attr", None)) == "start_process"]
        assert calls, module
    numerics = (PACKAGE / "numerics/worker.py").read_text(encoding="utf-8")
    assert "start_processes(" in numerics


def test_both_kinds_of_worker_enter_and_leave_through_the_workers_package():
    """A worker's first steps (its log, SIGINT ignored, its parent watched, the parent's
    environment) and its end (flushed, ``os._exit``: the exit-time SIGABRT work-around) are
    ``enter_worker`` and ``leave``, for the bench's workers and the numerics' alike."""
    for module in ("bench/worker.py", "numerics/worker_main.py"):
        tree = ast.parse((PACKAGE / module).read_text(encoding="utf-8"))
        called = {getattr(n.func, "id", getattr(n.func, "attr", None))
                  for n in ast.walk(tree) if isinstance(n, ast.Call)}
        assert {"enter_worker", "leave"} <= called, module
        assert not called & {"_exit", "redirect_output", "watch_parent"}, module
