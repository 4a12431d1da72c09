"""Findings of a cluster run, named by host, from its records (model/cluster.py: the rounds'
groups, the ranks lost) and its nodes' fingerprints: ``slow-node``, a slow inter-node link
(``slow``), ``corrupt`` sums, ``hang`` / ``crash`` for lost ranks (host and rank), ``rank-error``
for a rank that failed on its own (its peers only waited for it), ``out-of-memory`` for a rank
whose message did not fit (never a drain reason), ``stopped`` for a rank a signal stopped (never
a drain reason), ``topology-mismatch`` for a node that differs from the majority; and the drain
list a Slurm admin can use. The cluster measures (gputopo/cluster, each group marked slow or not
against its round's reference as the rounds go); this module judges: which node or link the slow
groups point at (triangulation), and every finding.

Node findings carry ``evidence.node`` (the hostname) and ``evidence.ranks``; a slow link carries
``evidence.nodes`` (both hosts). ``gpus`` stays None: GPU indices are per machine.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from gputopo.model import Finding
from gputopo.model.finding_kinds import drains
from gputopo.model.reason import findings_reason
from gputopo.model.cluster import GroupResult, LostRank, Outcome, out_of_memory

from .cluster_view import gbps_text



def _gbps(v: Optional[float]) -> str:
    return f"{gbps_text(v)} GB/s" if v is not None else "n/a"


def slow_node_findings(v: Verdicts, names: List[str], ranks: List[List[int]], slow_below: float) -> List[Finding]:
    out = []
    ref = v.reference_gbps
    for k, t in sorted(v.slow_nodes.items()):
        partners = sorted({names[p] for p in t.partners_slow})
        low = min(t.busbw_gbps) if t.busbw_gbps else None
        failed = (f"; {len(t.errors)} of them failed ({t.errors[0]})" if t.errors else "")
        out.append(Finding(
            "slow-node", "error",
            f"node {names[k]} is slow with {t.slow} of {t.tests} partners ({', '.join(partners[:5])}"
            f"{', ...' if len(partners) > 5 else ''}): inter-node busbw down to {_gbps(low)}, the "
            f"cluster's median is {_gbps(ref)}{failed}",
            evidence={"node": names[k], "ranks": ranks[k], "phase": "inter-node", "tests": t.tests,
                      "slow_tests": t.slow, "busbw_gbps": t.busbw_gbps, "reference_gbps": ref,
                      "slow_below": slow_below, "partners_slow": partners, "errors": t.errors[:3]}))
    for g in v.intra_slow:
        k = g.nodes[0]
        out.append(Finding(
            "slow-node", "error",
            f"node {names[k]}: intra-node all_reduce busbw {_gbps(g.busbw_gbps)} over its "
            f"{g.gpus} GPUs" + (f" failed: {g.error}" if g.error else ", below the nodes' median"),
            evidence={"node": names[k], "ranks": ranks[k], "phase": "intra-node",
                      "busbw_gbps": g.busbw_gbps, "error": g.error, "timing": g.timing}))
    for g, resolved in v.slow_links:
        hosts = [names[n] for n in g.nodes]
        how = ("each node is fast with other partners: the link between them" if resolved else
               "could not be told apart from a slow node (no node passed to pair them with)")
        failed = f" (the all_reduce failed: {g.error})" if g.error else ""
        out.append(Finding(
            "slow", "warning",
            f"nodes {' and '.join(hosts)} together: inter-node busbw {_gbps(g.busbw_gbps)}{failed}, the "
            f"cluster's median is {_gbps(ref)}; {how}",
            evidence={"nodes": hosts, "busbw_gbps": g.busbw_gbps, "reference_gbps": ref,
                      "resolved": resolved, "error": g.error, "timing": g.timing}))
    return out


def wrong_sum_findings(outcome: Outcome, names: List[str]) -> List[Finding]:
    """Groups whose all_reduce gave wrong sums (checked on every rank, every sample)."""
    out = []
    for r in outcome.rounds:
        for g in r.groups:
            if g.wrong:
                hosts = [names[n] for n in g.nodes]
                out.append(Finding(
                    "corrupt", "error",
                    f"{'node' if len(hosts) == 1 else 'nodes'} {', '.join(hosts)}: {g.wrong} wrong "
                    f"element(s) after all_reduce ({r.phase}-node round {r.index})",
                    evidence={"node" if len(hosts) == 1 else "nodes": hosts[0] if len(hosts) == 1 else hosts,
                              "wrong": g.wrong, "round": r.index, "size_bytes": g.size_bytes}))
    return out


def memory_findings(outcome: Outcome, names: List[str]) -> List[Finding]:
    """Groups whose all_reduce buffer could not be allocated: measured nothing, so they are
    neither slow nor fast, and the gate must not pass their nodes as checked. Named by the node
    whose rank could not allocate (``rank_errors``); a group without that record names its nodes."""
    return [f for f in rank_error_findings(outcome, names) if f.kind == "out-of-memory"]


def _memory_finding(hosts: List[str], ranks: List[int], rounds: List[str], size_bytes: int,
                    errors: List[str], peers: List[str]) -> Finding:
    one = len(hosts) == 1
    who = f"{'node' if one else 'nodes'} {', '.join(hosts)}" + (f" rank(s) {','.join(map(str, ranks))}" if ranks else "")
    also = f"; its group with {', '.join(peers)} measured nothing there" if peers else ""
    return Finding(
        "out-of-memory", "error",
        f"{who}: the all_reduce's {size_bytes:,}-byte message could not be allocated "
        f"({', '.join(rounds)}), so nothing was measured there{also}: {errors[0]}",
        evidence={"node" if one else "nodes": hosts[0] if one else hosts, "ranks": ranks,
                  "rounds": rounds, "size_bytes": size_bytes, "error": errors[0], "errors": errors[:3],
                  "waited": peers},
        cause="host or GPU memory was taken by other processes after the run checked "
              "that the message fits; this says nothing about the node's speed or links",
        remedies=["rerun with a smaller --size", "free the memory other processes hold "
                  "on these nodes (`nvidia-smi`, `free -g`)"])


def rank_error_findings(outcome: Outcome, names: List[str]) -> List[Finding]:
    """A rank that failed on its own (``GroupResult.rank_errors``): its error is its node's
    finding, ``out-of-memory`` when its buffer did not fit, else ``rank-error``; the nodes that
    only waited for it are named as having measured nothing there, never as failed. One finding
    per node and kind, over every round it failed in."""
    acc: Dict[tuple, Dict[str, Any]] = {}
    out: List[Finding] = []
    for r in outcome.rounds:
        where = f"{r.phase}-node round {r.index}"
        for g in r.groups:
            hosts = [names[n] for n in g.nodes]
            if not g.rank_errors:
                if out_of_memory(g.error):  # a record without the failing rank: its nodes
                    out.append(_memory_finding(hosts, [], [where], g.size_bytes, [g.error or ""], []))
                continue
            failed = {str(e.get("node")) for e in g.rank_errors}
            for e in g.rank_errors:
                err = str(e.get("error") or "")
                kind = "out-of-memory" if out_of_memory(err) else "rank-error"
                a = acc.setdefault((kind, str(e.get("node"))), {"ranks": set(), "rounds": [], "errors": [],
                                                                  "peers": set(), "size": g.size_bytes})
                a["ranks"].add(int(e.get("rank", -1)))
                if where not in a["rounds"]:
                    a["rounds"].append(where)
                if err not in a["errors"]:
                    a["errors"].append(err)
                a["peers"].update(h for h in hosts if h not in failed)
    for (kind, node), a in sorted(acc.items()):
        ranks, peers = sorted(a["ranks"]), sorted(a["peers"])
        if kind == "out-of-memory":
            out.append(_memory_finding([node], ranks, a["rounds"], a["size"], a["errors"], peers))
            continue
        also = (f"; its group with {', '.join(peers[:5])}{', ...' if len(peers) > 5 else ''} measured "
                "nothing there (they waited for it)") if peers else ""
        out.append(Finding(
            "rank-error", "error",
            f"node {node} rank(s) {','.join(map(str, ranks))} failed in {', '.join(a['rounds'])}: "
            f"{a['errors'][0]}{also}",
            evidence={"node": node, "ranks": ranks, "rounds": a["rounds"], "errors": a["errors"][:3],
                      "waited": peers},
            cause="the rank's own all_reduce failed (its message in the run folder's "
                  "ranks/<node>-rank<N>.jsonl); the ranks that waited for it are not blamed",
            remedies=["read the error above: a NIC or GPU that fails NCCL setup, a driver error",
                      "rerun the node with a known-good partner (gputopo cluster on those two nodes)"]))
    return out


def lost_findings(outcome: Outcome) -> List[Finding]:
    by_node: Dict[tuple, List[LostRank]] = {}
    for r in outcome.lost:
        by_node.setdefault((r.node, r.state), []).append(r)
    out = []
    for (node, state), rs in sorted(by_node.items()):
        ranks = sorted(r.rank for r in rs)
        what = {"hang": "stopped answering (hung)",
                "stopped": "was stopped by a signal (its launcher or a user: "
                           f"{', '.join(sorted({r.message for r in rs if r.message}))}); the run is "
                           "partial, and the node is not blamed for it"}.get(
            state, "is gone (crashed, killed or stopped)")
        out.append(Finding(
            state, "error",
            f"node {node} rank(s) {','.join(map(str, ranks))} {what} during {outcome.lost_phase}",
            evidence={"node": node, "ranks": ranks, "phase": outcome.lost_phase,
                      "messages": sorted({r.message for r in rs if r.message})[:3]}))
    return out


def drain_lines(findings: List[Finding]) -> List[str]:
    """``host reason`` per node with a drain-worthy finding: the reason in the one grammar
    (model/reason.py: ``gputopo: <kind> <subject> <detail>``, the worst first, ``; +N more``)."""
    by_node: Dict[str, List[Finding]] = {}
    for f in findings:
        node = (f.evidence or {}).get("node")
        if drains(f.kind) and node:
            by_node.setdefault(str(node), []).append(f)
    return [f"{node} {findings_reason(fs, default_subject='node')}" for node, fs in sorted(by_node.items())]


# ----------------------------------------------------------------------------- slow node or slow link

# Slow node or slow link? Told apart by who was slow with whom.
#
# A node that is slow with most of its partners (and at least two different ones) is a slow node;
# a group that was slow while each of its nodes was fast with someone else is a slow link between
# those nodes. A slow group whose nodes could not be tested again (no node passed to pair them
# with) stays unresolved: it is reported as a slow pair, and says it could not be told apart.


@dataclass
class NodeTally:
    tests: int = 0
    slow: int = 0
    partners_slow: List[int] = field(default_factory=list)
    busbw_gbps: List[float] = field(default_factory=list)
    #: why its slow groups that measured nothing failed (a collective or an NCCL set-up that
    #: did not finish within --timeout, naming the ranks and hosts)
    errors: List[str] = field(default_factory=list)


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
                if g.error:
                    t.errors.append(g.error)
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


# ----------------------------------------------------------------------------- nodes that differ

#: Fields of a node's fingerprint (cluster/fingerprint.py) compared across nodes, in the order
#: findings name them.
FIELDS = ("gpu_count", "gpu_model", "matrix", "nvlinks_active", "driver", "cuda", "nccl", "torch",
          "nics")


def differing(fingerprints: List[Dict[str, Any]]) -> Dict[int, Dict[str, Dict[str, Any]]]:
    """node index -> field -> {"value", "majority"} for every field where the node differs from
    the value most nodes have (no majority with fewer than 3 nodes: nothing is flagged then,
    unless the counts differ: with two nodes, which one is wrong cannot be told)."""
    out: Dict[int, Dict[str, Dict[str, Any]]] = {}
    if len(fingerprints) < 3:
        return out
    for name in FIELDS:
        values = [_key(fp.get(name)) for fp in fingerprints]
        top, count = Counter(values).most_common(1)[0]
        if count * 2 <= len(values):
            continue  # no majority: nothing to compare against
        for k, v in enumerate(values):
            if v != top:
                out.setdefault(k, {})[name] = {"value": fingerprints[k].get(name),
                                               "majority": _majority_value(fingerprints, name, top)}
    return out


def _key(v: Any) -> str:
    return ",".join(map(str, v)) if isinstance(v, list) else str(v)


def _majority_value(fps, name, key) -> Any:
    return next(fp.get(name) for fp in fps if _key(fp.get(name)) == key)


def mismatch_findings(node_names: List[str], fingerprints: List[Dict[str, Any]],
                      ranks: Optional[List[List[int]]] = None) -> List[Finding]:
    out = []
    for k, diffs in sorted(differing(fingerprints).items()):
        parts = [f"{f} {_short(d['value'])} (most nodes: {_short(d['majority'])})" for f, d in diffs.items()]
        out.append(Finding(
            "topology-mismatch", "error",
            f"node {node_names[k]} differs from the majority: " + "; ".join(parts),
            evidence={"node": node_names[k], "ranks": (ranks[k] if ranks else None),
                      "differs": diffs}))
    return out


def _short(v: Any) -> str:
    s = _key(v)
    return s if len(s) <= 60 else s[:57] + "..."
