"""Shared test setup: GPU-only tests skip cleanly where no CUDA device is usable; NVML-only
tests (marker ``nvml``) run wherever an NVIDIA driver answers, even with a CPU-only torch."""

from __future__ import annotations

import contextlib
import signal
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# A test run started in the background of a non-interactive shell (`make test &`, `nohup ...
# &`) has SIGINT ignored, and every process it starts inherits that: the tests that Ctrl-C a
# `gputopo bench` (tests/e2e/test_cli_bench.py) then saw it run on to exit 0, since a program
# started with SIGINT ignored rightly leaves it so (a background job must not take a terminal's
# Ctrl-C). The commands the tests start get Python's own SIGINT handling back, as from a terminal.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# Tests live in subfolders by subject; what they share is imported from here, the tests/ root
# (`from conftest_report import write_run`, `from helpers.cli import gputopo`).
if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))
#: Real outputs kept in the repository (sources in tests/fixtures/README.md).
FIXTURES = REPO / "tests" / "fixtures"


def _cuda_usable() -> bool:
    try:
        import torch

        return torch.cuda.is_available() and torch.cuda.device_count() > 0
    except Exception:
        return False


def _nvml_usable() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return pynvml.nvmlDeviceGetCount() > 0
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    gpu_items = [it for it in items if "gpu" in it.keywords]
    if gpu_items and not _cuda_usable():
        skip = pytest.mark.skip(reason="needs an NVIDIA GPU with a working driver and CUDA torch")
        for it in gpu_items:
            it.add_marker(skip)
    nvml_items = [it for it in items if "nvml" in it.keywords and "gpu" not in it.keywords]
    if nvml_items and not _nvml_usable():
        skip = pytest.mark.skip(reason="needs an NVIDIA driver (NVML) with at least one GPU")
        for it in nvml_items:
            it.add_marker(skip)


def pytest_configure(config):
    """Before anything runs (module- and session-scoped fixtures that run the CLI included),
    the history database is one under a temporary folder, never the real
    ~/.local/share/gputopo/history.sqlite (issue 19); each test then gets its own below. The
    spawn guard (the fast tier, below) is installed here."""
    import os
    import tempfile

    os.environ["GPUTOPO_HISTORY"] = os.path.join(tempfile.mkdtemp(prefix="gputopo-test-history-"),
                                                 "history.sqlite")
    # `gputopo health` keeps its last verdict there, never in the machine's /run/gputopo
    os.environ["GPUTOPO_STATE_DIR"] = tempfile.mkdtemp(prefix="gputopo-test-state-")
    _install_spawn_guard()


def pytest_terminal_summary(terminalreporter):
    """Say how the browser checks of report.html went (CI's log shows that they ran, or why
    not): tests/helpers/browser.py."""
    from helpers.browser import summary_line

    line = summary_line(terminalreporter.stats)
    if line:
        terminalreporter.write_line(line)


@pytest.fixture(autouse=True)
def _history_in_tmp(tmp_path_factory, monkeypatch):
    """Every test (and every CLI it starts) records its runs in a database of its own under
    pytest's tmp folder, never in the real ~/.local/share/gputopo/history.sqlite (issue 19)."""
    monkeypatch.setenv("GPUTOPO_HISTORY", str(tmp_path_factory.mktemp("history") / "history.sqlite"))
    monkeypatch.setenv("GPUTOPO_STATE_DIR", str(tmp_path_factory.mktemp("health-state")))


@pytest.fixture
def fixtures_dir() -> Path:
    assert FIXTURES.is_dir(), f"fixtures missing from the repository: {FIXTURES}"
    return FIXTURES


def wait_for_first_line(proc, path: Path, what: str, timeout_s: float = 120.0) -> None:
    """Wait until ``path`` (a JSONL file a running ``proc`` appends to) has a line, so a test
    can interrupt the run mid-way; fails if ``proc`` ended before that ("the {what} ended...")."""
    import time

    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        if path.exists() and path.read_text().count("\n") >= 1:
            break
        time.sleep(0.05)
    assert proc.poll() is None, f"the {what} ended before it could be interrupted"


# --------------------------------------------------------------------------- the fast tier
# `make test-fast` runs `pytest -m "not slow"`: every test that starts no process. What keeps it
# so is this guard, not a list: while a test that is not marked `slow` is set up, run or torn
# down (its fixtures included, module- and session-scoped ones it is the first to use), starting
# a process (subprocess, multiprocessing, os.fork / forkpty / posix_spawn / system) fails the
# test with a line naming the mark it needs, even where the code under test catches the error
# (the attempt is recorded and the test's report turned into a failure). A test marked `slow`
# may start processes; so may `gpu` and `nvml` tests, which run only on a GPU machine. The guard
# is always on: `make test` (CI) enforces it as `make test-fast` does.
_SPAWN_MARKS = frozenset({"slow", "gpu", "nvml"})
#: Modules whose one-time look-ups start a short process the first time a process needs them,
#: whichever test that happens in (not work of the test): ctypes.util.find_library runs
#: ldconfig/gcc (gputopo.bench.verification finds libc's memcmp at import), matplotlib runs
#: fc-list while it builds its font cache (a fresh checkout's first figure).
_LOOKUP_MODULES = frozenset({"ctypes.util", "matplotlib.font_manager"})
_SPAWN_ALLOWED = [True]
#: The processes a test not allowed to start any tried to start (read at its report).
_SPAWN_ATTEMPTS: list[str] = []


