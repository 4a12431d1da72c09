"""Causes and remedies, explained once per group: alike findings (same kind, severity and class,
and the same cause and remedies but for the PCI bridges above each pair) become one Explanation
whose bridge lists are merged and whose places are listed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from gputopo.model import Finding

from gputopo.report.outputs.bridge_names import BRIDGES, bridge_key
from gputopo.report.outputs.cell_text import group_where, place_words


def _merge_bridges(texts: List[Optional[str]]) -> Optional[str]:
    """The first text with every 'bridge(s) A, B' list replaced by the union of all the texts'
    lists: alike findings of a class each name the bridges above their own GPUs; explained
    once, they name them all."""
    if not texts or texts[0] is None:
        return None
    union = sorted({b for t in texts if t for m in BRIDGES.finditer(t) for b in m.group(1).split(", ")})
    return BRIDGES.sub(lambda m: "bridge(s) " + ", ".join(union), texts[0]) if union else texts[0]


@dataclass
class Explanation:
    """Alike findings (same kind, severity and class, and the same cause and remedies but for the
    bridges above each pair): explained once, their places listed."""

    kind: str
    severity: str
    cause: Optional[str]
    remedies: List[str]
    findings: List[Finding] = field(default_factory=list)

    @property
    def link_class(self) -> Optional[str]:
        return self.findings[0].link_class if self.findings else None

    @property
    def where(self) -> str:
        lc, fs = self.link_class, self.findings
        suffix = f" ({lc})" if lc else ""
        if not any(f.gpus for f in fs):
            return "the machine"
        g = fs[0].gpus
        if len(fs) == 1 and g:  # (it has GPUs: some finding has)
            return place_words(fs[0]) + suffix
        return group_where(fs) + suffix


def explanations(findings: List[Finding]) -> List[Explanation]:
    """Warnings and errors grouped by kind, severity, class, cause and remedies (bridge lists
    aside, see _merge_bridges), worst first."""
    groups: Dict[tuple, List[Finding]] = {}
    for f in findings:
        if f.severity == "info":
            continue
        key = (f.kind, f.severity, f.link_class, bridge_key(f.cause), tuple(bridge_key(r) for r in f.remedies))
        groups.setdefault(key, []).append(f)
    out = []
    for (kind, severity, *_), fs in groups.items():
        merged = [_merge_bridges([f.remedies[k] for f in fs]) for k in range(len(fs[0].remedies))]
        remedies = [r for r in merged if r is not None]  # (all are: remedies are texts)
        out.append(Explanation(kind, severity, _merge_bridges([f.cause for f in fs]), remedies, fs))
    return out
