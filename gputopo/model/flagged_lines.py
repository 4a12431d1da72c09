"""Lines a tool itself marked as a warning or an error, as an importer keeps them.

Every tool gputopo imports marks its own trouble in its own words: NCCL prints ``NCCL WARN``,
nccl-tests ``Test CUDA failure`` / ``Test NCCL failure`` / ``Test failure``, perftest ``Couldn't
...``, ``Failed to ...`` and ``Completion with error``, the CUDA samples ``Cuda failure`` / ``CUDA
error at``. An importer keeps each such line it sees as one record (:func:`flagged_line`), in the
document it writes (``flagged_lines``); the report's ``tool-flagged`` rule
(gputopo/report/flagged_findings.py) says every one that no specific rule claims. A finding claims
the lines it explains by quoting them in its evidence under :data:`TOOL_LINES`.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Iterable, List, Optional

#: The evidence key under which a finding quotes the tool's lines it explains (claims).
TOOL_LINES = "tool_lines"


def normalized(text: str) -> str:
    """A flagged line's text as it is compared: blanks collapsed, ends stripped."""
    return re.sub(r"\s+", " ", str(text)).strip()


def flagged_line(text: str, *, tool: str, where: Optional[str] = None, host: Optional[str] = None,
                 ranks: Optional[Iterable[int]] = None, gpu: Optional[int] = None, pid: Optional[int] = None,
                 fails_run: bool = False) -> Dict[str, Any]:
    """One line a tool marked: its ``text`` (without the launcher's or logger's prefix), the tool
    that printed it, where it is (``file:line`` or ``line N``), the host, ranks, GPU (the CUDA
    device the line names) and pid where the line or its process tells them, and ``fails_run``:
    whether the tool says with it that its run failed."""
    return {"text": normalized(text), "tool": tool, "where": where, "host": host,
            "ranks": sorted(set(ranks)) if ranks else [], "gpu": gpu, "pid": pid, "fails_run": bool(fails_run)}


def quoted(lines: Iterable[Any]) -> List[str]:
    """The texts a finding quotes under TOOL_LINES, normalized, without repeats."""
    out: List[str] = []
    for t in lines:
        n = normalized(t)
        if n and n not in out:
            out.append(n)
    return out


def line_where(source: Optional[str], lineno: int) -> str:
    """Where a flagged line is: ``NAME:N`` (the file's base name) where the input is a named file,
    ``line N`` otherwise (text given in memory, stdin)."""
    name = str(source or "").replace("\\", "/").rsplit("/", 1)[-1]
    return f"{name}:{lineno}" if name and name not in ("-", "<text>", "<stdin>") else f"line {lineno}"


def nccl_warn_text(source: Optional[str], message: Optional[str]) -> str:
    """An NCCL WARN line as quoted: its source file and line, ``NCCL WARN``, its message (the
    ``host:pid:tid [cudaDev]`` prefix is said apart, as its host, rank and GPU)."""
    return normalized(f"{source or ''} NCCL WARN {message or ''}")
