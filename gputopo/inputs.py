"""The one way gputopo reads a file the user named: a regular file (or ``-``, stdin), read with a
size bound, or one line saying why not (exit 2).

Why: ``open(path).read()`` on what the user typed ran out of memory on ``/dev/zero``, hung
forever on a FIFO with no writer, and raised a traceback on a closed stdin. Every description,
smi text, spec, nccl log and measurements file goes through :func:`read_user_bytes` or
:func:`read_user_text`, which refuse devices, FIFOs, sockets and folders before reading a byte
and stop reading at ``max_bytes``.
"""

from __future__ import annotations

import errno
import os
import stat
import sys

from gputopo.errors import InputFileError

__all__ = ["MAX_DESCRIPTION_BYTES", "MAX_SMI_BYTES", "MAX_SPEC_BYTES", "MAX_TEXT_BYTES", "read_user_bytes", "read_user_text", "user_file_problem"]

#: Default bound: far above any real description, smi text, spec or log (the largest real
#: nccl-tests logs are a few MiB), far below what would exhaust a machine's memory.
MAX_TEXT_BYTES = 64 * 1024 * 1024

#: A description or smi text: a 1,024-GPU `nvidia-smi topo -m` matrix is about 6 MiB.
MAX_DESCRIPTION_BYTES = 32 * 1024 * 1024
MAX_SMI_BYTES = MAX_DESCRIPTION_BYTES

#: A spec is a few dozen lines.
MAX_SPEC_BYTES = 4 * 1024 * 1024

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


def user_file_problem(path) -> str | None:
    """Why ``path`` cannot be read as a user input file (None when it is a readable regular file).
    Never opens it, so a FIFO cannot block: for checks made before anything else runs."""
    try:
        st = os.stat(path)
    except OSError as e:
        return _os_reason(e)
    except ValueError:  # an embedded NUL byte
        return "not a valid path"
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


def read_user_bytes(path, what: str, max_bytes: int = MAX_TEXT_BYTES, *, stdin_ok: bool = False) -> bytes:
    """The bytes of the file the user named ``path`` (with ``stdin_ok``, ``-`` is stdin; else it is
    a file named "-"), at most ``max_bytes``.
    ``what`` names the input in the message ("description", "smi text"...). InputFileError
    (exit 2, one line naming ``path``) for anything else: missing, a folder, a FIFO, a device,
    unreadable, a symlink loop, larger than ``max_bytes``."""
    if stdin_ok and str(path) == "-":
        return _read_stdin(what, max_bytes)
    try:
        # O_NONBLOCK: opening a FIFO with no writer returns at once instead of blocking forever
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise InputFileError(path, f"cannot read the {what}: {_os_reason(e)}") from None
    except ValueError:
        raise InputFileError(repr(str(path)), f"cannot read the {what}: not a valid path") from None
    try:
        st = os.fstat(fd)
        for test, words in _KIND_NAMES:
            if test(st.st_mode):
                raise InputFileError(path, f"cannot read the {what}: {words}")
        if not stat.S_ISREG(st.st_mode):
            raise InputFileError(path, f"cannot read the {what}: is not a regular file")
        if st.st_size > max_bytes:
            raise InputFileError(path, f"{what} is {_size_words(st.st_size)}, larger than "
                                       f"{_size_words(max_bytes)}; is this the right file?")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=True) as f:
            fd = -1
            try:
                return _read_bounded(f, path, what, max_bytes)
            except OSError as e:
                raise InputFileError(path, f"cannot read the {what}: {_os_reason(e)}") from None
    finally:
        if fd >= 0:
            os.close(fd)


def read_user_text(path, what: str, max_bytes: int = MAX_TEXT_BYTES, *, errors: str = "strict",
                   stdin_ok: bool = False) -> str:
    """:func:`read_user_bytes` decoded as UTF-8 (a leading BOM dropped). With ``errors="strict"``
    text that is not UTF-8 is refused in one line naming the byte offset; ``"replace"`` keeps
    going (for logs, where one odd byte must not lose the rest)."""
    data = read_user_bytes(path, what, max_bytes, stdin_ok=stdin_ok)
    try:
        return data.decode("utf-8-sig", errors=errors)
    except UnicodeDecodeError as e:
        where = "<stdin>" if stdin_ok and str(path) == "-" else path
        raise InputFileError(where, f"the {what} is not UTF-8 text (byte {e.start}: "
                                    f"{data[e.start:e.start + 1]!r}); is this the right file?") from None
