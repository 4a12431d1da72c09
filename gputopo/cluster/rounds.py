"""The round loop of `gputopo cluster`, the same for a real and a simulated cluster.

A *backend* measures; this module decides what to measure next. The backend (a real job's
``DistBackend`` or the one-process ``SimBackend``) offers:

- ``node_names``: the nodes, in order (index = node number);
- ``measure_intra() -> List[GroupResult]``: each node's all_reduce over its own GPUs, all
  nodes at once (one result per node);
- ``measure_round(index, groups) -> List[GroupResult]``: the inter-node all_reduce of each
  group of nodes (all GPUs of the group's nodes), all groups at once;

either may raise :class:`RanksLost` when ranks stopped answering (dead or hung): the loop then
stops and returns what it has, with the lost ranks. A backend whose ``stopped`` lists ranks
after a round (a signal stopped them, cluster.dist_backend) ends the loop the same way, with
that round kept. Every rank of a real job runs this loop on the same gathered results, so all
of them plan the same next round without a message.
"""

from __future__ import annotations

import random
import statistics
from typing import Callable, List, Optional, Sequence

from gputopo.model.cluster import GroupResult, LostRank, Outcome, RoundRecord, out_of_memory

from .patterns import random_pairs, round_robin, second_pass

#: A group whose busbw is below this fraction of the cluster's reference is slow.
DEFAULT_SLOW_BELOW = 0.8
#: Fewest nodes whose intra-node results are compared (a median of two judges nothing).
MIN_NODES_TO_JUDGE = 3


class RanksLost(Exception):
    def __init__(self, lost: List[LostRank], phase: str):
        super().__init__(f"{len(lost)} rank(s) lost during {phase}")
        self.lost, self.phase = lost, phase


def _median(values: Sequence[float]) -> Optional[float]:
    return statistics.median(values) if values else None


def mark_slow_groups(groups: List[GroupResult], reference: Optional[float], slow_below: float) -> None:
    """Mark groups below ``slow_below`` x ``reference`` (and failed groups) as slow. Groups
    that failed for want of memory, or because a member failed on its own (``rank_errors``),
    are not: they measured nothing, and the error is that rank's (the report's rank-error)."""
    for g in groups:
        if g.na:
            continue
        # wrong sums are judged as corrupt, a buffer that did not fit as out of memory
        failed = bool(g.error) and not g.wrong and not out_of_memory(g.error) and not g.rank_errors
        g.slow = failed or (reference is not None and g.busbw_gbps is not None
                                   and g.busbw_gbps < slow_below * reference)


def reference_gbps(groups: List[GroupResult]) -> Optional[float]:
    """The cluster's typical busbw: the median of the groups that measured one."""
    return _median([g.busbw_gbps for g in groups if g.busbw_gbps is not None])


def run_rounds(backend, pattern: str, *, seed: int = 0, slow_below: float = DEFAULT_SLOW_BELOW,
               intra: bool = True, on_round: Optional[Callable[[RoundRecord], None]] = None) -> Outcome:
    """Intra-node round, then the inter-node rounds of ``pattern``; stops at lost ranks."""
    out = Outcome(pattern=pattern)
    rng = random.Random(seed)
    nodes = list(range(len(backend.node_names)))

    def record(rec: RoundRecord) -> RoundRecord:
        out.rounds.append(rec)
        if on_round is not None:
            on_round(rec)
        return rec

    def stop_if_stopped(phase: str) -> None:
        stopped = list(getattr(backend, "stopped", None) or [])
        if stopped:
            raise RanksLost(stopped, phase)

    try:
        if intra:
            res = backend.measure_intra()
            ref = reference_gbps(res)
            # an outlier needs a majority to stand out from: with 2 nodes, which is slow is unknown
            mark_slow_groups(res, ref if len(res) >= MIN_NODES_TO_JUDGE else None, slow_below)
            record(RoundRecord(0, "intra", res, ref))
            stop_if_stopped("intra-node round")
        if pattern == "all":
            plan = [[tuple(nodes)]]
        elif pattern == "pairwise":
            plan = round_robin(nodes)
        else:
            plan = [random_pairs(nodes, rng)]
        ref = None
        first: List[GroupResult] = []
        for groups in plan:
            index = len(out.inter_rounds) + 1
            res = backend.measure_round(index, groups)
            first += res
            record(RoundRecord(index, "inter", res))
            stop_if_stopped(f"inter-node round {index}")
        ref = reference_gbps(first)
        for rec in out.inter_rounds:  # judged against the whole first pass, not one round
            rec.reference_gbps = ref
            mark_slow_groups(rec.groups, ref, slow_below)
        if pattern == "random2pass":
            # a group a member failed in measured nothing: its nodes are tried again with nodes
            # that passed (the failed one may fail again; the others get measured)
            suspects = sorted({n for g in first if g.slow or g.rank_errors for n in g.nodes})
            passers = sorted({n for g in first if not g.slow and g.busbw_gbps is not None
                              for n in g.nodes} - set(suspects))
            for groups in second_pass(suspects, passers, rng):
                index = len(out.inter_rounds) + 1
                res = backend.measure_round(index, groups)
                mark_slow_groups(res, ref, slow_below)
                record(RoundRecord(index, "inter", res, ref))
                stop_if_stopped(f"inter-node round {index}")
    except RanksLost as e:
        out.lost, out.lost_phase = e.lost, e.phase
    return out
