"""Like with like: GPUs of the same model compared with each other, in every run.

A pair's figure is compared with the other pairs of the same **like group**: GPUs of the same
model (NVML's name; a run whose names were not read is one group, said so), the same link class
where it is known, the same series (test), headline size and kind of direction (one way, both
ways at once, or a collective's). Published references and link rates judge a figure against
the outside world (bandwidth_findings.py); this rule judges it against its own machine, always,
whether a reference applies or not. It makes two kinds of finding:

- ``slow-gpu-group`` (warning): a set of GPUs all of whose pairs are slower than every pair among
  the other GPUs, by a clear margin (the set's fastest pair below LIKE_GROUP_RATIO of the slowest
  pair among the others). Each GPU's **best pair** separates such groups where the median over
  all pairs cannot: on an 8-GPU NVSwitch machine with GPUs 0-3 slow, 22 of the 28 pairs touch
  them, so the median is one of theirs, but each of GPUs 4-7 still has a fast pair and none of
  0-3 has. A single slow pair (noise, or a link of its own) lowers no GPU's best pair, so it
  never makes a group.
- ``outlier`` (warning): one pair below OUTLIER_RATIO of the median of its like pairs (the
  former class-median rule of bandwidth_findings.py, absorbed here: it now also keeps GPU
  models, sizes and directions apart). It needs the link class: without one, pairs of different
  paths (NVLink and PCIe, one socket and two) would be compared, and a median over mixed paths
  calls the slower path a fault.

Why LIKE_GROUP_RATIO is 0.9: healthy NVSwitch machines show a few percent of spread between
pairs, sometimes in two plateaus. The posted healthy 8x H100 SXM bidirectional matrix of NVIDIA/nccl
issue 1264 (tests/fixtures/p2pbw) spreads 739-773 GB/s (4 %), and its GPUs' best pairs split into
no sets at all (the would-be slow set's fastest pair is 1.01 x the others' slowest); every
healthy simulated machine reads 0.993 or above. The posted 8x A100 SXM4 of DistServe issue 3 with
a slow half reads 0.82 (every bidirectional pair with GPU 0-3 ~420 GB/s, ~518 among GPUs 4-7).
0.9 lies between the two (docs/report.md, "Like with like", lists every figure).

Measuring code returns measurements; this module only reads their headlines (headline.py).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from gputopo.model import Finding, Topology
from gputopo.model.bandwidth import PCIE_X16_GBPS
from gputopo.model.sizes import size_text

from .expected_basis import gpu_names
from .headline import Headline, worst_direction
from .why.causes import REMEDY_ACS, REMEDY_NVLINK, path_facts

#: A set of GPUs whose fastest pair is below this fraction of the slowest pair among the other
#: GPUs (same like group) is a ``slow-gpu-group`` (see the module's docstring for why 0.9).
LIKE_GROUP_RATIO = 0.9
#: A pair below this fraction of the median of its like pairs is an ``outlier``.
OUTLIER_RATIO = 0.7
#: A like group needs this many measured pairs to be compared at all.
MIN_LIKE_PAIRS = 3
#: The faster GPUs of a slow group need this many of them (so at least 3 pairs among them: the
#: plateau a group is slower than is never one pair's reading).
MIN_FAST_GPUS = 3
#: Each GPU of a slow group needs this many measured pairs (one pair alone is one pair's reading).
MIN_PAIRS_PER_SLOW_GPU = 2

#: The most one PCIe path carries per direction (x16 of the newest generation gputopo knows, GB/s):
#: a set whose pairs all stay within it may differ from the others only by where its GPUs sit
#: (another PCIe switch or socket), so without the link class it is said (info), not a fault.
PCIE_REACH_GBPS = max(PCIE_X16_GBPS.values())

#: The key of a headline series, as headline.py's callers use it.
SeriesKey = Tuple[str, Tuple[int, ...], Optional[str]]


def direction_kind(direction: Optional[str]) -> Optional[str]:
    """``both ways`` for a bidirectional reading (an import's ``4<->5``, the bench's ``both``), ``one
    way`` for ``4->5``, None for a series without a direction."""
    if not direction:
        return None
    if "<->" in direction or direction == "both":
        return "both ways"
    return "one way" if "->" in direction else direction


@dataclass(frozen=True)
class GroupKey:
    """What a like group's pairs share."""

    model: Optional[str]
    link_class: Optional[str]
    series: str
    size_bytes: int
    direction: Optional[str]

    def text(self) -> str:
        size = size_text(self.size_bytes)
        cls = f" {self.link_class}" if self.link_class else ""
        way = f" {self.direction}" if self.direction else ""
        return f"{self.series}{way} at {size}{cls}"


