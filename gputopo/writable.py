"""Checks that a path the user gave can be written, made before anything is measured or changed.

A read-only folder given as ``--out``, ``--junit`` or a run folder to re-render is the user's
input, not a bug: it is refused with one line naming the option and the path (exit 2), and it
is refused before a long bench runs (whose results would have nowhere to go) or before a
re-render deletes the old plots.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

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


def _open_fifo_for_writing(path: Path, flag: str) -> int:
    """A FIFO opened for writing without waiting (a blocking open waits for a reader forever):
    its fd (non-blocking), UsageError when no process reads it, OSError for any other failure."""
    try:
        return os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as e:
        if e.errno == errno.ENXIO:
            raise UsageError(f"{flag} {path}: a FIFO that no process reads (writing would "
                             "wait forever)") from None
        raise


def check_writable_file(path, flag: str) -> None:
    """UsageError unless a file can be written at ``path`` (its folder may not exist yet)."""
    p = Path(path)
    _refuse_link_loop(p, flag)
    if p.is_dir():
        raise UsageError(f"{flag} {path}: is a folder; give a file name")
    if p.exists() and not os.access(p, os.W_OK):
        raise UsageError(f"{flag} {path}: cannot write that file: permission denied")
    if p.is_fifo():  # a pipe with a reader (/dev/stdout | xmllint) is fine; without one, open blocks
        try:
            os.close(_open_fifo_for_writing(p, flag))
        except OSError:
            pass
    check_writable_dir(p.parent if str(p.parent) else Path("."), flag)


def write_text_file(path, text: str, flag: str) -> None:
    """Write ``text`` to ``path`` (UTF-8). A FIFO is opened without waiting: its reader may have
    gone since check_writable_file looked (a blocking open would then wait forever), so a FIFO
    that no process reads is a UsageError here too."""
    p = Path(path)
    if not p.is_fifo():
        p.write_text(text, encoding="utf-8")
        return
    fd = _open_fifo_for_writing(p, flag)
    os.set_blocking(fd, True)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def os_error_line(e: OSError) -> str:
    """One line for an OSError about a file: what failed, on which path, why."""
    name = e.filename if e.filename is not None else ""
    return f"{name}: {e.strerror or e}" if name else str(e.strerror or e)
