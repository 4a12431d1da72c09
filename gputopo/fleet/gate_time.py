"""`gputopo gate`'s own time model: what each step of a gate costs, per fabric, so that
``--budget`` decides before anything starts what can be measured, and says what cannot.

A gate is: the NVML reads (the scan: measured as it happens, before the plan is made), starting
the worker processes (the forkserver imports torch once, then one fork per worker; on the cuda
fabric each worker also creates its CUDA context), one step per pair (two verified copies, one
each way, after one untimed warm-up each), and with ``--measure copy+allreduce`` one all_reduce
over the set. The plan keeps a reserve for judging and writing the verdict.

gate starts the forkserver before the scan, so the torch import runs while NVML is read: the
plan counts only the start-up still to come (``started_s``).

The sim and cpu figures were measured with benchmarks/gate_time.py on a 2-core VM (its error
against those timings is printed there and recorded in docs/performance.md). **The cuda figures
are unmeasured**: no GPU run has recorded them yet; they are guesses said as such in every plan
(``measured: false``), and a plan on them says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Sequence, Tuple

Pair = Tuple[int, int]

#: Seconds kept for judging, writing the verdict and the state after the measurements.
RESERVE_S = 0.4


@dataclass(frozen=True)
class StepCosts:
    """Seconds per step on one fabric, and where the figures come from."""

    fabric: str
    #: the forkserver's start and its torch import, once
    start_s: float
    #: each worker process: a fork, its set-up (cuda: the CUDA context of its GPU)
    worker_s: float
    #: one pair's step: two copies at the gate's size, warm-up and verification included
    pair_s: float
    #: the all_reduce over the set (one step, all GPUs' workers)
    allreduce_s: float
    #: pair steps that run side by side (the sim's pool); 1: one after the other
    parallel: int
    measured: bool
    basis: str


COSTS: Dict[str, StepCosts] = {
    "sim": StepCosts("sim", start_s=6.8, worker_s=0.05, pair_s=0.03, allreduce_s=0.1, parallel=2,
                     measured=True, basis="benchmarks/gate_time.py, sim fabric, 2-core VM at load 6 (docs/performance.md)"),
    "cpu": StepCosts("cpu", start_s=6.8, worker_s=0.1, pair_s=0.33, allreduce_s=0.6, parallel=1,
                     measured=True, basis="benchmarks/gate_time.py, cpu fabric, 2-core VM at load 6 (docs/performance.md)"),
    "cuda": StepCosts("cuda", start_s=3.0, worker_s=0.6, pair_s=0.05, allreduce_s=1.5, parallel=1,
                      measured=False, basis="unmeasured: estimates until a GPU run records them"),
}


@dataclass
class Plan:
    """What will be measured within the budget, what will not and why, and the estimate."""

    pairs: List[Pair]
    left_out: List[Pair]
    allreduce: bool
    allreduce_left_out: bool
    estimate_s: float
    available_s: float
    costs: StepCosts
    notes: List[str] = field(default_factory=list)

    def to_json(self) -> dict:
        c = self.costs
        return {"pairs": len(self.pairs), "left_out": [list(p) for p in self.left_out],
                "allreduce": self.allreduce, "estimate_s": round(self.estimate_s, 3),
                "available_s": round(self.available_s, 3),
                "costs": {"fabric": c.fabric, "start_s": c.start_s, "worker_s": c.worker_s, "pair_s": c.pair_s,
                          "allreduce_s": c.allreduce_s, "parallel": c.parallel, "measured": c.measured,
                          "basis": c.basis},
                "notes": list(self.notes)}


def estimate(costs: StepCosts, n_workers: int, n_pairs: int, allreduce: bool, started_s: float = 0.0) -> float:
    """Seconds to measure ``n_pairs`` pairs (and the all_reduce) with ``n_workers`` processes;
    ``started_s``: how long ago the forkserver was started (its torch import under way since)."""
    if n_pairs == 0 and not allreduce:
        return 0.0
    waves = -(-n_pairs // max(1, costs.parallel))
    return (max(0.0, costs.start_s - started_s) + costs.worker_s * n_workers + costs.pair_s * waves
            + (costs.allreduce_s if allreduce else 0.0))


def covering_order(gpus: Sequence[int], pairs: Sequence[Pair]) -> List[Pair]:
    """``pairs`` in the order a cut budget loses least: first a ring through every GPU (each GPU
    in two pairs, so a GPU's own fault can be told from a link's), then the rest in order."""
    g = sorted(gpus)
    want = set(pairs)
    first: List[Pair] = []
    if len(g) > 1:
        ring = [(g[k], g[(k + 1) % len(g)]) for k in range(len(g))]
        for a, b in ring:
            p = (min(a, b), max(a, b))
            if p in want and p not in first:
                first.append(p)
    return first + [p for p in pairs if p not in first]


def plan_gate(fabric: str, gpus: Sequence[int], pairs: Sequence[Pair], allreduce: bool, available_s: float,
         n_workers: int, started_s: float = 0.0) -> Plan:
    """The pairs (covering order) that fit ``available_s`` seconds on ``fabric``; the all_reduce
    only when every pair fits beside it. ``started_s``: the forkserver was started that long ago
    (gate starts it before the scan, so its torch import overlaps the NVML reads)."""
    costs = COSTS[fabric]
    ordered = covering_order(gpus, pairs)
    room = available_s - RESERVE_S
    keep = len(ordered)
    while keep > 0 and estimate(costs, n_workers, keep, False, started_s) > room:
        keep -= 1
    chosen, left = ordered[:keep], ordered[keep:]
    with_ar = allreduce and not left and estimate(costs, n_workers, keep, True, started_s) <= room
    notes = []
    if left:
        notes.append(f"{len(left)} of {len(ordered)} pair(s) left out: at {costs.pair_s:g} s a pair after "
                     f"{max(0.0, costs.start_s - started_s) + costs.worker_s * n_workers:.1f} s of start-up "
                     f"({costs.fabric} fabric, "
                     f"{'measured' if costs.measured else 'unmeasured'} costs), {available_s:.1f} s left of the "
                     "budget holds only " + str(keep))
    if allreduce and not with_ar:
        notes.append("all_reduce left out: the budget holds no room for it beside the pairs")
    if not costs.measured:
        notes.append(f"the time model's {costs.fabric} costs are {costs.basis}")
    return Plan(list(chosen), list(left), with_ar, allreduce and not with_ar,
                estimate(costs, n_workers, keep, with_ar, started_s), available_s, costs, notes)