@dataclass
class LikeGroup:
    """The headlines of one like group, by pair."""

    key: GroupKey
    heads: Dict[Tuple[int, ...], List[Headline]] = field(default_factory=dict)

    def best(self, pair: Tuple[int, ...]) -> float:
        """A pair's best reading: a bidirectional figure read twice (4<->5, 5<->4) is one
        measurement of the same thing, and a GPU's best pair asks what it can do."""
        return max(h.gbps for h in self.heads[pair])

    def worst(self, pair: Tuple[int, ...]) -> Headline:
        return worst_direction(self.heads[pair])

    def gpus(self) -> List[int]:
        return sorted({g for p in self.heads for g in p})

    def model_text(self) -> str:
        return self.key.model.removeprefix("NVIDIA ") if self.key.model else "(model not read)"


def like_groups(heads: List[Headline], topo: Optional[Topology]) -> List[LikeGroup]:
    """Every like group of at least MIN_LIKE_PAIRS measured pairs: pair series (two GPUs) on a
    fabric whose timings are of GPU links (not the ``cpu`` fabric), not a GPU alone (``self.*``),
    both GPUs of one model (pairs of two models are compared with nobody)."""
    groups: Dict[GroupKey, LikeGroup] = {}
    for h in heads:
        if len(h.gpus) != 2 or not h.of_gpus or h.test.startswith("self."):
            continue
        names = gpu_names(topo, h.pair_key)
        if names and len(set(names)) != 1:
            continue
        key = GroupKey(names[0] if names else None, h.link_class, h.series, h.size_bytes,
                       direction_kind(h.direction))
        group = groups.setdefault(key, LikeGroup(key))
        group.heads.setdefault(h.pair_key, []).append(h)
    return [g for k, g in sorted(groups.items(), key=lambda kv: repr(kv[0]))
            if len(g.heads) >= MIN_LIKE_PAIRS]


def peer_bases(heads: List[Headline], topo: Optional[Topology]) -> Dict[SeriesKey, str]:
    """For each headline series compared with like GPUs, what it was compared with, e.g. "the 27
    other A100-SXM4-80GB pairs at 64 MiB, p2p.copy_bidir both ways" (the series' judged basis
    ``peers``)."""
    out: Dict[SeriesKey, str] = {}
    for g in like_groups(heads, topo):
        k = g.key
        cls = f" {k.link_class}" if k.link_class else " (link class not known)"
        way = f" {k.direction}" if k.direction else ""
        text = (f"the {len(g.heads) - 1} other {g.model_text()}{cls} pairs at {size_text(k.size_bytes)}, "
                f"{k.series}{way}")
        for hs in g.heads.values():
            for h in hs:
                out[(h.series, h.gpus, h.direction)] = text
    return out


@dataclass
class SlowGroup:
    """A set of GPUs slower than the others of its like group with every peer."""

    group: LikeGroup
    slow: List[int]
    fast: List[int]
    slow_best_gbps: float  # the fastest pair that touches a slow GPU
    fast_min_gbps: float  # the slowest pair among the fast GPUs
    fast_median_gbps: float

    @property
    def ratio(self) -> float:
        return self.slow_best_gbps / self.fast_min_gbps


