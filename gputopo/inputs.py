"""The one way gputopo reads a file the user named: a regular file, a pipe (a named FIFO, or
the ``/dev/fd/N`` of a shell's process substitution ``<(ssh node nvidia-smi topo -m)``) or ``-``
(stdin), read with a size bound, or one line saying why not (exit 2).

Why: ``open(path).read()`` on what the user typed ran out of memory on ``/dev/zero``, hung
forever on a FIFO with no writer, and raised a traceback on a closed stdin. Every description,
smi text, spec, nccl log and measurements file goes through :func:`read_user_bytes`,
:func:`read_user_text` or :func:`open_user_stream`, which refuse devices, sockets and folders
before reading a byte and stop reading at ``max_bytes``.

A pipe is opened without blocking (``O_NONBLOCK``: POSIX ``open()`` of a FIFO for reading
otherwise waits for a writer) and then waited on with ``poll()`` for its first byte, at most
:func:`input_wait_s` seconds (``GPUTOPO_INPUT_WAIT``, default 30): a FIFO nobody writes is
refused in one line, never waited on forever. (On Linux, poll() on a FIFO opened that way
reports nothing until a writer has opened it: a writer that opens, writes and closes is read
whole; one that opens and closes without writing gives an empty input.) After the first byte
the rest is read to its end, within the same size bound as a file, each next byte waited for
within the same bound: a writer that stops without closing the pipe is one line naming how many
bytes came, never a wait without end nor a partial input passed as whole (:class:`_PipeReader`).
A pipe can be read once: what a FIFO gave :func:`read_user_bytes` is kept for this process, so a
command that reads its input twice (``scan --sim`` loads the description again to record the
scan in the history) sees the same text; a pipe streamed through :func:`open_user_stream` is
not kept, and opening it again is refused at once. Files inside a run
folder are gputopo's own, never a pipe: their readers pass ``fifo_ok=False`` and a FIFO there
is refused at once.
"""

from __future__ import annotations

import errno
import io
import math
import os
import select
import stat
import sys
import time
from typing import BinaryIO, Dict, Optional, Tuple

from gputopo.errors import InputFileError, UsageError

__all__ = ["DEFAULT_INPUT_WAIT_S", "INPUT_WAIT_ENV", "MAX_DESCRIPTION_BYTES", "MAX_SMI_BYTES", "MAX_SPEC_BYTES",
           "MAX_TEXT_BYTES", "input_wait_s", "is_fifo", "open_user_stream", "read_user_bytes", "read_user_text",
           "user_file_problem"]

#: Default bound: far above any real description, smi text, spec or log (the largest real
#: nccl-tests logs are a few MiB), far below what would exhaust a machine's memory.
MAX_TEXT_BYTES = 64 * 1024 * 1024

#: A description or smi text: a 1,024-GPU `nvidia-smi topo -m` matrix is about 6 MiB.
MAX_DESCRIPTION_BYTES = 32 * 1024 * 1024
MAX_SMI_BYTES = MAX_DESCRIPTION_BYTES

#: A spec is a few dozen lines.
MAX_SPEC_BYTES = 4 * 1024 * 1024

#: The environment variable that sets how many seconds a pipe may take to give its first byte.
INPUT_WAIT_ENV = "GPUTOPO_INPUT_WAIT"
#: ... and its default: long enough for `ssh node nvidia-smi topo -m` to log in and answer.
DEFAULT_INPUT_WAIT_S = 30.0
#: The longest wait that may be set (a day): beyond it a typo, not a wish.
_MAX_INPUT_WAIT_S = 86400.0

_KIND_NAMES = ((stat.S_ISDIR, "is a folder, not a file"),
               (stat.S_ISFIFO, "is a FIFO (named pipe), not a regular file"),
               (stat.S_ISCHR, "is a character device, not a regular file"),
               (stat.S_ISBLK, "is a block device, not a regular file"),
               (stat.S_ISSOCK, "is a socket, not a regular file"))


