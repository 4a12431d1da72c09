"""The per-pair table: for each GPU pair, its class, theoretical rate, measured figures per
series, wrong elements, numerics verdicts, findings and a verdict.

Verdicts: ``broken`` (an error finding on the pair), ``degraded`` (a warning), ``ok`` (measured,
nothing found), ``not-measured`` (nothing ran on it).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from gputopo.model import Finding, Measurement, Topology

from .expected import ExpectedRate, pair_rate
from .headline import HEADLINE_ORDER, Headline, link_class_of

VERDICTS = ("ok", "degraded", "broken", "not-measured")


def verdict_of(findings: List[Finding], measured: bool) -> str:
    sev = {f.severity for f in findings}
    if "error" in sev:
        return "broken"
    if "warning" in sev:
        return "degraded"
    return "ok" if measured else "not-measured"


@dataclass
class PairRow:
    gpus: Tuple[int, ...]
    link_class: Optional[str]
    expected: ExpectedRate
    series: Dict[str, dict] = field(default_factory=dict)
    measurements: int = 0
    wrong: int = 0
    errors: int = 0
    numerics: Dict[str, str] = field(default_factory=dict)
    findings: List[Finding] = field(default_factory=list)

    @property
    def headline_series(self) -> Optional[str]:
        for s in HEADLINE_ORDER:
            if s in self.series:
                return s
        return next(iter(sorted(self.series)), None)

    @property
    def headline_gbps(self) -> Optional[float]:
        s = self.headline_series
        return self.series[s]["gbps"] if s else None

    @property
    def efficiency(self) -> Optional[float]:
        s = self.headline_series
        return self.series[s]["efficiency"] if s else None

    @property
    def measured(self) -> bool:
        return bool(self.measurements or self.numerics)

    @property
    def verdict(self) -> str:
        return verdict_of(self.findings, self.measured)

    def to_json(self) -> dict:
        return {
            "gpus": list(self.gpus), "link_class": self.link_class,
            "expected_gbps": self.expected.gbps, "expected_basis": self.expected.basis,
            "headline_series": self.headline_series,
            "headline_gbps": _r(self.headline_gbps), "efficiency": _r(self.efficiency),
            "series": self.series, "measurements": self.measurements, "wrong": self.wrong,
            "failed_measurements": self.errors, "numerics": self.numerics,
            "findings": sorted({f.kind for f in self.findings}), "verdict": self.verdict,
        }


def _r(x, nd=4):
    return None if x is None else round(x, nd)


def pair_rows(topo: Optional[Topology], measurements: List[Measurement], heads: List[Headline],
              numerics: Dict[tuple, Dict[str, str]], findings: List[Finding]) -> List[PairRow]:
    """Rows for every pair of the topology plus every measured pair/group, sorted by GPUs."""
    rows: Dict[tuple, PairRow] = {}

    def row(gpus: tuple, lc: Optional[str]) -> PairRow:
        r = rows.get(gpus)
        if r is None:
            exp = pair_rate(topo, *gpus) if len(gpus) == 2 else ExpectedRate(None, "group")
            r = rows[gpus] = PairRow(gpus=gpus, link_class=lc, expected=exp)
        elif r.link_class is None and lc:
            r.link_class = lc
        return r

    if topo is not None:
        for p in topo.pairs:
            row(tuple(p.gpus), str(p.link_class))
    for m in measurements:
        if len(m.gpus) < 2:
            continue
        r = row(tuple(sorted(m.gpus)), link_class_of(topo, m))
        r.measurements += 1
        r.wrong += int(m.wrong or 0)
        r.errors += int(m.error is not None)
    by_series: Dict[tuple, List[Headline]] = defaultdict(list)
    for h in heads:
        if len(h.gpus) >= 2:
            by_series[(h.pair_key, h.series)].append(h)
    for (pair, series), hs in by_series.items():
        worst = min(hs, key=lambda h: h.gbps)
        row(pair, worst.link_class).series[series] = {
            "gbps": round(worst.gbps, 4), "metric": worst.metric, "size_bytes": worst.size_bytes,
            "efficiency": _r(worst.efficiency), "expected_gbps": worst.expected.gbps,
            "directions": {(h.direction or "-"): round(h.gbps, 4) for h in hs},
            "direction_efficiency": {(h.direction or "-"): _r(h.efficiency) for h in hs},
            "timing": worst.timing, "noisy": any(h.noisy for h in hs),
        }
    for pair, ways in numerics.items():
        row(pair, None).numerics.update(ways)
    for f in findings:
        if f.gpus and len(f.gpus) >= 2 and tuple(sorted(f.gpus)) in rows:
            rows[tuple(sorted(f.gpus))].findings.append(f)
    return [rows[k] for k in sorted(rows, key=lambda g: (len(g), g))]


def class_median(values: List[float]) -> Optional[float]:
    return statistics.median(values) if values else None
