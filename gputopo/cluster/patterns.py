"""Which nodes meet in which round: the patterns of `gputopo cluster --pattern`, and `--plan`.

A round is a list of disjoint *groups* of node indices; every group runs one all_reduce over
all the GPUs of its nodes at the same time as the other groups of the round.

- ``random2pass`` (default): round 1 pairs the nodes at random; a node whose group was slow is
  a *suspect*, and round 2 pairs each suspect with a different node that passed. A node slow
  with two different partners is a slow node; a pair slow together but fast with others is a
  slow link. Two rounds for any number of nodes (more only when suspects outnumber passers).
- ``pairwise``: round-robin (the circle method), N-1 rounds of disjoint pairs for even N, N for
  odd N: the full node-by-node matrix.
- ``all``: one whole-job all_reduce (one round; it says how fast, not which node).

Odd node counts leave no node untested: random pairing puts the odd node into a group of three;
round-robin gives each node one bye and pairs it in every other round.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import List, Optional, Sequence

from gputopo.errors import UsageError
from gputopo.model.cluster import Group
from gputopo.model.collectives import collective

PATTERNS = ("random2pass", "pairwise", "all")
Round = List[Group]


def parse_pattern(text: str) -> str:
    if text not in PATTERNS:
        raise UsageError(f"--pattern {text!r}: known patterns: {', '.join(PATTERNS)}")
    return text


def random_pairs(nodes: Sequence[int], rng: random.Random) -> Round:
    """Disjoint random pairs of ``nodes``; with an odd count the last group has three nodes."""
    order = list(nodes)
    rng.shuffle(order)
    groups: Round = [tuple(order[k:k + 2]) for k in range(0, len(order) - 1, 2)]
    if len(order) % 2:
        if groups:
            groups[-1] = groups[-1] + (order[-1],)
        else:
            groups = [(order[-1],)]
    return [tuple(sorted(g)) for g in groups]


def round_robin(nodes: Sequence[int]) -> List[Round]:
    """Every pair of ``nodes`` exactly once, in rounds of disjoint pairs (circle method)."""
    ring: List[Optional[int]] = list(nodes)
    if len(ring) < 2:
        return []
    if len(ring) % 2:
        ring.append(None)  # the bye
    n = len(ring)
    rounds: List[Round] = []
    for _ in range(n - 1):
        pairs = [(ring[k], ring[n - 1 - k]) for k in range(n // 2)]
        rounds.append([(min(a, b), max(a, b)) for a, b in pairs if a is not None and b is not None])
        ring = [ring[0], ring[-1]] + ring[1:-1]
    return rounds


def second_pass(suspects: Sequence[int], passers: Sequence[int], rng: random.Random) -> List[Round]:
    """Pair each suspect with a different passer; as many rounds as suspects need passers."""
    suspects, passers = list(suspects), list(passers)
    if not suspects or not passers:
        return []
    rng.shuffle(passers)
    rounds: List[Round] = []
    for start in range(0, len(suspects), len(passers)):
        chunk = suspects[start:start + len(passers)]
        rounds.append([tuple(sorted((s, passers[k]))) for k, s in enumerate(chunk)])
    return rounds


@dataclass
class PlanEstimate:
    """What `gputopo cluster --plan` prints: rounds and an estimate of their time."""

    nodes: int
    pattern: str
    rounds: int
    groups_per_round: int
    round_s: float
    assumed_gbps: float
    note: str

    @property
    def total_s(self) -> float:
        return self.rounds * self.round_s

    def lines(self) -> List[str]:
        return [
            f"cluster plan: {self.nodes} nodes, pattern {self.pattern}",
            f"  rounds: {self.rounds} ({self.groups_per_round} group(s) per round at once)",
            f"  estimated time: {self.total_s:.1f} s (about {self.round_s:.2f} s per round, all GPUs "
            f"then one GPU per node: modeled at {self.assumed_gbps:g} GB/s inter-node busbw, "
            f"{SAMPLE_HOLD_S * 1e3:g} ms hold per sample and group setup; an estimate)",
            f"  {self.note}",
        ]


#: Seconds per round for making the round's process groups and the liveness barrier (estimate).
SETUP_S = 0.5
#: Seconds each timed sample (and the warm-up) holds the GPU's stream before its gate on a real
#: (cuda) cluster: the first hold of cluster/dist_backend.py (HOLD_S), the least a sample costs
#: besides the all_reduce itself. Kept here as a number so --plan imports no torch-side module;
#: tests/unit/cluster/test_cluster_sim.py checks the two agree.
SAMPLE_HOLD_S = 0.001


def plan(nodes: int, pattern: str, *, size_bytes: int, samples: int, gbps: float,
         latency_us: float = 5.0) -> PlanEstimate:
    """Rounds and estimated time of ``pattern`` on ``nodes`` nodes (random2pass: with one
    suspect pair, i.e. the two rounds it takes when at most half the nodes are suspects).
    Each sample costs its all_reduce (latency + bytes over ``gbps``) plus the hold before its
    gate (SAMPLE_HOLD_S), the warm-up as much again."""
    if nodes < 2:
        raise UsageError("--nodes: a cluster run needs at least 2 nodes")
    pattern = parse_pattern(pattern)
    group_n = 2
    if pattern == "random2pass":
        rounds, groups, note = 2, nodes // 2, ("random2pass: 1 round when no group is slow, "
                                               "2 when at most half the nodes are suspects")
    elif pattern == "pairwise":
        # round_robin's count without building its N^2/2 pairs (a bye makes an odd N take N rounds)
        rounds, groups = (nodes - 1 if nodes % 2 == 0 else nodes), nodes // 2
        note = "pairwise: every node pair once (the full node matrix)"
    else:
        rounds, groups, group_n = 1, 1, nodes
        note = "all: one whole-job all_reduce; says how fast, not which node is slow"
    factor = collective("all_reduce").busbw_factor(group_n)
    one = SAMPLE_HOLD_S + latency_us * 1e-6 * 2 * (group_n - 1) + size_bytes * factor / (gbps * 1e9)
    # each inter-node round measures twice: all GPUs of the nodes, then one GPU per node
    return PlanEstimate(nodes=nodes, pattern=pattern, rounds=rounds, groups_per_round=groups,
                        round_s=2 * (SETUP_S + (samples + 1) * one), assumed_gbps=gbps, note=note)
