"""The one way tests run the `gputopo` command.

- :func:`gputopo` starts ``python -m gputopo ARGS`` as a user would (a real process: exit code,
  stdout, stderr, signals, pipes, the interpreter's own start and end). A test that uses it
  starts a process, so it is marked ``slow`` (tests/conftest.py's guard fails it otherwise).
- :func:`gputopo_here` runs the same entry point (:func:`gputopo.cli.main.main`) in this
  process, for commands that start no worker (scan, sims, place, diff, check and report of a
  run folder, import, history, refusals): the same exit code, stdout and stderr as the process
  for what those tests assert, without an interpreter start, so such tests stay in
  `make test-fast`. What only a process shows (a closed pipe, /dev/full as stdout, a signal,
  what an import loads, a hang bounded by a timeout) needs :func:`gputopo`.

Both take the command's words (any objects; str() of each), ``cwd`` (default: where pytest
runs), ``env`` (changes to this process's environment; a value None unsets the variable) and
``input`` (text on stdin; else stdin is empty). Both return a :class:`Ran`, a
``subprocess.CompletedProcess`` with text ``stdout`` and ``stderr`` that also unpacks as
``rc, out, err = gputopo(...)``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, Union

#: The repository root (tests/helpers/cli.py -> tests/helpers -> tests -> root).
REPO = Path(__file__).resolve().parents[2]


class Ran(subprocess.CompletedProcess):
    """A finished command: ``.returncode``, ``.stdout``, ``.stderr``, or ``rc, out, err``
    (unpacked or indexed)."""

    def __iter__(self):
        return iter((self.returncode, self.stdout, self.stderr))

    def __getitem__(self, i):
        return (self.returncode, self.stdout, self.stderr)[i]


def cli_env(env: Optional[Mapping[str, Optional[str]]] = None) -> dict:
    """This process's environment with the repository first on PYTHONPATH (the checkout's
    gputopo, whatever is installed) and ``env`` applied (None: the variable unset)."""
    full = dict(os.environ)
    full["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), full.get("PYTHONPATH")) if p)
    for key, value in (env or {}).items():
        if value is None:
            full.pop(key, None)
        else:
            full[key] = value
    return full


def gputopo(*args: Any, cwd: Any = None, env: Optional[Mapping[str, Optional[str]]] = None,
            timeout: float = 120, input: Optional[Union[str, bytes]] = None, stdin: Any = subprocess.DEVNULL,
            text: bool = True) -> Ran:
    """``python -m gputopo ARGS`` in a process of its own, bounded by ``timeout`` seconds
    (subprocess.TimeoutExpired beyond it). ``stdin`` is empty unless ``input`` is given or
    another ``stdin`` (a file, subprocess.PIPE...) is; ``text=False`` gives bytes."""
    argv = [sys.executable, "-m", "gputopo", *map(str, args)]
    proc = subprocess.run(argv, cwd=cwd, env=cli_env(env), capture_output=True, text=text,
                          timeout=timeout, input=input, stdin=None if input is not None else stdin,
                          check=False)
    return Ran(argv, proc.returncode, proc.stdout, proc.stderr)


@contextlib.contextmanager
def _as_the_command(args: list, cwd: Any) -> Iterator[None]:
    """sys.argv as `python -m gputopo ARGS` has it (commands record their argv), the working
    folder, and the environment (the command may set variables, e.g. MPLBACKEND) restored."""
    import gputopo

    saved_argv, saved_cwd, saved_env = sys.argv, os.getcwd(), dict(os.environ)
    sys.argv = [str(Path(gputopo.__file__).with_name("__main__.py")), *args]
    try:
        if cwd is not None:
            os.chdir(cwd)
        yield
    finally:
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        if dict(os.environ) != saved_env:
            os.environ.clear()
            os.environ.update(saved_env)


class _TimedOut(BaseException):
    """Raised by the alarm in the command's stack (a BaseException: no `except Exception` in
    the command takes it for an error of its own)."""


@contextlib.contextmanager
def _bounded(argv: list, timeout: Optional[float]) -> Iterator[None]:
    """subprocess.TimeoutExpired after ``timeout`` seconds, as :func:`gputopo` gives: SIGALRM
    interrupts the command even in a blocking read (where the test runs in the main thread)."""
    import signal
    import threading

    if not timeout or threading.current_thread() is not threading.main_thread():
        yield
        return

    def alarm(signum, frame):
        raise _TimedOut()

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        yield
    except _TimedOut:
        raise subprocess.TimeoutExpired(["gputopo", *argv], timeout) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def gputopo_here(*args: Any, cwd: Any = None, env: Optional[Mapping[str, Optional[str]]] = None,
                 timeout: Optional[float] = 120, input: Optional[Union[str, bytes]] = None,
                 text: bool = True) -> Ran:
    """``gputopo ARGS`` run by :func:`gputopo.cli.main.main` in this process, its streams
    captured as the process's would be: stdout and stderr not a terminal (80 columns unless
    COLUMNS says otherwise, no colour), stdin ``input`` or empty, and the exit code the
    process would end with (as :func:`gputopo.cli.main.entry` maps it). Bounded by ``timeout``
    seconds like :func:`gputopo` (subprocess.TimeoutExpired); ``text=False`` gives the bytes."""
    from click.testing import CliRunner

    from gputopo.cli.main import main

    argv = [str(a) for a in args]
    changes = dict(env or {})
    if "COLUMNS" not in os.environ and "COLUMNS" not in changes:
        # a process's stdin/stdout/stderr are no terminal, so rich falls back to 80 columns;
        # here rich would ask this process's own descriptors (a terminal under `pytest -s`)
        changes["COLUMNS"] = "80"
    with _as_the_command(argv, cwd), CliRunner().isolation(input=input, env=changes) as streams:
        try:
            with _bounded(argv, timeout):
                main(argv)
            code: Any = 0
        except SystemExit as e:
            code = e.code
        if isinstance(code, str):  # as the interpreter (and entry()) do with SystemExit("text")
            print(code, file=sys.stderr)
            code = 1
        elif not isinstance(code, int):
            code = 0 if code is None else 1
        sys.stdout.flush()
        sys.stderr.flush()
        out, err = streams[0].getvalue(), streams[1].getvalue()
    if text:
        out, err = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    return Ran(["gputopo", *argv], code, out, err)


def refused(*argv: Any, code: int = 2) -> str:
    """The one assertion every bad-input test makes: `gputopo ARGV` (in this process) ends with
    exit ``code`` and exactly one stderr line, no traceback; returns that line."""
    proc = gputopo_here(*argv)
    assert proc.returncode == code, (argv, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    return lines[0]