def _size_words(n: int) -> str:
    return f"{n / 1024 / 1024:.0f} MiB" if n >= 1024 * 1024 else f"{n} bytes"


def _os_reason(e: OSError) -> str:
    if e.errno == errno.ELOOP:
        return "symbolic links loop (too many levels of links)"
    if e.errno == errno.ENOENT:
        return "no such file"
    if e.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return (e.strerror or str(e)).lower() if e.strerror else str(e)


def input_wait_s() -> float:
    """Seconds a pipe may take to give its first byte: ``GPUTOPO_INPUT_WAIT`` when set (0 means
    only what is already written), else 30. A value that is not a number of seconds is a
    UsageError (exit 2) naming the variable."""
    raw = os.environ.get(INPUT_WAIT_ENV, "").strip()
    if not raw:
        return DEFAULT_INPUT_WAIT_S
    try:
        wait = float(raw)
    except ValueError:
        wait = math.nan
    if not (0 <= wait <= _MAX_INPUT_WAIT_S):
        raise UsageError(f"{INPUT_WAIT_ENV}={raw[:40]!r}: expected the seconds to wait for a pipe's first byte, "
                         f"a number from 0 to {_MAX_INPUT_WAIT_S:.0f} (default {DEFAULT_INPUT_WAIT_S:.0f})")
    return wait


def is_fifo(path) -> bool:
    """Whether ``path`` is a pipe (a named FIFO, or a shell's ``/dev/fd/N``); never opens it."""
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def user_file_problem(path, *, fifo_ok: bool = False) -> str | None:
    """Why ``path`` cannot be read as a user input file (None when it is a readable regular file,
    or with ``fifo_ok`` a pipe, which the readers here wait on within :func:`input_wait_s`).
    Never opens it, so a FIFO cannot block: for checks made before anything else runs."""
    try:
        st = os.stat(path)
    except OSError as e:
        return _os_reason(e)
    except ValueError:  # an embedded NUL byte
        return "not a valid path"
    if fifo_ok and stat.S_ISFIFO(st.st_mode):
        return None if os.access(path, os.R_OK) else "permission denied"
    for test, words in _KIND_NAMES:
        if test(st.st_mode):
            return words
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if not os.access(path, os.R_OK):
        return "permission denied"
    return None


def _read_bounded(fileobj, path, what: str, max_bytes: int) -> bytes:
    data = fileobj.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise InputFileError(path, f"{what} is larger than {_size_words(max_bytes)}; "
                                   "is this the right file?")
    return data


def _read_stdin(what: str, max_bytes: int) -> bytes:
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None or sys.stdin.closed:
        raise InputFileError("-", f"stdin is closed; pipe the {what} in, or give a file name")
    try:
        return _read_bounded(stream, "<stdin>", what, max_bytes)
    except OSError as e:
        raise InputFileError("<stdin>", f"cannot read the {what}: {_os_reason(e)}") from None
    except ValueError:  # I/O on a closed file
        raise InputFileError("-", f"stdin is closed; pipe the {what} in, or give a file name") from None


#: What each pipe gave this process, by (path, device, inode): a pipe is read once.
_PIPE_BYTES: Dict[Tuple[str, int, int], bytes] = {}


def _pipe_key(path, st: os.stat_result) -> Tuple[str, int, int]:
    return os.path.abspath(os.fspath(path)), st.st_dev, st.st_ino


def _open_nonblocking(path, what: str) -> int:
    try:
        # O_NONBLOCK: opening a FIFO with no writer returns at once instead of blocking forever
        return os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise InputFileError(path, f"cannot read the {what}: {_os_reason(e)}") from None
    except ValueError:
        raise InputFileError(repr(str(path)), f"cannot read the {what}: not a valid path") from None


