"""Checks that a path the user gave can be written, made before anything is measured or changed.

A read-only folder given as ``--out``, ``--junit`` or a run folder to re-render is the user's
input, not a bug: it is refused with one line naming the option and the path (exit 2), and it
is refused before a long bench runs (whose results would have nowhere to go) or before a
re-render deletes the old plots.
"""

from __future__ import annotations

import errno
import math
import os
import select
import stat
import tempfile
import time
from pathlib import Path
from typing import Dict, Optional, Tuple

from gputopo.errors import UsageError


def _nearest_existing(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _refuse_link_loop(p: Path, flag: str) -> None:
    """A symlink loop on the way to ``p`` (``--out loop/x`` with ``loop -> loop``) is the user's
    path, not a bug: one line (Path.exists() says False there, and mkdir then fails)."""
    try:
        os.stat(p)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UsageError(f"{flag} {p}: symbolic links loop (too many levels of links)") from None


def check_writable_dir(path, flag: str) -> None:
    """UsageError unless ``path`` is a folder (or can become one) that files can be written in."""
    p = Path(path)
    _refuse_link_loop(p, flag)
    base = _nearest_existing(p.absolute())
    if not base.is_dir():
        what = "is not a folder" if base == p.absolute() else f"is inside {base}, a file"
        raise UsageError(f"{flag} {path}: {what}")
    try:
        fd, probe = tempfile.mkstemp(prefix=".gputopo-write-check-", dir=base)
    except OSError as e:
        where = "" if base == p.absolute() else f" (in {base})"
        raise UsageError(f"{flag} {path}: cannot write there{where}: "
                         f"{e.strerror or e}") from None
    os.close(fd)
    os.unlink(probe)


#: FIFOs that check_writable_file opened for writing, by (device, inode), held open until the
#: write: closing that first fd would hand a reader such as `cat FIFO` its end of file before a
#: byte was written (it exits; the write then found no reader and was refused).
_HELD: Dict[Tuple[int, int], int] = {}


def _reason(e: OSError) -> str:
    return (e.strerror or str(e)).lower() if e.strerror else str(e)


def _open_for_writing(path: Path, flag: str, *, create: bool) -> int:
    """``path`` opened for writing without waiting (``O_NONBLOCK``: a blocking open of a FIFO
    waits for a reader forever); ``create`` also creates and truncates it. Its fd (a FIFO's
    stays non-blocking), or UsageError naming ``flag`` and the path: a FIFO that no process
    reads, a folder, a path that cannot be written."""
    how = os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if create:
        how |= os.O_CREAT | os.O_TRUNC
    try:
        fd = os.open(path, how, 0o666)
    except OSError as e:
        if e.errno == errno.ENXIO and path.is_fifo():
            raise UsageError(f"{flag} {path}: a FIFO that no process reads (writing would "
                             "wait forever)") from None
        if e.errno == errno.EISDIR:
            raise UsageError(f"{flag} {path}: is a folder; give a file name") from None
        raise UsageError(f"{flag} {path}: cannot write it: {_reason(e)}") from None
    if not stat.S_ISFIFO(os.fstat(fd).st_mode):
        os.set_blocking(fd, True)
    return fd


def _hold_fifo(p: Path, flag: str) -> None:
    st = os.stat(p)
    if (st.st_dev, st.st_ino) not in _HELD:
        _HELD[(st.st_dev, st.st_ino)] = _open_for_writing(p, flag, create=False)


def _take_held(p: Path) -> Optional[int]:
    try:
        st = os.stat(p)
    except (OSError, ValueError):
        return None
    return _HELD.pop((st.st_dev, st.st_ino), None) if stat.S_ISFIFO(st.st_mode) else None


def close_held() -> None:
    """Close the FIFOs check_writable_file holds that were never written (the command ended
    first): their readers get their end of file. Called when a command ends."""
    while _HELD:
        _, fd = _HELD.popitem()
        try:
            os.close(fd)
        except OSError:
            pass


def check_writable_file(path, flag: str) -> None:
    """UsageError unless a file can be written at ``path`` (its folder may not exist yet). An
    existing file is written in place (its folder need not be writable: ``/dev/stdout``); a
    FIFO must have a reader now, and is held open for :func:`write_file_bytes`."""
    p = Path(path)
    _refuse_link_loop(p, flag)
    if p.is_dir():
        raise UsageError(f"{flag} {path}: is a folder; give a file name")
    if p.is_fifo():  # a pipe with a reader (`cat FIFO`, >(xmllint -)) is fine; without one, refused
        _hold_fifo(p, flag)
        return
    if p.exists():
        if not os.access(p, os.W_OK):
            raise UsageError(f"{flag} {path}: cannot write that file: permission denied")
        return
    parent = p.parent if str(p.parent) else Path(".")
    base = _nearest_existing(parent.absolute())
    if not base.is_dir():  # `--plot notes.txt/x.png`: one line naming the file in the way
        raise UsageError(f"{flag} {path}: {base} is a file, not a folder")
    check_writable_dir(parent, flag)


#: How much of the data goes into a pipe per write() (the pipe's own buffer is 64 KiB on Linux).
_PIPE_CHUNK = 64 * 1024


def _write_pipe(fd: int, data: bytes, p: Path, flag: str) -> None:
    """``data`` into the non-blocking FIFO ``fd``: a reader that takes no byte for
    inputs.input_wait_s() seconds, or goes away, is a UsageError (never a write that waits
    forever, nor a partial file said to be written)."""
    from gputopo.inputs import INPUT_WAIT_ENV, input_wait_s

    wait = input_wait_s()
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    done, last = 0, time.monotonic()
    view = memoryview(data)
    while done < len(data):
        try:
            n = os.write(fd, view[done:done + _PIPE_CHUNK])
        except BlockingIOError:
            n = 0
        except BrokenPipeError:
            raise UsageError(f"{flag} {p}: the process reading that FIFO went away after {done} of "
                             f"{len(data)} bytes; nothing more was written") from None
        if n:
            done, last = done + n, time.monotonic()
            continue
        left = last + wait - time.monotonic()
        if left <= 0:
            raise UsageError(f"{flag} {p}: the process reading that FIFO took no byte for {wait:g} s "
                             f"({done} of {len(data)} bytes written); is it still reading? (set "
                             f"{INPUT_WAIT_ENV}=SECONDS to wait longer)")
        poller.poll(max(1, math.ceil(left * 1000)))


def write_file_bytes(path, data: bytes, flag: str) -> None:
    """Write ``data`` to the file the user named with ``flag`` (created, or replaced in place).
    A FIFO is opened without waiting (its reader may have gone since check_writable_file
    looked) and written within :func:`_write_pipe`'s bound; anything that fails (a FIFO no
    process reads, /dev/full, a folder, a read-only place) is one UsageError naming ``flag`` and
    the path. The one way --junit, --plot and --spec are written."""
    p = Path(path)
    held = _take_held(p)
    fd = held if held is not None else _open_for_writing(p, flag, create=True)
    try:
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                _write_pipe(fd, data, p, flag)
            else:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
        finally:
            os.close(fd)
    except OSError as e:  # /dev/full, a full disk, an I/O error (some arrive at close)
        raise UsageError(f"{flag} {path}: cannot write it: {_reason(e)}") from None


def write_text_file(path, text: str, flag: str) -> None:
    """:func:`write_file_bytes` of ``text`` in UTF-8."""
    write_file_bytes(path, text.encode("utf-8"), flag)


def refuse_odd_outputs(folder, names, flag: str, what: str = "a render writes") -> None:
    """UsageError when one of the files ``names`` that a render replaces (or ``what`` does) in
    ``folder`` is there but is no regular file (a FIFO would block the write forever, a device
    or folder fail it): one line naming it, before anything is written."""
    for name in names:
        p = Path(folder) / name
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if stat.S_ISLNK(st.st_mode):
            try:
                st = os.stat(p)
            except OSError:
                continue  # a dangling link: replaced like a missing file
        if not stat.S_ISREG(st.st_mode):
            kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode) else "a folder"
                    if stat.S_ISDIR(st.st_mode) else "not a regular file")
            raise UsageError(f"{flag} {folder}: its {name} is {kind}, not a file {what}; "
                             "remove it and run again")


def os_error_line(e: OSError) -> str:
    """One line for an OSError about a file: what failed, on which path, why."""
    name = e.filename if e.filename is not None else ""
    return f"{name}: {e.strerror or e}" if name else str(e.strerror or e)
