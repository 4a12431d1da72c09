"""The text file an importer reads, streamed: a path or ``-`` (stdin), line by line in bounded
memory (a 1 GB log is never held whole; a "line" is cut at 1 MiB so a file without newlines
cannot fill memory either). A binary file (NUL bytes at its start) or an unreadable one is
refused with one line naming it (InputFileError: exit 2); stray NUL bytes later in a text file
(a journal file copied while written) are dropped, the rest of the line still read.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from gputopo.errors import InputFileError

#: The longest line kept whole; longer ones are read in pieces of this size.
MAX_LINE_CHARS = 1 << 20
_SNIFF_BYTES = 8192


def _is_binary(head: bytes) -> bool:
    return b"\x00" in head


@contextmanager
def text_lines(path: str, what: str) -> Iterator[Iterator[str]]:
    """The lines of ``path`` (``-``: stdin) as text; InputFileError when it is not readable text.
    ``what`` names the expected content in the refusal ("a kernel log")."""
    try:
        raw: IO[bytes] = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115 (closed below)
    except OSError as e:
        raise InputFileError(path, f"cannot read: {e.strerror or e}") from None
    buffered = raw if isinstance(raw, io.BufferedReader) else io.BufferedReader(raw)  # type: ignore[arg-type,type-var]
    try:
        head = buffered.peek(_SNIFF_BYTES)[:_SNIFF_BYTES]
        if _is_binary(head):
            raise InputFileError(path, f"binary data (NUL bytes), not text: expected {what}")
        text = io.TextIOWrapper(buffered, encoding="utf-8", errors="replace", newline=None)

        def lines() -> Iterator[str]:
            while True:
                try:
                    line = text.readline(MAX_LINE_CHARS)
                except OSError as e:
                    raise InputFileError(path, f"read failed: {e.strerror or e}") from None
                if not line:
                    return
                yield line.replace("\x00", "") if "\x00" in line else line

        yield lines()
    finally:
        if path != "-":
            raw.close()


def display_name(path: str) -> str:
    return "<stdin>" if path == "-" else str(Path(path))