def slow_group(g: LikeGroup) -> Optional[SlowGroup]:
    """The GPUs below the widest gap between the GPUs' best pairs, if every pair touching them is
    below LIKE_GROUP_RATIO of every pair among the others (see the module's docstring)."""
    gpus = g.gpus()
    best: Dict[int, float] = {x: 0.0 for x in gpus}
    count: Dict[int, int] = {x: 0 for x in gpus}
    for pair in g.heads:
        v = g.best(pair)
        for x in pair:
            best[x] = max(best[x], v)
            count[x] += 1
    order = sorted(gpus, key=lambda x: best[x])
    if len(order) < MIN_FAST_GPUS + 1:
        return None
    # the widest gap (smallest ratio of neighbours) between the GPUs' best pairs
    cut = min(range(1, len(order) - MIN_FAST_GPUS + 1),
              key=lambda i: best[order[i - 1]] / best[order[i]] if best[order[i]] > 0 else 1.0)
    slow, fast = sorted(order[:cut]), sorted(order[cut:])
    if any(count[x] < MIN_PAIRS_PER_SLOW_GPU for x in slow):
        return None
    fast_pairs = [g.best(p) for p in g.heads if p[0] in fast and p[1] in fast]
    touching = [g.best(p) for p in g.heads if p[0] in slow or p[1] in slow]
    if len(fast_pairs) < MIN_LIKE_PAIRS or not touching or min(fast_pairs) <= 0:
        return None
    found = SlowGroup(g, slow, fast, max(touching), min(fast_pairs), statistics.median(fast_pairs))
    return found if found.ratio < LIKE_GROUP_RATIO else None


def _gpus_text(gpus: List[int]) -> str:
    if len(gpus) > 2 and gpus == list(range(gpus[0], gpus[-1] + 1)):
        return f"{gpus[0]}-{gpus[-1]}"
    return ",".join(map(str, gpus))


def _pair_text(gpus, lc) -> str:
    return f"GPUs {','.join(map(str, gpus))} ({lc or '?'})"


def outlier_findings(groups: List[LikeGroup], topo: Optional[Topology]) -> List[Finding]:
    """Pairs below OUTLIER_RATIO of the median of their like pairs (link class known), per like
    group, each pair by its slower direction; one finding per pair, its worst group first."""
    hits: Dict[tuple, List[dict]] = defaultdict(list)
    lcs: Dict[tuple, str] = {}
    for g in groups:
        lc = g.key.link_class
        if not lc:
            continue
        worst = {pair: g.worst(pair) for pair in g.heads}
        median = statistics.median(h.gbps for h in worst.values())
        for pair, h in worst.items():
            if median > 0 and h.gbps < OUTLIER_RATIO * median:
                hits[pair].append({"series": g.key.series, "direction": h.direction, "gbps": round(h.gbps, 3),
                                   "size_bytes": g.key.size_bytes, "class_median_gbps": round(median, 3),
                                   "ratio": round(h.gbps / median, 3), "class_pairs": len(worst),
                                   "model": g.key.model})
                lcs[pair] = lc
    out = []
    for pair, items in sorted(hits.items()):
        worst_item = min(items, key=lambda d: d["ratio"])
        lc = lcs[pair]
        facts = path_facts(topo, list(pair), lc)
        out.append(Finding(
            "outlier", "warning",
            f"{_pair_text(pair, lc)}: {worst_item['series']} {worst_item['gbps']:.3g} GB/s is "
            f"{worst_item['ratio']:.0%} of the {lc} median {worst_item['class_median_gbps']:.3g} GB/s of its "
            f"{worst_item['class_pairs']} like pairs (below {OUTLIER_RATIO:.0%})",
            gpus=list(pair), link_class=lc,
            evidence={"threshold_ratio": OUTLIER_RATIO, "basis": "like pairs: same model, link class, series, "
                      "size and direction", "measured": items, **facts.evidence()},
            cause=("this pair is slower than its peers of the same class: a link fault specific to it "
                   "(fewer NVLinks, a downtrained or erroring link, ACS on its bridge) or a busy GPU"),
            remedies=["compare its link state with its peers' in `gputopo scan`",
                      REMEDY_NVLINK if facts.is_nvlink else REMEDY_ACS]))
    return out


