"""Reading a tool's saved text output the way people hand it over: a file or stdin (``-``), any
size, UTF-8 or the UTF-16 that a Windows shell redirect writes, pasted into an issue as a quote
(``> `` on every line), or run through a launcher that prefixes every line.

Lines are streamed one at a time, so memory stays bounded whatever the file's size; reading
stops after ``MAX_INPUT_BYTES`` and a line longer than ``MAX_LINE_CHARS`` is cut, and both are
said (the caller turns them into an ``incomplete-data`` problem, never a silent partial read).
What cannot be a text output at all (a missing, empty or binary file) is refused with one line
naming the file (exit 2).
"""

from __future__ import annotations

import codecs
import io
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from gputopo.errors import InputFileError

from gputopo.line_prefixes import strip_launcher_prefix, strip_quote_marker

#: Reading stops after this many bytes (a real nvbandwidth or p2pBandwidthLatencyTest output is
#: a few hundred kB at most); the rest of the file is said to be unread.
MAX_INPUT_BYTES = 256 << 20
#: A line longer than this is cut (no tool of these writes one); the cut is said.
MAX_LINE_CHARS = 64 << 10
#: How much of the start is sniffed for a byte-order mark and for NUL bytes (binary files).
SNIFF_BYTES = 8192


@dataclass
class TextSource:
    """What was read and what could not be: ``unread`` holds the notes (bytes left unread,
    cut lines) the importer reports as incomplete data."""

    name: str
    encoding: str = "utf-8"
    bytes_read: int = 0
    unread: list[str] = field(default_factory=list)
    quoted: bool = False
    line_numbered: bool = False

    def tell(self, out) -> None:
        """Add what reading did to the text to a parsed output's ``problems`` (what was not
        read) and ``notes`` (quote marks or editor line numbers removed)."""
        out.problems += self.unread
        if self.quoted:
            out.notes.append("quoted paste: the '>' marks were removed")
        if self.line_numbered:
            out.notes.append("pasted with an editor's line numbers: they were removed")


def _open_binary(path: str) -> tuple[BinaryIO, str]:
    """``path`` opened (``-``: stdin). A pipe (a named FIFO, a shell's ``<(command)``) is read
    once its first byte comes within inputs.input_wait_s() seconds (GPUTOPO_INPUT_WAIT), and to its
    end while no wait for a next byte lasts longer."""
    if path == "-":
        return sys.stdin.buffer, "<stdin>"
    from gputopo.inputs import open_user_stream, user_file_problem

    p = Path(path)
    problem = user_file_problem(p, fifo_ok=True)  # a folder, device or loop: refused before open()
    if problem:
        raise InputFileError(path, problem)
    return open_user_stream(p, "input"), str(path)


def _sniff(head: bytes, name: str) -> str:
    """The encoding of the text, or InputFileError for an empty or binary file."""
    if not head.strip():
        raise InputFileError(name, "is empty: nothing to import")
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    if head.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    if b"\x00" in head:
        raise InputFileError(name, "is a binary file, not a saved text output")
    return "utf-8"


def open_lines(path: str, source: TextSource | None = None) -> Iterator[tuple[int, str]]:
    """(line number, line as the tool printed it) for every line of ``path`` (``-``: stdin).

    Launcher/logging prefixes and ANSI codes are removed (line_prefixes.py); in a quoted paste the quote marks are removed too.
    """
    raw, name = _open_binary(path)
    src = source if source is not None else TextSource(name)
    src.name = name
    try:
        head = raw.read(SNIFF_BYTES)
        src.encoding = _sniff(head, name)
        stream = io.BufferedReader(_Prefixed(head, raw))
        text = io.TextIOWrapper(stream, encoding=src.encoding, errors="replace", newline=None)
        quoted = 0
        for lineno, line in enumerate(_without_line_numbers(_bounded(text, src), src), start=1):
            line = strip_launcher_prefix(line)
            if line.lstrip().startswith(">"):  # none of these tools starts a line with '>'
                quoted += 1
                line = strip_launcher_prefix(strip_quote_marker(line))
            yield lineno, line
        src.quoted = quoted >= 3
    finally:
        if raw is not sys.stdin.buffer:
            raw.close()


_EDITOR_LINENO = re.compile(r"^\s*(\d+)(?: |\n|$)")


def _without_line_numbers(lines: Iterator[str], src: TextSource) -> Iterator[str]:
    """A paste copied from an editor showing line numbers (``  1 P2P=...``, ``  2    GPU ...``):
    when the first two lines start with 1 and 2, each line's own number is removed while the
    numbering goes on. Matrix rows start with a number too, so nothing less is taken as numbering."""
    first = next(lines, None)
    if first is None:
        return
    second = next(lines, None)
    m1, m2 = _EDITOR_LINENO.match(first), _EDITOR_LINENO.match(second or "")
    if not (m1 and m2 and m1.group(1) == "1" and m2.group(1) == "2"):
        yield first
        if second is not None:
            yield second
        yield from lines
        return
    src.line_numbered = True
    expected = 1
    for line in _chain_lines([first, second], lines):
        m = _EDITOR_LINENO.match(line)
        if m and int(m.group(1)) == expected:
            line = line[m.end():] if m.group(0).endswith(" ") else line[m.end(1):]
            expected += 1
        yield line


