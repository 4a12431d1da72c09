"""Which GPUs should a job use? Rank the sets of N GPUs by their worst pair.

A job is as good as its worst pair: a ring all-reduce waits for its slowest hop, and one
corrupting peer path breaks nn.DataParallel for the whole set. So every set of N GPUs (never one
with an excluded or lost GPU, a GPU the run localised as faulty, or a pair that hung, crashed or
corrupted data on every path) is ranked by its worst pair:

1. the pair's state, best first: ``ok``; ``degraded`` (a GPU of it has NVLinks down, a PCIe
   link narrower than it can be, link errors, link error counters growing between scans or an
   unhealthy or unregistered NVLink fabric: correct but slower); ``p2p-broken`` (peer copies corrupt but copies through host memory are fine, or the
   scan sees the IOMMU/ACS that break them and no run cleared the pair): usable only with
   ``NCCL_P2P_DISABLE=1`` and DDP, never nn.DataParallel;
2. with a run (``--from``): the worst pair's measured GB/s (its headline series); pairs the run
   did not measure rank after measured ones;
3. the worst link class (NV# with more links first, then PIX, PXB, PHB, NODE, SYS);
4. fewer NUMA nodes spanned, then the lowest GPU numbers.

Machines with many GPUs have too many sets to enumerate; there each set is grown greedily from
every good pair (a note says so).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

from gputopo.model import Finding, LinkClass, Topology
from gputopo.model.finding_kinds import degrades, family, marks_pairs, spec

from .why.causes import path_facts
from .pairs import gpu_finding_touches, names_each_gpu

#: Pair states, best first; ``broken`` pairs are never placed.
STATES = ("ok", "degraded", "p2p-broken", "broken")
#: Sets enumerated at most; above it sets are grown greedily.
MAX_SETS = 200_000
#: Best pairs a greedy search grows sets from.
GREEDY_SEEDS = 32

Pair = Tuple[int, int]


@dataclass
class PairState:
    state: str = "ok"
    reasons: List[str] = field(default_factory=list)
    gbps: Optional[float] = None
    measured: bool = False

    def worse(self, state: str, reason: str) -> None:
        if STATES.index(state) > STATES.index(self.state):
            self.state = state
        if reason not in self.reasons:
            self.reasons.append(reason)


@dataclass
class Placement:
    """A ranked set of GPUs and what running on it takes."""

    gpus: Tuple[int, ...]
    state: str
    worst_pair: Optional[Pair]
    worst_class: Optional[str]
    worst_gbps: Optional[float]
    unmeasured: int
    numa_nodes: int
    reasons: List[str] = field(default_factory=list)

    @property
    def dataparallel_safe(self) -> bool:
        return self.state in ("ok", "degraded")


def _lc(topo: Topology, p: Pair) -> Optional[LinkClass]:
    try:
        return topo.link_class(*p)
    except KeyError:
        return None


def scan_states(topo: Topology, findings: Sequence[Finding]) -> Tuple[Dict[Pair, PairState], Dict[int, str]]:
    """Pair states and excluded GPUs from what the scan sees alone: lost GPUs, NVLinks down, and
    the IOMMU / ACS facts that break PCIe peer copies (suspected until a run clears the pair)."""
    states: Dict[Pair, PairState] = {(p.gpus[0], p.gpus[1]): PairState() for p in topo.pairs}
    out_gpus: Dict[int, str] = {g.nvml_index: f"GPU {g.nvml_index} is lost to NVML" for g in topo.gpus
                               if g.lost is not None}
    for f in findings:
        if degrades(f.kind) and f.severity != "info" and f.gpus and (len(f.gpus) == 1 or names_each_gpu(f.kind)):
            every = spec(f.kind).degrades_every_pair
            for p, st in states.items():
                # a narrow PCIe link slows every job on the GPU (its host copies), not only its PCIe pairs
                on = [g for g in f.gpus if g in p]
                if on and (every or gpu_finding_touches(topo, f, p, str(_lc(topo, p)))):
                    st.worse("degraded", f"GPU{'s' if len(f.gpus) > 1 else ''} "
                             f"{','.join(map(str, f.gpus))}: {_degrading_words(f)}")
    for p, st in states.items():
        lc = _lc(topo, p)
        if lc is None or lc.is_nvlink:
            continue
        facts = path_facts(topo, p, str(lc))
        why = ["the IOMMU translates DMA"] if facts.iommu_translated else []
        if facts.acs_bridges:
            why.append("ACS redirects peer requests above it")
        if why:
            st.worse("p2p-broken", f"PCIe peer path suspect, not measured ({' and '.join(why)})")
    return states, out_gpus


def _degrading_words(f: Finding) -> str:
    if marks_pairs(f.kind) == "counter":
        counter = str((f.evidence or {}).get("counter") or "")
        what = ("NVLink error counters" if counter.startswith("nvlink_")
                else "PCIe replays" if counter == "pcie_replay" else counter)
        return f"{what} growing between scans (history)"
    return degrades(f.kind) or f.kind


def run_states(topo: Topology, summary) -> Tuple[Dict[Pair, PairState], Dict[int, str]]:
    """Pair states from a run: its measured GB/s, what broke, and what the scan saw."""
    from .why.culprits import killed

    findings = summary.findings
    states, out_gpus = scan_states(topo, [f for f in findings if degrades(f.kind)])
    for row in summary.pairs:
        if len(row.gpus) == 2 and (row.gpus in states or row.measurements):
            st = states.setdefault(row.gpus, PairState())  # measured: also where the topology has no pairs (an import)
            st.gbps, st.measured = row.headline_gbps, bool(row.measurements)
            if row.measurements:  # measured: a suspicion from the host facts is replaced by data
                st.state = "degraded" if st.state == "degraded" else "ok"
                st.reasons = [r for r in st.reasons if not r.startswith("PCIe peer path suspect")]
    for f in findings:
        if f.kind == "gpu-fault" and f.severity == "error" and f.gpus:
            out_gpus[f.gpus[0]] = f.message
        elif f.kind == "gpu-lost" and f.gpus:
            out_gpus[f.gpus[0]] = f.message
    for f in findings:
        # p2p-unsupported breaks nothing: the driver stages copies; correct, and the measured GB/s says how fast
        if not spec(f.kind).breaks or not f.gpus or len(f.gpus) != 2 or f.severity == "info":
            continue
        st = states.setdefault((min(f.gpus), max(f.gpus)), PairState())
        if f.kind == "crash" and killed(f):
            continue  # the kernel killed the worker: says nothing about the pair
        words = spec(f.kind).peer_only
        if words and _peer_only(f):
            st.worse("p2p-broken", words)
        elif f.severity == "error":
            st.worse("broken", f"{f.kind} (measured)")
    return states, out_gpus


def _peer_only(f: Finding) -> bool:
    """Corrupt only on raw peer copies (staged fine), or bad with DataParallel only (DDP fine)."""
    ev = f.evidence or {}
    if f.kind == "corrupt":
        paths = {t.get("path") for t in (ev.get("tests") or {}).values()}
        return bool(paths) and paths <= {"peer"}
    if family(f.kind) == "numerics":
        return ev.get("way") == "dp" and ev.get("ddp_verdict") in (None, "ok")
    return False


def rank(topo: Topology, n: int, states: Dict[Pair, PairState], out_gpus: Dict[int, str],
         exclude: Set[int], top: int = 3) -> Tuple[List[Placement], List[str]]:
    """The best ``top`` sets of ``n`` GPUs, best first, and notes on how they were found."""
    usable = [g.nvml_index for g in topo.gpus if g.nvml_index not in exclude and g.nvml_index not in out_gpus]
    notes = []
    numa = {g.nvml_index: g.numa_node for g in topo.gpus}
    sets: Iterable[Tuple[int, ...]]
    if n == 1:
        sets = [(g,) for g in usable]
    elif math.comb(len(usable), n) <= MAX_SETS:
        sets = itertools.combinations(usable, n)
    else:
        notes.append(f"{math.comb(len(usable), n)} sets of {n} are too many to try: each set was grown "
                     "greedily from a good pair, so a better set may exist")
        sets = _greedy(usable, n, states, topo, numa)
    placed = []
    for s in sets:
        pl = _place(topo, tuple(s), states, numa)
        if pl is not None:
            placed.append(pl)
    if not any(st.measured for st in states.values()):  # nothing measured (scan only): no count to give
        for pl in placed:
            pl.unmeasured = 0
    placed.sort(key=lambda p: _key(topo, p))
    return placed[:top], notes


def _key(topo: Topology, p: Placement):
    lc = _rank_of(p.worst_class)
    return (STATES.index(p.state), p.unmeasured > 0, -(p.worst_gbps or 0.0), lc, p.numa_nodes, p.gpus)


def _rank_of(lc: Optional[str]):
    try:
        return LinkClass.parse(lc).rank if lc else (0, 0)
    except ValueError:
        return (99, 0)


def _place(topo: Topology, gpus: Tuple[int, ...], states: Dict[Pair, PairState], numa) -> Optional[Placement]:
    pairs = list(itertools.combinations(gpus, 2))
    worst_state = "ok"
    reasons: Dict[str, List[Pair]] = {}
    for p in pairs:
        st = states.get(p, PairState())
        if STATES.index(st.state) > STATES.index(worst_state):
            worst_state = st.state
        for r in st.reasons:
            reasons.setdefault(r, []).append(p)
    if worst_state == "broken":
        return None
    measured = [p for p in pairs if states.get(p, PairState()).gbps is not None]
    worst_pair = min(measured, key=lambda p: states[p].gbps or 0.0) if measured else \
        (max(pairs, key=lambda p: _rank_of(str(_lc(topo, p)))) if pairs else None)
    classes = [str(_lc(topo, p)) for p in pairs if _lc(topo, p) is not None]
    worst_class = max(classes, key=_rank_of) if classes else None
    nodes = {numa.get(g) for g in gpus}
    return Placement(gpus=gpus, state=worst_state, worst_pair=worst_pair, worst_class=worst_class,
                     worst_gbps=states[worst_pair].gbps if measured and worst_pair is not None else None,
                     unmeasured=len(pairs) - len(measured), numa_nodes=len(nodes),
                     reasons=[f"{r}: " + " ".join(f"{a},{b}" for a, b in ps) for r, ps in reasons.items()])


def _greedy(usable: List[int], n: int, states, topo, numa) -> List[Tuple[int, ...]]:
    """From every pair, add the GPU that keeps the set's worst pair best, until n GPUs."""
    out = set()
    seeds = sorted(itertools.combinations(usable, 2),
                   key=lambda p: _key(topo, _place(topo, p, states, numa) or _BROKEN))[:GREEDY_SEEDS]
    for seed in seeds:
        cur = list(seed)
        while len(cur) < n:
            best = None
            for g in usable:
                if g in cur:
                    continue
                pl = _place(topo, tuple(sorted(cur + [g])), states, numa)
                if pl is not None and (best is None or _key(topo, pl) < _key(topo, best)):
                    best = pl
            if best is None:
                break
            cur = list(best.gpus)
        if len(cur) == n:
            out.add(tuple(sorted(cur)))
    return sorted(out)


_BROKEN = Placement(gpus=(), state="broken", worst_pair=None, worst_class=None, worst_gbps=None,
                    unmeasured=0, numa_nodes=0)