def slow_group_findings(groups: List[LikeGroup], topo: Optional[Topology], said: set) -> List[Finding]:
    """One ``slow-gpu-group`` per set of GPUs (its worst like group), unless what it says is said
    already (``said``: the GPU tuples of earlier speed warnings, the kind table's ``symptom``
    ``speed``: ``slow``, ``outlier``, ``p2p-slower-than-staged``): every pair
    touching the set has a pair finding of its own (the culprit search tells that story pair by
    pair), or the set itself has one (an import's GPU whose staged pairs are all slow)."""
    found: Dict[Tuple[int, ...], List[SlowGroup]] = defaultdict(list)
    for g in groups:
        s = slow_group(g)
        if s is not None:
            touching = {p for p in g.heads if set(p) & set(s.slow)}
            if touching - said and tuple(s.slow) not in said:
                found[tuple(s.slow)].append(s)
    out = []
    for slow, items in sorted(found.items()):
        w = min(items, key=lambda s: s.ratio)
        k = w.group.key
        known = bool(k.link_class)
        gpus = list(slow)
        if known:
            facts = path_facts(topo, gpus, k.link_class)
            cause = (f"GPUs {_gpus_text(gpus)} are slower with every peer, the others are not: something they share "
                     "and the others do not (their links to the switch or bridge, their NVLinks, a PCIe switch, "
                     "a busy or throttled GPU); which one is not known from this input")
            remedies = ["compare these GPUs' link state with the others' in `gputopo scan` (NVLinks up, link "
                        "errors, PCIe width, clocks)", REMEDY_NVLINK if facts.is_nvlink else REMEDY_ACS]
        else:
            cause = (f"GPUs {_gpus_text(gpus)} are slower with every peer, the others are not; the cause is not known "
                     "from this input: the link class of the pairs is not in it, so a path of their own (another "
                     "PCIe switch or socket) cannot be told from a fault (fewer or erroring links, a slow GPU)")
            if within_pcie_reach(w):
                cause += (f"; every pair is within what one PCIe path carries (at most {PCIE_REACH_GBPS:g} GB/s "
                          "per direction), so where these GPUs sit may be all it is: said, not called a fault")
            remedies = ["import again with --topo (saved `nvidia-smi topo -m`) to compare each path with its class",
                        "compare these GPUs' link state with the others' in `gputopo scan` on the node"]
        model = w.group.model_text()
        text = (f"GPUs {_gpus_text(gpus)} ({model}): every pair with one of them is slower than the pairs among GPUs "
                f"{_gpus_text(w.fast)}: at most {w.slow_best_gbps:.3g} GB/s against at least {w.fast_min_gbps:.3g} GB/s "
                f"(median {w.fast_median_gbps:.3g} GB/s), {w.ratio:.0%} (below {LIKE_GROUP_RATIO:.0%}), "
                f"{k.text()}" + ("" if known else " (link class not known)"))
        evidence = {"threshold_ratio": LIKE_GROUP_RATIO, "slow_gpus": gpus, "fast_gpus": w.fast,
                    "basis": "like GPUs: same model, link class where known, series, size and direction",
                    "measured": [{"series": s.group.key.series, "direction": s.group.key.direction,
                                  "size_bytes": s.group.key.size_bytes, "link_class": s.group.key.link_class,
                                  "model": s.group.key.model, "slow_best_gbps": round(s.slow_best_gbps, 3),
                                  "fast_min_gbps": round(s.fast_min_gbps, 3),
                                  "fast_median_gbps": round(s.fast_median_gbps, 3), "ratio": round(s.ratio, 3),
                                  "pairs": len(s.group.heads)} for s in items]}
        severity = "info" if not known and within_pcie_reach(w) else "warning"
        out.append(Finding("slow-gpu-group", severity, text, gpus=gpus, link_class=k.link_class,
                           evidence=evidence, cause=cause, remedies=remedies))
    return out


def within_pcie_reach(s: SlowGroup) -> bool:
    """Whether the fast GPUs' slowest pair is within what one PCIe path carries (both ways at once
    counted twice): such pairs may all be PCIe, where a slower set can be a position, not a fault."""
    reach = PCIE_REACH_GBPS * (2 if s.group.key.direction == "both ways" else 1)
    return s.fast_min_gbps <= reach


def like_gpu_findings(heads: List[Headline], topo: Optional[Topology], said: Optional[set] = None) -> List[Finding]:
    """The pairs below their like pairs' median (``outlier``), then the sets of GPUs slower than
    the others of their model (``slow-gpu-group``) that no pair finding already says."""
    groups = like_groups(heads, topo)
    outliers = outlier_findings(groups, topo)
    pairs_said = set(said or set()) | {tuple(sorted(f.gpus)) for f in outliers if f.gpus}
    return outliers + slow_group_findings(groups, topo, pairs_said)
