"""The one bandwidth figure each measured series stands for, and its efficiency.

A series is one test on one GPU pair (or group) in one direction, over a sweep of sizes. Its
headline is the largest size that completed without error (small sizes measure latency, not
the link). The figure is busbw (algbw x the test's busbw_factor): algbw itself for plain
copies, and for collectives and DataParallel's scatter/gather (where only part of the buffer
crosses the link) the per-link figure nccl-tests users compare. Efficiency is that figure over
the link's theoretical rate (expected.py). Efficiency is computed only for a measurement whose
figures are of GPUs (its ``figures_of``, real or simulated): CPU processes standing in for the
GPUs (the ``cpu`` fabric) measure no GPU link (it would compare a memcpy with NVLink).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple

from gputopo.model import Measurement, Topology
from gputopo.model.measurement import figures_are_of_gpus

from gputopo.model.topology import class_of

from .expected import ExpectedRate, gpu_pcie_rate, group_rate, pair_rate
from .imported_tests import STAGED_TESTS, is_bidirectional_total, is_host_copy, is_latency

#: Sizes below this measure latency more than bandwidth; no headline is taken from them.
BANDWIDTH_MIN_SIZE_BYTES = 1 << 20
#: Tests whose bytes_per_iter counts both directions at once (compared with 2 x the link rate).
BIDIRECTIONAL_TESTS = ("p2p.copy_bidir",)
#: Tests that are not bandwidth series at all.
NOT_BANDWIDTH = ("p2p.latency",)
#: Preferred headline series of a pair, best first (the purest link measurement first).
HEADLINE_ORDER = ("p2p.copy", "p2p.copy_bidir", "collective.all_reduce", "collective.broadcast",
                  "collective.all_gather", "collective.reduce_scatter", "dp.broadcast_coalesced",
                  "dp.scatter", "dp.gather", "dp.reduce_add", "p2p.staged")


def headline_order(series) -> List[str]:
    """Series in the order a pair's headline is chosen: HEADLINE_ORDER first, then the others with
    the unidirectional ones before the bidirectional ones (nvbandwidth's headline is its
    unidirectional copy, not the sum of both directions), latency last, by name within each."""
    rest = sorted((s for s in series if s not in HEADLINE_ORDER),
                  key=lambda s: (is_latency(s), "bidirectional" in s or "_bidir" in s, s))
    return [s for s in HEADLINE_ORDER if s in series] + rest


def series_name(m: Measurement) -> str:
    """The test, with nccl-tests' in-place variant kept apart from out-of-place."""
    return m.test + (" (in-place)" if m.extra.get("in_place") else "")


def metric_of(m: Measurement) -> str:
    """Which figure a measurement's GB/s is: busbw where the test scales algbw, else algbw."""
    if is_latency(m.test) and m.bytes_per_iter == 0:
        return "latency"  # a time per copy, no bytes: never read as a bandwidth
    return "algbw" if m.busbw_factor == 1.0 else "busbw"


def measured_gbps(m: Measurement) -> Optional[float]:
    """algbw or busbw (GB/s) of a measurement; None when it has no usable timing."""
    if m.error is not None or not m.samples_s:
        return None
    v = m.busbw_gbps
    return v if isinstance(v, float) and math.isfinite(v) and v > 0 else None


def expected_for(topo: Optional[Topology], m: Measurement) -> ExpectedRate:
    """The theoretical GB/s a measurement's figure is compared with."""
    gpus = list(m.gpus)
    if m.test == "self.d2d":
        return ExpectedRate(None, "on-device copy: no link involved")
    if (m.test.startswith("self.") or is_host_copy(m.test)) and gpus:
        host = gpu_pcie_rate(topo, gpus[0])
        if is_host_copy(m.test) and "bidirectional" in m.test and host.gbps is not None:
            return ExpectedRate(None, "host copy measured while the opposite direction runs: " + host.basis)
        return host
    if len(gpus) < 2:
        return ExpectedRate(None, "single GPU")
    if m.test in STAGED_TESTS:
        # Through pinned host memory: each GPU's own PCIe link, the narrower one limits.
        rates = [gpu_pcie_rate(topo, g) for g in gpus[:2]]
        known = [r for r in rates if r.gbps is not None]
        if len(known) < 2:
            return ExpectedRate(None, "PCIe link of a GPU unknown")
        slow = min(known, key=lambda r: r.gbps or 0.0)  # (every known rate has gbps)
        if is_bidirectional_total(m.test):  # bidirectional: both directions' bytes
            return ExpectedRate(2 * (slow.gbps or 0.0), f"both directions staged through host memory: 2 x {slow.basis}")
        return ExpectedRate(slow.gbps, f"staged through host memory; narrower PCIe link: {slow.basis}")
    base = pair_rate(topo, gpus[0], gpus[1]) if len(gpus) == 2 else group_rate(topo, gpus)
    if (m.test in BIDIRECTIONAL_TESTS or is_bidirectional_total(m.test)) and base.gbps is not None:
        # Bidirectional copies count the bytes of both directions (bytes_per_iter).
        return ExpectedRate(base.gbps * 2, f"both directions: 2 x {base.basis}")
    return base