def _refuse_kind(path, what: str, st: os.stat_result, fifo_ok: bool) -> None:
    """InputFileError unless ``st`` is a regular file (or, with ``fifo_ok``, a pipe)."""
    if fifo_ok and stat.S_ISFIFO(st.st_mode):
        return
    for test, words in _KIND_NAMES:
        if test(st.st_mode):
            raise InputFileError(path, f"cannot read the {what}: {words}")
    if not stat.S_ISREG(st.st_mode):
        raise InputFileError(path, f"cannot read the {what}: is not a regular file")


def _await_bytes(poller, path, what: str, wait: float, got: int) -> None:
    """Return once the pipe has a byte to read or its writer has closed it; InputFileError when
    neither happens within ``wait`` seconds (``got``: the bytes it gave before, named in the
    line: a writer that stalls after some bytes never passes as a complete input)."""
    deadline = time.monotonic() + wait
    while True:
        left = deadline - time.monotonic()
        if poller.poll(max(0, math.ceil(left * 1000))):  # POLLIN, or POLLHUP: the writer is done
            return
        if time.monotonic() >= deadline:
            break
    if got == 0:
        raise InputFileError(path, f"cannot read the {what}: it is a pipe (FIFO) and nothing came "
                                   f"through it in {wait:g} s; is the command that writes it running? "
                                   f"(set {INPUT_WAIT_ENV}=SECONDS to wait longer)")
    raise InputFileError(path, f"cannot read the {what}: it is a pipe (FIFO) that gave {got} bytes, then "
                               f"nothing more for {wait:g} s without being closed; is the command that "
                               f"writes it stuck? (set {INPUT_WAIT_ENV}=SECONDS to wait longer)")


class _PipeReader(io.RawIOBase):
    """A pipe's read end (non-blocking fd) read with every wait bounded: each read waits at most
    :func:`input_wait_s` seconds for a byte (or the writer's close), so a writer that stops
    writing without closing the pipe is one line naming how many bytes came, never a read that
    waits forever."""

    def __init__(self, fd: int, path, what: str):
        super().__init__()
        self._fd, self._path, self._what = fd, path, what
        self._wait = input_wait_s()
        self._poller = select.poll()
        self._poller.register(fd, select.POLLIN | select.POLLPRI)
        self.bytes_read = 0

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def first_byte(self) -> None:
        """Wait for the first byte (or the writer's close) within the bound."""
        _await_bytes(self._poller, self._path, self._what, self._wait, 0)

    def readinto(self, b) -> int:
        while True:
            _await_bytes(self._poller, self._path, self._what, self._wait, self.bytes_read)
            try:
                n = os.readv(self._fd, [b])
            except BlockingIOError:  # woken, but another reader took it: wait again
                continue
            self.bytes_read += n
            return n

    def close(self) -> None:
        if not self.closed:
            try:
                os.close(self._fd)
            finally:
                super().close()


#: Pipes this process streamed through open_user_stream (their bytes are not kept: a log may be
#: larger than memory), by the same key as _PIPE_BYTES: opening one again is refused at once.
_PIPE_STREAMED: set = set()


def _open_checked(path, what: str, fifo_ok: bool) -> Tuple[BinaryIO, os.stat_result, Optional[bytes]]:
    """``path`` opened for reading: (its stream, its stat, None), or (an empty stream, its stat,
    the bytes) for a pipe this process already read whole. A pipe is waited on for its first
    byte, and then for every next one, within :func:`input_wait_s` (:class:`_PipeReader`). A
    pipe streamed before (its bytes gone) is refused at once. InputFileError for what may not be
    read (:func:`_refuse_kind`)."""
    fd = _open_nonblocking(path, what)
    try:
        st = os.fstat(fd)
        _refuse_kind(path, what, st, fifo_ok)
        if stat.S_ISFIFO(st.st_mode):
            key = _pipe_key(path, st)
            seen = _PIPE_BYTES.get(key)
            if seen is not None:
                return io.BytesIO(), st, seen
            if key in _PIPE_STREAMED:
                raise InputFileError(path, f"cannot read the {what}: this pipe was read already by this "
                                           "command and a pipe gives its bytes once; give it once")
            pipe = _PipeReader(fd, path, what)
            fd = -1
            try:
                pipe.first_byte()
            except BaseException:
                pipe.close()
                raise
            return io.BufferedReader(pipe), st, None
        os.set_blocking(fd, True)
        fd, opened = -1, fd
        return os.fdopen(opened, "rb", closefd=True), st, None
    finally:
        if fd >= 0:
            os.close(fd)


