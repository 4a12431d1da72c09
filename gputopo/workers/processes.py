"""The worker processes' machinery shared by the bench runner and the numerics worker pool: the
multiprocessing context (forkserver with torch preloaded), starting workers with Ctrl-C held
and SIGINT blocked (see bench/runner.py's docstring for why; :func:`start_processes` is the one
place a worker process is started), stopping the forkserver on the way out,
and reading a worker log's tail and a process's exit for findings; in a worker (the bench's
and the numerics'), its start (:func:`enter_worker`: its output sent to its log, its exit with
its parent) and its end (:func:`leave`)."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Dict, List, NoReturn, Optional, Sequence, Tuple

#: Lines of a worker's log quoted in a crash finding.
TAIL_LINES = 20


def mp_context():
    """forkserver with torch preloaded where available (Linux, macOS), else spawn."""
    try:
        ctx = mp.get_context("forkserver")
    except ValueError:
        return mp.get_context("spawn")
    ctx.set_forkserver_preload(["torch", "torch.distributed", "gputopo.bench.worker",
                                "gputopo.bench.suites"])
    return ctx


def despite_ctrl_c(stop: Callable[[], None]) -> bool:
    """Run ``stop`` (killing and joining processes) to its end even when Ctrl-C comes during
    it: a second press, or the process group's copy of the first (``timeout -s INT`` sends
    both) used to escape from a join, leaving the processes not yet killed behind and the run
    marked failed. ``stop`` must be safe to call again after a partial run. True when a Ctrl-C
    came (the caller's run is then interrupted)."""
    came = False
    while True:
        try:
            stop()
            return came
        except KeyboardInterrupt:
            came = True


@contextmanager
def starting_workers(ctx):
    """Start worker processes inside this block. Ctrl-C is held while in it and raised as
    KeyboardInterrupt when it ends: a Ctrl-C in the middle of ``Process.start()`` left a forked
    worker whose pid the parent never learnt (so it could not kill it), and that child printed
    a traceback on the terminal when the objects it was unpickling were already gone.

    On first use it starts ``ctx``'s forkserver with SIGINT blocked: the forkserver is in the
    terminal's process group and imports torch for seconds before it ignores SIGINT itself (a
    Ctrl-C then killed it with a traceback); it inherits the blocked signal, and so does every
    worker it forks, from its first instruction. The parent alone decides what Ctrl-C does."""
    held = []
    try:
        old = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    except ValueError:  # not the main thread: Python delivers signals to the main thread only
        old = None
    try:
        if ctx.get_start_method() == "forkserver":
            from multiprocessing import forkserver, resource_tracker

            resource_tracker.ensure_running()  # first: it unblocks SIGINT when it starts one
            with _sigint_blocked():
                forkserver.ensure_running()
        yield
    finally:
        if old is not None:
            signal.signal(signal.SIGINT, old)
            if held:
                if callable(old):
                    old(signal.SIGINT, None)  # default_int_handler raises KeyboardInterrupt
                elif old == signal.SIG_DFL:
                    raise KeyboardInterrupt


def start_processes(ctx, target: Callable[..., Any],
                    workers: Sequence[Tuple[str, Tuple[Any, ...]]]) -> List[Any]:
    """Start worker processes of ``ctx`` (daemons: they die with this process), one per
    ``(name, args)`` of ``workers``, each running ``target(*args)``; all are made, then all
    started, and returned in that order. The one place gputopo starts a worker process (the
    pool's ``WorkerProcesses.start``, workers/pool.py, calls it): call it inside
    :func:`starting_workers`, so that a Ctrl-C waits until their pids are known (to kill
    them)."""
    procs = [ctx.Process(target=target, name=name, args=args, daemon=True) for name, args in workers]
    for p in procs:
        p.start()
    return procs


@contextmanager
def _sigint_blocked():
    """SIGINT blocked in this thread (a child forked meanwhile inherits the mask); a SIGINT that
    arrives is kept pending, not lost."""
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    except (AttributeError, OSError, ValueError):  # no pthread_sigmask on this platform
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def stop_forkserver() -> None:
    """End the forkserver this process started, if any, now (the CLI calls this on its way out).

    Left alone it exits by itself once the run and its workers are gone, but only after tearing
    down an interpreter with torch loaded: a second or more during which a python process,
    reparented to init, outlives the command. SIGKILL is safe here: it holds no state, and the
    workers it forked are already gone (those that were not would die with it: PDEATHSIG)."""
    from multiprocessing import forkserver, util

    fs = getattr(forkserver, "_forkserver", None)
    pid = getattr(fs, "_forkserver_pid", None)
    if fs is None or not pid:
        return
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ChildProcessError, ProcessLookupError, PermissionError):
        pass
    fd = getattr(fs, "_forkserver_alive_fd", None)
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass
    address = getattr(fs, "_forkserver_address", None)
    if address and not util.is_abstract_socket_namespace(address):
        try:
            os.unlink(address)
        except OSError:
            pass
    fs._forkserver_pid = fs._forkserver_alive_fd = fs._forkserver_address = None


def tail(path, lines: int = TAIL_LINES, max_chars: int = 4000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    out = "\n".join(text.rstrip("\n").split("\n")[-lines:])
    return out[-max_chars:]


def exit_text(code: Optional[int]) -> str:
    """'exit code 1', 'killed by signal SIGKILL' or 'still running' for a process's exitcode."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


# ----------------------------------------------------------------------------- in a worker


def enter_worker(log_path: Optional[str], parent_pid: Optional[int],
                 env: Optional[Dict[str, str]]) -> None:
    """In a worker, first of all (the bench's and the numerics' alike): its output appended to
    ``log_path`` (when given), SIGINT ignored (the parent alone decides what Ctrl-C does), its
    exit with ``parent_pid`` (when given), and ``env`` (when given: the parent's environment at
    the worker's start, not the forkserver's) in place of its environment."""
    if log_path:
        redirect_output(log_path)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent_pid:
        watch_parent(parent_pid)
    if env is not None:
        os.environ.clear()
        os.environ.update(env)


def leave(code: int) -> NoReturn:
    """In a worker, its end once its results are delivered: output flushed, then ``os._exit``,
    so interpreter teardown (gloo's occasional SIGABRT after ``destroy_process_group``,
    docs/architecture.md) can never turn delivered results into a failure. The parent's side of
    the same work-around: a worker that dies once every result of its job is in is replaced, not
    a failure (bench/runner.py's idle death, numerics/worker.py's close)."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def redirect_output(log_path: str) -> None:
    """In a worker: stdout and stderr (file descriptors 1 and 2, which its children inherit) are
    appended to ``log_path``."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def libc():
    """The C library already loaded in this process (``ctypes.CDLL(None)``: the process's own
    symbols), without ``ctypes.util.find_library``, which runs ``ldconfig -p`` in a subprocess.
    Raises OSError where it cannot be had."""
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def watch_parent(parent_pid: int) -> None:
    """In a worker: exit when the parent is gone, so no worker outlives a killed run."""
    try:  # Linux: be killed with our parent process (the forkserver, which dies with the run)
        libc().prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass

    def watch():
        while True:
            time.sleep(1.0)
            try:
                os.kill(parent_pid, 0)
            except ProcessLookupError:
                os._exit(3)
            except PermissionError:
                pass

    threading.Thread(target=watch, name="gputopo-parent-watch", daemon=True).start()
