"""Issue 49, item 1: every worker process is started in one package (gputopo/workers/); the
bench's runner and the numerics' pool run their workers on its pool (workers/pool.py), and
start none themselves."""

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


def calls_of(module: str) -> set:
    tree = ast.parse((PACKAGE / module).read_text(encoding="utf-8"))
    return {getattr(n.func, "id", getattr(n.func, "attr", None))
            for n in ast.walk(tree) if isinstance(n, ast.Call)}


def test_both_supervisors_run_their_workers_on_the_one_pool():
    """The bench's runner and the numerics' pool (and through it the sim's jobs) make their
    workers, pipes included, through the pool (workers/pool.py's WorkerProcesses), which alone
    calls ``start_processes``; neither makes a Pipe or a Queue of its own."""
    for module in ("bench/runner.py", "numerics/worker.py"):
        called = calls_of(module)
        assert "WorkerProcesses" in called, module
        assert not called & {"start_processes", "Pipe", "Queue", "SimpleQueue"}, module
    callers = [path.relative_to(PACKAGE).as_posix() for path in sorted(PACKAGE.rglob("*.py"))
               if path.name != "processes.py" and "start_processes" in calls_of(path.relative_to(PACKAGE).as_posix())]
    assert callers == ["workers/pool.py"]


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