def _chain_lines(head, rest):
    yield from head
    yield from rest


def _bounded(text: io.TextIOWrapper, src: TextSource, capped: bool = True) -> Iterator[str]:
    """Lines of at most MAX_LINE_CHARS, until about MAX_INPUT_BYTES have been read (``capped``)
    or to the end."""
    read = 0
    while True:
        line = text.readline(MAX_LINE_CHARS)
        if not line:
            break
        read += len(line.encode("utf-8", "replace"))
        if len(line) >= MAX_LINE_CHARS and not line.endswith("\n"):
            src.unread.append(f"a line longer than {MAX_LINE_CHARS} characters was cut")
            while True:  # skip the rest of that line without holding it
                rest = text.readline(MAX_LINE_CHARS)
                read += len(rest)
                if not rest or rest.endswith("\n"):
                    break
        yield line
        if capped and read > MAX_INPUT_BYTES:
            if text.read(1):
                src.unread.append(f"only the first {MAX_INPUT_BYTES >> 20} MiB were read; the rest of the "
                                  "file was not (no output of this tool is that large: is it the right file?)")
            break
    src.bytes_read = read


@contextmanager
def text_lines(path: str, what: str) -> Iterator[Iterator[str]]:
    """The lines of ``path`` (``-``: stdin) exactly as written, streamed to the end whatever the
    size (bounded memory: a line is cut at MAX_LINE_CHARS), for readers that strip prefixes
    themselves and must not lose a log's tail (kernel logs, NCCL logs). A missing or binary
    file is refused (InputFileError, exit 2) naming ``what`` was expected; stray NUL
    bytes inside a text file (a journal copied while written) are dropped from their line. An
    empty file gives no lines (the caller says what that means for its format)."""
    raw, name = _open_binary(path)
    try:
        head = raw.read(SNIFF_BYTES)
        try:  # an empty file is the caller's to judge (it may say more than "empty")
            encoding = _sniff(head, name) if head.strip() else "utf-8"
        except InputFileError as e:
            raise InputFileError(path, f"{str(e).split(': ', 1)[-1]}: expected {what}") from None
        src = TextSource(name, encoding)
        stream = io.BufferedReader(_Prefixed(head, raw))
        text = io.TextIOWrapper(stream, encoding=encoding, errors="replace", newline=None)
        yield (line.replace("\x00", "") if "\x00" in line else line for line in _bounded(text, src, capped=False))
    finally:
        if raw is not sys.stdin.buffer:
            raw.close()


def display_name(path: str) -> str:
    return "<stdin>" if path == "-" else str(Path(path))


class _Prefixed(io.RawIOBase):
    """A raw stream that gives back the sniffed head before the rest of the underlying one."""

    def __init__(self, head: bytes, rest: BinaryIO):
        self._head, self._rest = head, rest

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self._head:
            n = min(len(b), len(self._head))
            b[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._rest.read(len(b))
        b[:len(data)] = data
        return len(data)


class CappedList(list):
    """A list of said lines (problems, notes) that keeps the first ``cap`` and counts the rest in
    one last entry, so a huge file of unreadable lines cannot grow memory without bound."""

    def __init__(self, cap: int = 200):
        super().__init__()
        self.cap, self.more = cap, 0

    def append(self, item) -> None:
        if len(self) < self.cap:
            super().append(item)
            return
        self.more += 1
        text = f"... and {self.more} more like these (not listed)"
        if self.more == 1:
            super().append(text)
        else:
            self[-1] = text

    def extend(self, items) -> None:
        for x in items:
            self.append(x)

    def __iadd__(self, items):  # type: ignore[misc]
        self.extend(items)
        return self


#: What people write on a line of its own where they left lines out of a pasted output.
ELISION_MARKS = ("...", "\u2026", "[...]", "[\u2026]")


def elision_mark(line: str) -> str | None:
    """The mark when ``line`` is only an elision mark ('...', '…', '[...]', '[…]'), else None."""
    s = line.strip()
    return s if s in ELISION_MARKS else None


def elision_problem(line: str, lineno: int, left_out: str = "") -> str | None:
    """The ``incomplete-data`` problem for a line that is only an elision mark ('...', '…', '[...]'):
    ``line N: '...': the output was cut here when it was posted`` (+ ``; `` ``left_out``, what the
    importer cannot know because of it); None for any other line."""
    s = elision_mark(line)
    if s is None:
        return None
    return f"line {lineno}: '{s}': the output was cut here when it was posted" + (f"; {left_out}" if left_out else "")
