"""Theoretical unidirectional GB/s of the link between two GPUs, from the scanned topology.

NVLink: version x active links bonded to the pair (docs/report.md, via model.bandwidth).
PCIe: generation x width of the narrower end of the two GPUs. The generation used is the
*maximum* the GPU supports, because idle GPUs drop their generation to save power and the scan
usually reads them idle; the width is the *current* one, because a narrower trained width is a
real limit (a riser, a bad lane) that stays under load.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

from gputopo.model import Topology, is_value
from gputopo.model.bandwidth import nvlink_gbps, pcie_gbps


@dataclass(frozen=True)
class ExpectedRate:
    """``gbps`` is None when the topology lacks what it takes; ``basis`` says how it was got."""

    gbps: Optional[float]
    basis: str


def pair_rate(topo: Optional[Topology], i: int, j: int) -> ExpectedRate:
    """Theoretical GB/s per direction between GPUs ``i`` and ``j``."""
    if topo is None:
        return ExpectedRate(None, "no topology")
    try:
        pair = topo.pair(i, j)
    except KeyError:
        return ExpectedRate(None, f"pair {i},{j} not in the topology")
    lc = pair.link_class
    if lc.is_nvlink:
        return _nvlink_rate(topo, i, j, pair.nvlink_count or lc.nvlinks)
    return _pcie_pair_rate(topo, (i, j))


def gpu_pcie_rate(topo: Optional[Topology], i: int) -> ExpectedRate:
    """GPU ``i``'s own PCIe link (what host <-> device copies can reach)."""
    if topo is None:
        return ExpectedRate(None, "no topology")
    return _pcie_pair_rate(topo, (i,))


def group_rate(topo: Optional[Topology], gpus: Iterable[int]) -> ExpectedRate:
    """The slowest pair link among ``gpus`` (the bottleneck of a collective over them)."""
    gpus = sorted(set(gpus))
    if len(gpus) == 1:
        return gpu_pcie_rate(topo, gpus[0])
    rates = [pair_rate(topo, a, b) for k, a in enumerate(gpus) for b in gpus[k + 1:]]
    known = [r for r in rates if r.gbps is not None]
    if not known or len(known) < len(rates):
        missing = next((r for r in rates if r.gbps is None), None)
        return ExpectedRate(None, missing.basis if missing else "no pairs")
    slowest = min(known, key=lambda r: r.gbps or 0.0)  # (every known rate has gbps)
    if len(gpus) == 2:
        return slowest
    return ExpectedRate(slowest.gbps, f"slowest pair link among GPUs {','.join(map(str, gpus))}: {slowest.basis}")


def _nvlink_rate(topo: Topology, i: int, j: int, links: int) -> ExpectedRate:
    version = None
    for g in (i, j):
        try:
            gpu = topo.gpu(g)
        except KeyError:
            continue
        versions = [lk.version for lk in gpu.active_nvlinks() if is_value(lk.version)]
        if versions:
            version = min(versions)
            break
    if version is None:
        return ExpectedRate(None, f"NVLink version of GPUs {i},{j} unknown")
    gbps = nvlink_gbps(version, links)
    if gbps is None:
        return ExpectedRate(None, f"NVLink version {version} not in the rate table")
    return ExpectedRate(gbps, f"NVLink v{version} x {links} links = {gbps:g} GB/s")


def _pcie_pair_rate(topo: Topology, gpus) -> ExpectedRate:
    ends = []
    for g in gpus:
        try:
            gpu = topo.gpu(g)
        except KeyError:
            return ExpectedRate(None, f"GPU {g} not in the topology")
        p = gpu.pcie
        gen = p.gen_max if is_value(p.gen_max) else p.gen_current
        width = p.width_current if is_value(p.width_current) else p.width_max
        if not (is_value(gen) and is_value(width)):
            return ExpectedRate(None, f"PCIe generation/width of GPU {g} unknown")
        gbps = pcie_gbps(gen, width)
        if gbps is None:
            return ExpectedRate(None, f"PCIe Gen{gen} not in the rate table")
        ends.append((gbps, g, gen, width))
    gbps, g, gen, width = min(ends)
    where = f" (narrower end: GPU {g})" if len(gpus) > 1 and len({e[0] for e in ends}) > 1 else ""
    return ExpectedRate(gbps, f"PCIe Gen{gen} x{width}{where} = {gbps:g} GB/s")