class ProcessInFastTest(RuntimeError):
    """A test not marked slow started a process."""


def _forbid(what: str) -> None:
    if not _SPAWN_ALLOWED[0]:
        import traceback

        message = (f"this test starts a process ({what}) but is not marked slow: add "
                   "@pytest.mark.slow (tests that start processes stay out of `make test-fast`)")
        where = "".join(traceback.format_stack(limit=14)[:-2])  # the caller's, not the guard's
        _SPAWN_ATTEMPTS.append(f"{message}\nstarted from:\n{where}")
        raise ProcessInFastTest(message)


def _a_library_lookup() -> bool:
    """Whether the process about to start is one of _LOOKUP_MODULES' look-ups."""
    frame = sys._getframe(2)
    for _ in range(12):
        if frame is None:
            return False
        if frame.f_globals.get("__name__") in _LOOKUP_MODULES:
            return True
        frame = frame.f_back
    return False


def _install_spawn_guard() -> None:
    """Wrap every way a test can start a process (idempotent)."""
    import multiprocessing.process
    import os
    import subprocess

    if getattr(subprocess.Popen.__init__, "_spawn_guard", False):
        return

    def guard(owner, name: str, describe) -> None:
        original = getattr(owner, name, None)
        if original is None:  # not on this platform
            return

        def guarded(*args, **kwargs):
            if not _SPAWN_ALLOWED[0] and not _a_library_lookup():
                _forbid(describe(*args, **kwargs))
            return original(*args, **kwargs)

        guarded._spawn_guard = True  # type: ignore[attr-defined]
        guarded.__wrapped__ = original  # type: ignore[attr-defined]
        guarded.__name__ = getattr(original, "__name__", name)
        setattr(owner, name, guarded)

    def popen_args(self, args=None, *a, **kw):
        return f"subprocess {kw.get('args', args)!r:.80}"

    guard(subprocess.Popen, "__init__", popen_args)  # subprocess.run/call/check_output, os.popen
    guard(multiprocessing.process.BaseProcess, "start",
          lambda self: f"multiprocessing {self.name}")  # Process, Pool, ProcessPoolExecutor
    guard(os, "fork", lambda: "os.fork")  # also os.spawn*
    guard(os, "forkpty", lambda: "os.forkpty")  # pty.fork
    guard(os, "posix_spawn", lambda path, *a, **kw: f"os.posix_spawn {path!r:.80}")
    guard(os, "posix_spawnp", lambda path, *a, **kw: f"os.posix_spawnp {path!r:.80}")
    guard(os, "system", lambda command: f"os.system {command!r:.80}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    allowed = bool({m.name for m in item.iter_markers()} & _SPAWN_MARKS)
    _SPAWN_ALLOWED[0] = allowed
    _SPAWN_ATTEMPTS.clear()
    with contextlib.ExitStack() as undo:
        if not allowed:
            undo.enter_context(_figures_drawn_here())
        try:
            return (yield)
        finally:
            _SPAWN_ALLOWED[0] = True
            _SPAWN_ATTEMPTS.clear()


@contextlib.contextmanager
def _figures_drawn_here():
    """A report's figures are drawn in a forked child (report/outputs/plot_fork.py); while a
    test that may start no process runs (its module- and session-scoped fixtures included),
    they are drawn in this process: plot_fork's own fallback where fork is not available, the
    same figures one after the other. The fork itself is tested by tests marked slow, and by
    every test that runs the command as a process."""
    from gputopo.report.outputs import plot_fork

    in_child = plot_fork.in_child
    plot_fork.in_child = plot_fork.Later  # type: ignore[assignment]
    try:
        yield
    finally:
        plot_fork.in_child = in_child


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A test whose process start was caught (by the code under test, or in a thread) fails all
    the same, with the guard's line."""
    report = yield
    raised = call.excinfo is not None and call.excinfo.errisinstance(ProcessInFastTest)
    if _SPAWN_ATTEMPTS and not raised:  # raised: the traceback already shows where
        then = ""
        if report.failed:  # e.g. the command caught it and exited 4: the guard's line comes first
            crash = getattr(report.longrepr, "reprcrash", None)
            then = f"\n(then the test failed: {crash.message if crash else report.longrepr})"
        report.outcome = "failed"
        report.longrepr = f"ProcessInFastTest: {_SPAWN_ATTEMPTS[0]}{then}"
    _SPAWN_ATTEMPTS.clear()  # said once, at the phase (setup, call, teardown) that tried
    return report