def read_user_bytes(path, what: str, max_bytes: int = MAX_TEXT_BYTES, *, stdin_ok: bool = False,
                    fifo_ok: bool = True) -> bytes:
    """The bytes of the file the user named ``path`` (with ``stdin_ok``, ``-`` is stdin; else it is
    a file named "-"), at most ``max_bytes``. A pipe (FIFO, ``/dev/fd/N``) is read when its first
    byte comes within :func:`input_wait_s` seconds and to its end while no wait for a next byte
    lasts longer (``fifo_ok=False``: refused at once).
    ``what`` names the input in the message ("description", "smi text"...). InputFileError
    (exit 2, one line naming ``path``) for anything else: missing, a folder, a device, a silent
    or stalled pipe, unreadable, a symlink loop, larger than ``max_bytes``."""
    if stdin_ok and str(path) == "-":
        return _read_stdin(what, max_bytes)
    f, st, seen = _open_checked(path, what, fifo_ok)
    if seen is not None:
        if len(seen) > max_bytes:
            raise InputFileError(path, f"{what} is larger than {_size_words(max_bytes)}; is this the right file?")
        return seen
    with f:
        if st.st_size > max_bytes:
            raise InputFileError(path, f"{what} is {_size_words(st.st_size)}, larger than "
                                       f"{_size_words(max_bytes)}; is this the right file?")
        try:
            data = _read_bounded(f, path, what, max_bytes)
        except OSError as e:
            raise InputFileError(path, f"cannot read the {what}: {_os_reason(e)}") from None
    if stat.S_ISFIFO(st.st_mode):
        _PIPE_BYTES[_pipe_key(path, st)] = data
    return data


def open_user_stream(path, what: str, *, fifo_ok: bool = True) -> BinaryIO:
    """The file the user named ``path`` opened for streaming (the caller closes it and bounds
    what it reads): a regular file, or a pipe once its first byte has come within
    :func:`input_wait_s` seconds, every later wait for a byte bounded the same way. A pipe this
    process already read whole gives the same bytes again. A streamed pipe's bytes are not kept
    (a log may be larger than memory): no command streams its input twice, and the same pipe
    opened again (`import nccl-debug P P`) is refused at once instead of waiting for a writer
    that is gone. InputFileError (one line naming ``path``) for what :func:`read_user_bytes`
    refuses, the size aside."""
    f, st, seen = _open_checked(path, what, fifo_ok)
    if seen is not None:
        return io.BytesIO(seen)
    if stat.S_ISFIFO(st.st_mode):
        _PIPE_STREAMED.add(_pipe_key(path, st))
    return f


def read_user_text(path, what: str, max_bytes: int = MAX_TEXT_BYTES, *, errors: str = "strict",
                   stdin_ok: bool = False, fifo_ok: bool = True) -> str:
    """:func:`read_user_bytes` decoded as UTF-8 (a leading BOM dropped). With ``errors="strict"``
    text that is not UTF-8 is refused in one line naming the byte offset; ``"replace"`` keeps
    going (for logs, where one odd byte must not lose the rest)."""
    data = read_user_bytes(path, what, max_bytes, stdin_ok=stdin_ok, fifo_ok=fifo_ok)
    try:
        return data.decode("utf-8-sig", errors=errors)
    except UnicodeDecodeError as e:
        where = "<stdin>" if stdin_ok and str(path) == "-" else path
        raise InputFileError(where, f"the {what} is not UTF-8 text (byte {e.start}: "
                                    f"{data[e.start:e.start + 1]!r}); is this the right file?") from None
