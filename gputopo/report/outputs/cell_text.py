"""The text of one table cell, the same in every output: GB/s and percentages ('n/a' where
nothing was measured), GPU sets ('0,4', '0-3,6'), counts ('-' where nothing was counted), and
the places of a group of alike findings ('16 pairs: 0,4 0,5 ...').
"""

from __future__ import annotations

from typing import Dict, List, Optional

from gputopo.model import Finding
from gputopo.model.finding import gpu_ranges
from gputopo.model.finding_kinds import is_grouped


def gbps(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:.3g}"


def pct(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def gpus_text(g) -> str:
    """'0,4' for a pair, '0-3,6' for a larger set, '-' for none."""
    if not g:
        return "-"
    return gpu_ranges(g) if len(g) > 2 else ",".join(map(str, g))


def finding_place(f: Finding) -> str:
    """Where a finding is, as a table names it: its GPUs (``gpus_text``), or the ``place`` its
    evidence gives where the GPU's number means nothing on the machine (a GPU a kernel log names
    by bus id only: ``0000:a1:00.0``)."""
    place = f.evidence.get("place") if isinstance(f.evidence, dict) else None
    return str(place) if place else gpus_text(f.gpus)


def place_words(f: Finding) -> str:
    """A finding's place in words: ``GPUs 0,4``, ``GPU 2``, ``GPU at 0000:a1:00.0`` (finding_place)."""
    place = f.evidence.get("place") if isinstance(f.evidence, dict) else None
    if place:
        return f"GPU at {place}"
    return f"GPU{'s' if f.gpus and len(f.gpus) > 1 else ''} {gpus_text(f.gpus)}"


def count_cell(n: Optional[int]) -> str:
    """A count where nothing was counted is '-', never 0."""
    return "-" if n is None else str(n)


def group_findings(findings) -> List[List[Finding]]:
    """Findings of the same severity, kind and link class, in worst-first order of their first; a
    finding of a kind the table does not group (finding_kinds.is_grouped) is a group of its own."""
    groups: Dict[tuple, List] = {}
    for n, f in enumerate(findings):
        key = (f.severity, f.kind, f.link_class) + (() if is_grouped(f.kind) else (n,))
        groups.setdefault(key, []).append(f)
    return list(groups.values())


def message_head(message: str) -> str:
    """A message up to its first ': ' outside a `quoted` span (a quoted line keeps its own colons)."""
    inside = False
    for i, ch in enumerate(message):
        if ch == "`":
            inside = not inside
        elif not inside and message.startswith(": ", i):
            return message[:i]
    return message


def group_where(group: List[Finding]) -> str:
    """'0,4' for one finding; '16 pairs: 0,4 0,5 ...' for alike findings in several places."""
    places = list(dict.fromkeys(finding_place(f) for f in group))  # one pair may have several
    if len(places) == 1:
        return places[0]
    what = "pairs" if all(f.gpus and len(f.gpus) == 2 for f in group) else "places"
    return f"{len(places)} {what}: " + " ".join(places)
