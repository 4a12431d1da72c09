"""The plan of a run: steps (one test group on one pair, or one GPU alone) and their cases.

A *case* is one future Measurement: test name, GPUs, direction and size. Its :attr:`Case.key`
is the measurement's identity in ``measurements.jsonl``, so ``--resume`` can skip what is done.
A *step* is the unit the runner hands to worker processes and times out; the *layout* says which
GPUs each worker process of a step drives (per fabric). Pure Python: the parent never imports
torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple, Union

from gputopo.model import Measurement, Topology
from gputopo.model.collectives import BENCH_COLLECTIVES, collective, is_collective

from .fabrics.fabric import Fabric, fabric_named
from .options import BenchOptions, TEST_GROUPS

#: Measurement.test names per group (docs/bench.md).
P2P_TESTS = ("p2p.copy", "p2p.copy_bidir", "p2p.staged", "p2p.latency")
#: DataParallel's primitives, each with the nccl-tests collective its bytes move like (the
#: busbw factor it gets: a scatter or gather of the batch crosses the link with half of it).
DP_MOVES_LIKE = {"dp.broadcast_coalesced": "broadcast", "dp.scatter": "scatter",
                 "dp.gather": "gather", "dp.reduce_add": "reduce"}
DP_TESTS = tuple(DP_MOVES_LIKE)
#: The collectives the bench runs (model/collectives.py), in the order it measures them.
COLLECTIVE_TESTS = tuple(c.test for c in BENCH_COLLECTIVES)
SELF_TESTS = ("self.h2d", "self.d2h", "self.d2d")


def busbw_factor(test: str, n_ranks: int = 2) -> float:
    """busbw / algbw of a bench test over ``n_ranks`` GPUs: the collective table's factor for a
    collective and for the DataParallel primitive moving like one, 1 for plain copies."""
    if is_collective(test):
        return collective(test).busbw_factor(n_ranks)
    if test in DP_MOVES_LIKE:
        return collective(DP_MOVES_LIKE[test]).busbw_factor(n_ranks)
    return 1.0


def case_key(test: str, gpus: Sequence[int], direction: Optional[str], size_bytes: int) -> str:
    return f"{test}|{','.join(map(str, gpus))}|{direction or ''}|{size_bytes}"


def measurement_key(m: Measurement) -> str:
    return case_key(m.test, m.gpus, m.direction, m.size_bytes)


@dataclass(frozen=True)
class Case:
    """One measurement to take. ``src``/``dst``: first and second GPU of the direction (for DP
    the master GPU and the other; for a broadcast the root); None for symmetric tests."""

    test: str
    gpus: Tuple[int, ...]
    direction: Optional[str]
    size_bytes: int
    src: Optional[int] = None
    dst: Optional[int] = None

    @property
    def key(self) -> str:
        return case_key(self.test, self.gpus, self.direction, self.size_bytes)

    def to_json(self) -> dict:
        return {"test": self.test, "gpus": list(self.gpus), "direction": self.direction,
                "size_bytes": self.size_bytes, "src": self.src, "dst": self.dst}

    @classmethod
    def from_json(cls, d: dict) -> "Case":
        return cls(d["test"], tuple(d["gpus"]), d["direction"], d["size_bytes"], d.get("src"),
                   d.get("dst"))


@dataclass
class Step:
    """One test group on one pair (or ``self`` on one GPU): the unit of timeouts and resume."""

    id: str
    group: str  # "p2p" | "dp" | "collectives" | "self"
    gpus: Tuple[int, ...]
    link_class: Optional[str]
    cases: List[Case] = field(default_factory=list)

    @property
    def label(self) -> str:
        g = ",".join(map(str, self.gpus))
        return f"{self.group} {g}" + (f" ({self.link_class})" if self.link_class else "")


def _arrow(a, b) -> str:
    return f"{a}->{b}"


def cases_for(group: str, gpus: Tuple[int, ...], sizes: Sequence[int],
              latency_sizes: Sequence[int]) -> List[Case]:
    """The cases of one step, in the order they are measured."""
    out: List[Case] = []
    if group == "self":
        (g,) = gpus
        for size in sizes:
            out.append(Case("self.h2d", gpus, f"host->{g}", size, None, g))
            out.append(Case("self.d2h", gpus, f"{g}->host", size, g, None))
            out.append(Case("self.d2d", gpus, _arrow(g, g), size, g, g))
        return out
    i, j = gpus
    ways = ((i, j), (j, i))
    if group == "p2p":
        for a, b in ways:
            for size in sizes:
                out.append(Case("p2p.copy", gpus, _arrow(a, b), size, a, b))
        for size in sizes:
            out.append(Case("p2p.copy_bidir", gpus, "both", size, i, j))
        for a, b in ways:
            for size in sizes:
                out.append(Case("p2p.staged", gpus, _arrow(a, b), size, a, b))
        for a, b in ways:
            for size in latency_sizes:
                out.append(Case("p2p.latency", gpus, _arrow(a, b), size, a, b))
    elif group == "dp":
        # direction "m->o": m is DataParallel's master device (device_ids[0]), o the other.
        for a, b in ways:
            for size in sizes:
                for test in DP_TESTS:
                    out.append(Case(test, gpus, _arrow(a, b), size, a, b))
    elif group == "collectives":
        for size in sizes:
            for coll in BENCH_COLLECTIVES:
                if coll.rooted:  # from the pair's first GPU, the root, to the second
                    out.append(Case(coll.test, gpus, _arrow(i, j), size, i, j))
                else:
                    out.append(Case(coll.test, gpus, "both", size, None, None))
    else:
        raise ValueError(f"unknown test group {group!r}")
    return out


def plan_steps(topology: Topology, options: BenchOptions) -> List[Step]:
    """Self steps first (one per GPU), then every pair with its test groups, pair by pair."""
    eff = options.effective
    steps: List[Step] = []
    for g in options.self_gpus:
        steps.append(Step(f"self:{g}", "self", (g,), None,
                          cases_for("self", (g,), eff.sizes_bytes, eff.latency_sizes_bytes)))
    for pair in options.pairs:
        lc = str(topology.link_class(*pair))
        for group in TEST_GROUPS:
            if group not in options.tests:
                continue
            steps.append(Step(f"{group}:{pair[0]}-{pair[1]}", group, tuple(pair), lc,
                              cases_for(group, tuple(pair), eff.sizes_bytes,
                                        eff.latency_sizes_bytes)))
    return steps


def layout(step: Step, fabric: Union[str, Fabric]) -> List[Tuple[int, ...]]:
    """GPUs driven by each worker process of a step, in rank order.

    cuda: one process drives both GPUs of a pair for peer copies and DataParallel (that is how
    DataParallel works), two processes (one per GPU) for NCCL collectives. cpu: one process per
    "GPU" always (bytes really cross processes). sim: one process models the whole pair.
    """
    return fabric_named(fabric).layout(step.gpus, step.group)  # (fabrics/fabric.py)


def count_cases(steps: Sequence[Step]) -> int:
    return sum(len(s.cases) for s in steps)


def by_key(measurements: Sequence[Measurement]) -> Dict[str, Measurement]:
    return {measurement_key(m): m for m in measurements}
