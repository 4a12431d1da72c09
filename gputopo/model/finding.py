"""Findings: what gputopo concludes, in a stable vocabulary users script against.

A finding is ``{kind, severity, gpus, link_class, message, evidence}`` plus the likely cause and
remedies. Kinds may be added when a new check needs one; never renamed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from .finding_kinds import SEVERITIES, is_kind, kind_index, kind_names

#: The vocabulary, in its order (findings of one severity are listed in it): the names of the
#: one table of kinds, gputopo/model/finding_kinds.py, where each kind's properties are.
KINDS = kind_names()


@dataclass
class Finding:
    kind: str
    severity: str
    message: str
    gpus: Optional[List[int]] = None
    link_class: Optional[str] = None
    evidence: Dict[str, Any] = field(default_factory=dict)
    cause: Optional[str] = None
    remedies: List[str] = field(default_factory=list)

    def __post_init__(self):
        if not is_kind(self.kind):
            raise ValueError(f"unknown finding kind {self.kind!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")
        if self.gpus is not None:
            self.gpus = list(self.gpus)

    @property
    def sort_key(self):
        """Worst first, then by GPUs."""
        return (SEVERITIES.index(self.severity), kind_index(self.kind), self.gpus or [])

    def to_json(self) -> Dict[str, Any]:
        return {
            "kind": self.kind, "severity": self.severity, "gpus": self.gpus,
            "link_class": self.link_class, "message": self.message, "evidence": self.evidence,
            "cause": self.cause, "remedies": list(self.remedies),
        }

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Finding":
        return cls(**d)


def gpu_ranges(gpus) -> str:
    """[0,1,2,3,5] -> '0-3,5': how GPU sets are written in messages."""
    xs = sorted(set(gpus))
    parts, start = [], None
    for k, x in enumerate(xs):
        if start is None:
            start = x
        if k == len(xs) - 1 or xs[k + 1] != x + 1:
            parts.append(str(start) if start == x else f"{start}-{x}")
            start = None
    return ",".join(parts)


def where_text(gpus, link_class: Optional[str] = None) -> str:
    """How a finding's message names its place: ``GPUs 0,4 (SYS)``, ``GPU 2``."""
    g = ",".join(map(str, gpus))
    w = f"GPUs {g}" if len(gpus) > 1 else f"GPU {g}"
    return f"{w} ({link_class})" if link_class else w


def worst_first(findings: List[Finding]) -> List[Finding]:
    return sorted(findings, key=lambda f: f.sort_key)
