"""Sharing one sim step's cases among every sim worker, in runs of few steps.

Why: a step (one test group on one pair) is the unit of timeouts, resume and events, and the sim
pool hands each step to one worker. A one-pair run is three steps, peer copies, DataParallel
and collectives, on two workers: one worker ran two of them while the other waited (17-19 s of
a 20-22 s default-preset run). When a run has fewer than two steps per worker, each step is
instead measured by every worker at once: its cases are handed out one at a time, heaviest
first, to whichever worker is free (shares dealt up front by bytes left one worker idle for
up to 2 s of a step: the same bytes cost a cold or a contended worker more); the step is still
one step: done when every case is, failed (hang or crash, every worker killed, one failure,
one timeout) when any worker fails. Modeled times and the damage of faults are seeded by the
measurement and the sample (fabrics/sim.py), so a measurement is the same whichever worker
takes it. Pure Python: the runner never imports torch.
"""

from __future__ import annotations

from typing import List, Sequence, Union

from .fabrics.fabric import Fabric, fabric_named
from .plan import Case, Step


def share_steps(fabric: Union[str, Fabric], steps: Sequence[Step], pool_size: int) -> bool:
    """Whether the run's steps are shared among the workers: sim, several workers, and fewer
    than two steps per worker (with more, the pool keeps every worker busy by itself)."""
    return fabric_named(fabric).pooled and pool_size > 1 and len(steps) < 2 * pool_size


def _weight(case: Case) -> int:
    """Bytes one sample of the case moves, roughly: a bidirectional copy moves its size twice."""
    return case.size_bytes * (2 if case.test == "p2p.copy_bidir" else 1)


def dealing_order(cases: Sequence[Case]) -> List[Case]:
    """The order a shared step's cases are handed out in, one at a time to whichever worker is
    free: heaviest first (ties in the step's order), so the step ends on small cases and no
    worker waits long for the last one; and a worker's 256 MiB blocks, allocated first, serve
    the smaller buffers after them (fabrics/host_blocks.py)."""
    return sorted(cases, key=_weight, reverse=True)
