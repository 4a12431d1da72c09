"""Slow node or slow link? Told apart by who was slow with whom.

A node that is slow with most of its partners (and at least two different ones) is a slow node;
a group that was slow while each of its nodes was fast with someone else is a slow link between
those nodes. A slow group whose nodes could not be tested again (no node passed to pair them
with) stays unresolved: it is reported as a slow pair, and says it could not be told apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from .rounds import GroupResult, Outcome


@dataclass
class NodeTally:
    tests: int = 0
    slow: int = 0
    partners_slow: List[int] = field(default_factory=list)
    busbw_gbps: List[float] = field(default_factory=list)


@dataclass
class Verdicts:
    slow_nodes: Dict[int, NodeTally]  # node -> its tally
    slow_links: List[Tuple[GroupResult, bool]]  # (group, resolved: told apart from a slow node)
    intra_slow: List[GroupResult]
    tallies: Dict[int, NodeTally]
    reference_gbps: Optional[float]


def triangulate(outcome: Outcome, n_nodes: int) -> Verdicts:
    tallies = {k: NodeTally() for k in range(n_nodes)}
    # a group that measured nothing (a member's own error, a buffer that did not fit) is no
    # test of its nodes: counted, it would read as "fast with that partner"
    inter = [g for r in outcome.inter_rounds for g in r.groups
             if not g.na and (g.slow or g.busbw_gbps is not None)]
    for g in inter:
        for n in g.nodes:
            t = tallies[n]
            t.tests += 1
            if g.busbw_gbps is not None:
                t.busbw_gbps.append(g.busbw_gbps)
            if g.slow:
                t.slow += 1
                t.partners_slow += [m for m in g.nodes if m != n]
    slow_nodes = {n: t for n, t in tallies.items()
                  if t.slow >= 2 and len(set(t.partners_slow)) >= 2 and t.slow * 2 > t.tests}
    links = []
    for g in inter:
        if not g.slow or any(n in slow_nodes for n in g.nodes):
            continue
        resolved = all(tallies[n].tests > tallies[n].slow for n in g.nodes)
        links.append((g, resolved))
    intra = [g for r in outcome.rounds if r.phase == "intra" for g in r.groups if g.slow]
    ref = outcome.inter_rounds[0].reference_gbps if outcome.inter_rounds else None
    return Verdicts(slow_nodes=slow_nodes, slow_links=links, intra_slow=intra, tallies=tallies,
                    reference_gbps=ref)