@dataclass
class Headline:
    """The headline figure of one series (test, gpus, direction)."""

    series: str
    test: str
    gpus: Tuple[int, ...]
    direction: Optional[str]
    link_class: Optional[str]
    size_bytes: int
    gbps: float
    metric: str
    expected: ExpectedRate
    efficiency: Optional[float]
    fabric: str
    timing: str
    noisy: bool
    #: What its measurement's figures are of (model/measurement.py FIGURES_OF; None: not said).
    figures_of: Optional[str] = None

    @property
    def of_gpus(self) -> bool:
        """Its figures are of GPUs (real or simulated): a GPU link's rate applies to them."""
        return figures_are_of_gpus(self.figures_of)

    @property
    def pair_key(self) -> Tuple[int, ...]:
        return tuple(sorted(self.gpus))

    def to_json(self) -> Dict:
        return {"series": self.series, "test": self.test, "gpus": list(self.gpus),
                "direction": self.direction, "link_class": self.link_class,
                "size_bytes": self.size_bytes, "gbps": round(self.gbps, 4), "metric": self.metric,
                "expected_gbps": self.expected.gbps, "expected_basis": self.expected.basis,
                "efficiency": None if self.efficiency is None else round(self.efficiency, 4),
                "fabric": self.fabric, "timing": self.timing, "noisy": self.noisy}


def link_class_of(topo: Optional[Topology], m: Measurement) -> Optional[str]:
    """The measurement's own class if it recorded one, else the topology's (worst of a group)."""
    if m.link_class:
        return m.link_class
    lc = class_of(topo, m.gpus)
    return str(lc) if lc is not None else None


def efficiency_of(topo: Optional[Topology], m: Measurement, gbps: Optional[float]):
    """(efficiency or None, ExpectedRate)."""
    exp = expected_for(topo, m)
    if gbps is None or exp.gbps is None or exp.gbps <= 0:
        return None, exp
    if not m.of_gpus:
        return None, ExpectedRate(exp.gbps, exp.basis + f"; not compared on the {m.fabric} fabric")
    return gbps / exp.gbps, exp


def headlines(measurements: Iterable[Measurement], topo: Optional[Topology]) -> List[Headline]:
    """One Headline per series: its largest error-free size of at least BANDWIDTH_MIN_SIZE_BYTES."""
    best: Dict[tuple, Measurement] = {}
    for m in measurements:
        if m.test in NOT_BANDWIDTH or is_latency(m.test) or m.size_bytes < BANDWIDTH_MIN_SIZE_BYTES:
            continue
        if measured_gbps(m) is None:
            continue
        key = (series_name(m), tuple(m.gpus), m.direction)
        cur = best.get(key)
        if cur is None or m.size_bytes > cur.size_bytes:
            best[key] = m
    out = []
    for (series, gpus, direction), m in best.items():
        gbps = measured_gbps(m)
        if gbps is None:  # (left out above)
            continue
        eff, exp = efficiency_of(topo, m, gbps)
        out.append(Headline(series=series, test=m.test, gpus=gpus, direction=direction,
                            link_class=link_class_of(topo, m), size_bytes=m.size_bytes, gbps=gbps,
                            metric=metric_of(m), expected=exp, efficiency=eff,
                            fabric=m.fabric, timing=m.timing, noisy=m.noisy, figures_of=m.figures_of))
    out.sort(key=lambda h: (h.pair_key, h.series, h.direction or ""))
    return out


def worst_direction(hs: List[Headline]) -> Headline:
    """A pair is as good as its slower direction."""
    return min(hs, key=lambda h: h.gbps)
