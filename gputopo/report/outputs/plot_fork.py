"""Draw some figures in a forked child process while the caller draws others.

Why a fork: matplotlib is single-threaded (a thread would not draw at the same time), and a
fresh interpreter would import matplotlib again and need the summary pickled; a forked child
has both already. The child only draws and writes its PNGs, sends back what it made (pickled
Plot records) and leaves with ``os._exit`` (no atexit handler, no flush of buffers it inherited:
nothing is printed twice). If fork is not available, or the child fails in any way (an error,
a signal, a full disk), the same work is done again in this process, so its error surfaces
here exactly as without the child, and nothing drawn is lost.
"""

from __future__ import annotations

import os
import pickle
import sys
from contextlib import contextmanager
from typing import Callable, Generic, Optional, TypeVar

T = TypeVar("T")


class Later(Generic[T]):
    """The result of work started in a child (or to be done here): :meth:`result` waits."""

    def __init__(self, work: Callable[[], T], pid: Optional[int] = None, fd: Optional[int] = None):
        self._work, self._pid, self._fd = work, pid, fd

    def cancel(self) -> None:
        """Stop the child (if any) and reap it; its work is not done anywhere."""
        if self._pid is None or self._fd is None:
            return
        import signal

        try:
            os.kill(self._pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self._pid, 0)
        os.close(self._fd)
        self._pid = self._fd = None

    def result(self) -> T:
        if self._pid is None or self._fd is None:
            return self._work()
        data = b""
        try:
            with os.fdopen(self._fd, "rb") as r:
                data = r.read()
        finally:
            _, status = os.waitpid(self._pid, 0)
        if os.waitstatus_to_exitcode(status) == 0 and data:
            try:
                return pickle.loads(data)
            except Exception:  # noqa: BLE001 - a torn message: do the work here
                pass
        return self._work()


@contextmanager
def _interrupts_held():
    """Hold SIGINT and SIGTERM (blocked, so they wait) across the fork. Why: a Ctrl-C taken
    by the child between ``fork()`` and its ``try`` would unwind the parent's stack copied into
    it: run the command's clean-up (stop the forkserver, rewrite run.json) a second time, from a
    second process. The child calls the function it is given: it ignores both signals from
    then on (the parent, which gets them, cancels it) and unblocks them."""
    import signal

    held = {signal.SIGINT, signal.SIGTERM}
    block = getattr(signal, "pthread_sigmask", None)
    old = block(signal.SIG_BLOCK, held) if block is not None else None

    def child_ignores() -> None:
        for sig in held:
            signal.signal(sig, signal.SIG_IGN)

    try:
        yield child_ignores
    finally:
        if block is not None and old is not None:
            block(signal.SIG_SETMASK, old)  # a signal that came meanwhile is delivered now


def in_child(work: Callable[[], T]) -> Later[T]:
    """Start ``work`` in a forked child; ``.result()`` gives what it returned (or does it here)."""
    if not hasattr(os, "fork"):
        return Later(work)
    sys.stdout.flush()
    sys.stderr.flush()
    with _interrupts_held() as child_ignores:
        try:
            r, w = os.pipe()
            pid = os.fork()
        except OSError:
            return Later(work)
        if pid == 0:
            child_ignores()
    if pid == 0:  # the child
        code = 1
        try:
            os.close(r)
            payload = pickle.dumps(work())
            with os.fdopen(w, "wb") as f:
                f.write(payload)
            code = 0
        except BaseException:  # noqa: BLE001 - the parent redoes the work and reports it
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    return Later(work, pid, r)
