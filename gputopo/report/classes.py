"""The class table: per link class (NV#, PIX, PXB, PHB, NODE, SYS) its pairs, median GB/s and
efficiency, wrong elements, findings, and a verdict rolled up from its pairs' findings:
``broken`` (any error finding on the class), ``degraded`` (any warning), ``ok``, or
``not-measured``.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from gputopo.model import Finding, LinkClass

from .headline import headline_order
from .pairs import PairRow, names_each_gpu, verdict_of


#: The class row of pairs whose link class is not known (e.g. imported nccl-tests without a topology).
UNKNOWN_CLASS = "unknown"


@dataclass
class ClassRow:
    link_class: str
    pairs: int
    pairs_measured: int
    series: Optional[str]
    median_gbps: Optional[float]
    min_gbps: Optional[float]
    max_gbps: Optional[float]
    expected_gbps: Optional[float]
    efficiency: Optional[float]
    wrong: Optional[int]  # None: no transfer of the class completed, nothing was compared
    findings: List[Finding] = field(default_factory=list)
    worst_pair: Optional[List[int]] = None

    @property
    def verdict(self) -> str:
        return verdict_of(self.findings, self.pairs_measured > 0)

    def to_json(self) -> dict:
        counts: Dict[str, int] = defaultdict(int)
        for f in self.findings:
            counts[f.severity] += 1
        return {
            "link_class": self.link_class, "pairs": self.pairs, "pairs_measured": self.pairs_measured,
            "series": self.series, "median_gbps": _r(self.median_gbps), "min_gbps": _r(self.min_gbps),
            "max_gbps": _r(self.max_gbps), "expected_gbps": _r(self.expected_gbps),
            "efficiency": _r(self.efficiency), "worst_pair": self.worst_pair, "wrong": self.wrong,
            "findings": dict(counts), "finding_kinds": sorted({f.kind for f in self.findings}),
            "verdict": self.verdict,
        }


def _r(x, nd=4):
    return None if x is None else round(x, nd)


def _class_sort_key(name: str):
    try:
        return (0, LinkClass.parse(name).rank)
    except ValueError:
        return (1, (name,))


def _class_findings(lc: str, members: List[PairRow], findings: List[Finding]) -> List[Finding]:
    """Warnings and errors of the class, and a GPU's own link findings that flag its pairs in it
    (a GPU whose NVLinks are down: its pairs that fell back to PCIe are not "ok"; a set of GPUs
    slower than the others of their model: their pairs)."""
    own = [f for f in findings if (f.link_class or UNKNOWN_CLASS) == lc and f.severity in ("error", "warning")
           and (lc != UNKNOWN_CLASS or (f.gpus and len(f.gpus) == 2))]
    seen = {id(f) for f in own}
    for p in members:
        for f in p.findings:
            if id(f) not in seen and f.link_class is None and f.gpus \
                    and (len(f.gpus) == 1 or names_each_gpu(f.kind)) and f.severity in ("error", "warning"):
                seen.add(id(f))
                own.append(f)
    return own


def class_rows(pairs: List[PairRow], findings: List[Finding]) -> List[ClassRow]:
    """One row per class present among the 2-GPU pairs, best class first."""
    by_class: Dict[str, List[PairRow]] = defaultdict(list)
    for p in pairs:
        if len(p.gpus) == 2:
            by_class[p.link_class or UNKNOWN_CLASS].append(p)
    rows = []
    for lc, members in by_class.items():
        # The class's series: the best-ranked one any of its pairs measured.
        present = {s for p in members for s in p.series}
        series = next(iter(headline_order(present)), None)
        with_series = [p for p in members if series and series in p.series]
        series_key = series or ""  # (with_series is empty when there is no series)
        gbps = [p.series[series_key]["gbps"] for p in with_series]
        effs = [p.series[series_key]["efficiency"] for p in with_series
                if p.series[series_key]["efficiency"] is not None]
        exps = [p.expected.gbps for p in members if p.expected.gbps is not None]
        worst = min(with_series, key=lambda p: p.series[series_key]["gbps"]) if with_series else None
        rows.append(ClassRow(
            link_class=lc, pairs=len(members), pairs_measured=sum(1 for p in members if p.measured),
            series=series, median_gbps=statistics.median(gbps) if gbps else None,
            min_gbps=min(gbps) if gbps else None, max_gbps=max(gbps) if gbps else None,
            expected_gbps=statistics.median(exps) if exps else None,
            efficiency=statistics.median(effs) if effs else None,
            wrong=sum(p.wrong for p in members) if any(p.checked for p in members) else None,
            findings=_class_findings(lc, members, findings),
            worst_pair=list(worst.gpus) if worst else None))
    rows.sort(key=lambda r: _class_sort_key(r.link_class))
    return rows


def overall_verdict(rows: List[ClassRow], findings: List[Finding], pairs: Sequence[PairRow] = ()) -> str:
    """The machine's verdict: worst class (or pair/group) verdict, or worse if a machine-wide
    finding says so."""
    order = ["not-measured", "ok", "degraded", "broken"]
    worst = "not-measured"
    for v in [r.verdict for r in rows] + [p.verdict for p in pairs]:
        if order.index(v) > order.index(worst):
            worst = v
    sev = {f.severity for f in findings}
    if "error" in sev:
        return "broken"
    if "warning" in sev and worst in ("ok", "not-measured"):
        return "degraded"
    return worst
