"""Sharing one sim step's cases among every sim worker, in runs of few steps.

Why: a step (one test group on one pair) is the unit of timeouts, resume and events, and the sim
pool hands each step to one worker. A one-pair run is three steps, peer copies, DataParallel
and collectives, on two workers: one worker ran two of them while the other waited (17-19 s of
a 20-22 s default-preset run). When a run has fewer than two steps per worker, each step is
instead measured by every worker at once, each taking a share of its cases (balanced by the
bytes they move); the step is still one step: done when every share is, failed (hang or
crash, every worker killed, one finding, one timeout) when any share fails. Modeled times and
the damage of faults are seeded by the measurement and the sample (fabrics/sim.py), so a
measurement is the same whichever worker takes it. Pure Python: the runner never imports torch.
"""

from __future__ import annotations

from typing import List, Sequence

from .plan import Case, Step


def share_steps(fabric: str, steps: Sequence[Step], pool_size: int) -> bool:
    """Whether the run's steps are shared among the workers: sim, several workers, and fewer
    than two steps per worker (with more, the pool keeps every worker busy by itself)."""
    return fabric == "sim" and pool_size > 1 and len(steps) < 2 * pool_size


def _weight(case: Case) -> int:
    """Bytes one sample of the case moves, roughly: a bidirectional copy moves its size twice."""
    return case.size_bytes * (2 if case.test == "p2p.copy_bidir" else 1)


def share_cases(cases: Sequence[Case], parts: int) -> List[List[Case]]:
    """``cases`` dealt into ``parts`` shares of about equal weight (largest first, each to the
    lightest share), each share in the step's own order."""
    order = {id(c): k for k, c in enumerate(cases)}
    shares: List[List[Case]] = [[] for _ in range(max(1, parts))]
    loads = [0] * len(shares)
    for c in sorted(cases, key=_weight, reverse=True):
        k = loads.index(min(loads))
        shares[k].append(c)
        loads[k] += _weight(c)
    return [sorted(s, key=lambda c: order[id(c)]) for s in shares]
