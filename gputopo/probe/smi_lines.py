"""Lines and tokens of nvidia-smi text: decoding, cleaning, splitting, and the error helpers.

Why a module of its own: every part of the nvidia-smi reader (the grid, the `topo -m` and `-p2p`
matrices, the section finder) works on these cleaned lines and reports problems the same way.
What the text looks like in the wild is described in :mod:`gputopo.probe.smi_parser`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional

from gputopo.errors import InputFileError
from gputopo.model import LinkClass, P2P_STATUS_NAMES

#: The statuses `nvidia-smi topo -p2p` prints.
P2P_STATUSES = tuple(P2P_STATUS_NAMES.values())
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_GPU_LABEL_RE = re.compile(r"^GPU(\d+)$")
_WORDS_RE = re.compile(r"\S+(?: \S+)*")  # words joined by single spaces; 2+ spaces split
_TOPO = "`nvidia-smi topo -m`"
_P2P = "`nvidia-smi topo -p2p`"


@dataclass(frozen=True)
class _Line:
    no: int  # 1-based line number in the input
    text: str  # no CR, no ANSI escapes, NBSP as space


@dataclass(frozen=True)
class _Tok:
    text: str
    col: int  # start column once tabs are expanded to 8-column stops


def decode_smi_bytes(data: bytes) -> str:
    """Text of a saved nvidia-smi output, whatever wrote it.

    PowerShell's ``>`` writes UTF-16 with a byte-order mark; most else writes UTF-8 (with or
    without a BOM). An undecodable byte becomes the text ``\\xff`` rather than an exception, so
    the parser can point at the line that holds it and a message shows the byte, never the byte
    itself (which would garble a terminal) nor a replacement character that hides its value.
    """
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", errors="backslashreplace")
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if len(data) >= 4 and data[1:2] == b"\x00" and data[3:4] == b"\x00":
        return data.decode("utf-16-le", errors="backslashreplace")  # UTF-16 without its BOM
    return data.decode("utf-8", errors="backslashreplace")


def _split_lines(text: str) -> List[_Line]:
    if text.startswith("\ufeff"):
        text = text[1:]
    parts = text.split("\r") if ("\r" in text and "\n" not in text) else text.split("\n")
    out = []
    for no, raw in enumerate(parts, 1):
        s = _ANSI_RE.sub("", raw.replace("\r", "")).replace("\xa0", " ").replace("\u200b", "")
        out.append(_Line(no, s))
    return out


def _tokens(s: str) -> List[_Tok]:
    """Whitespace-separated tokens with their start columns (tabs expanded to 8)."""
    toks: List[_Tok] = []
    col, start = 0, 0
    cur: List[str] = []
    for ch in s:
        if ch.isspace():
            if cur:
                toks.append(_Tok("".join(cur), start))
                cur = []
            col = (col // 8 + 1) * 8 if ch == "\t" else col + 1
        else:
            if not cur:
                start = col
            cur.append(ch)
            col += 1
    if cur:
        toks.append(_Tok("".join(cur), start))
    return toks


def _pieces(s: str) -> List[_Tok]:
    """Cells separated by a tab or by 2+ spaces (header names hold single spaces)."""
    out: List[_Tok] = []
    col = 0
    parts = s.split("\t")
    for k, part in enumerate(parts):
        for m in _WORDS_RE.finditer(part):
            out.append(_Tok(m.group(0), col + m.start()))
        col += len(part)
        if k < len(parts) - 1:
            col = (col // 8 + 1) * 8
    return out


def _is_blank(line: _Line) -> bool:
    return not line.text.strip()


def _is_skippable(line: _Line) -> bool:
    """Lines people paste around the output: the command itself, markdown fences."""
    t = line.text.strip()
    return t.startswith("```") or t.startswith("~~~") or "nvidia-smi" in t


def _is_cell_value(t: str) -> bool:
    u = t.upper()
    if u == "X" or u in P2P_STATUSES:
        return True
    try:
        LinkClass.parse(u)
        return True
    except ValueError:
        return False


def _is_header(line: _Line) -> bool:
    """A line of column names starting with a GPU label. A row has a cell value second, and
    a GPU row always holds its X (even a row with a bad cell second)."""
    toks = _tokens(line.text)
    if not toks or not _GPU_LABEL_RE.match(toks[0].text):
        return False
    if any(t.text.upper() == "X" for t in toks[1:]):
        return False
    return len(toks) == 1 or not _is_cell_value(toks[1].text)


def _is_legend_like(line: _Line) -> bool:
    return "=" in line.text or line.text.strip().endswith(":")


def _gpu_index(label: str) -> Optional[int]:
    m = _GPU_LABEL_RE.match(label)
    return int(m.group(1)) if m else None


def _err(source: str, message: str, line: Optional[int] = None) -> InputFileError:
    """The error for ``source``; a control character the text held is shown escaped, not sent
    to the terminal."""
    return InputFileError(source, _printable(message), line=line)


def _printable(s: str) -> str:
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)


def _q(s: str) -> str:
    """``s`` quoted for a message: unprintable characters escaped, backslashes kept single (so an
    undecodable byte, decoded as the text ``\\xff``, reads as such)."""
    return "'" + _printable(s) + "'"


def _show(s: str, limit: int = 60) -> str:
    s = s.strip()
    return _q(s if len(s) <= limit else s[: limit - 3] + "...")
