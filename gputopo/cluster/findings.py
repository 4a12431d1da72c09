"""Findings of a cluster run, named by host: ``slow-node``, a slow inter-node link (``slow``),
``hang`` / ``crash`` for lost ranks (host and rank), ``out-of-memory`` for groups whose message
did not fit (never a drain reason), and the drain list a Slurm admin can use.

Node findings carry ``evidence.node`` (the hostname) and ``evidence.ranks``; a slow link carries
``evidence.nodes`` (both hosts). ``gpus`` stays None: GPU indices are per machine.
"""

from __future__ import annotations

from typing import Dict, List, Optional

from gputopo.model import Finding
from gputopo.report.cluster_view import gbps_text

from .rounds import LostRank, Outcome, out_of_memory
from .triangulation import Verdicts

#: Finding kinds that put a node on the drain list.
DRAIN_KINDS = ("slow-node", "hang", "crash", "topology-mismatch", "corrupt")


def _gbps(v: Optional[float]) -> str:
    return f"{gbps_text(v)} GB/s" if v is not None else "n/a"


def slow_findings(v: Verdicts, names: List[str], ranks: List[List[int]], slow_below: float) -> List[Finding]:
    out = []
    ref = v.reference_gbps
    for k, t in sorted(v.slow_nodes.items()):
        partners = sorted({names[p] for p in t.partners_slow})
        low = min(t.busbw_gbps) if t.busbw_gbps else None
        out.append(Finding(
            "slow-node", "error",
            f"node {names[k]} is slow with {t.slow} of {t.tests} partners ({', '.join(partners[:5])}"
            f"{', ...' if len(partners) > 5 else ''}): inter-node busbw down to {_gbps(low)}, the "
            f"cluster's median is {_gbps(ref)}",
            evidence={"node": names[k], "ranks": ranks[k], "phase": "inter-node", "tests": t.tests,
                      "slow_tests": t.slow, "busbw_gbps": t.busbw_gbps, "reference_gbps": ref,
                      "slow_below": slow_below, "partners_slow": partners}))
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
        out.append(Finding(
            "slow", "warning",
            f"nodes {' and '.join(hosts)} together: inter-node busbw {_gbps(g.busbw_gbps)}, the "
            f"cluster's median is {_gbps(ref)}; {how}",
            evidence={"nodes": hosts, "busbw_gbps": g.busbw_gbps, "reference_gbps": ref,
                      "resolved": resolved, "error": g.error, "timing": g.timing}))
    return out


def corrupt_findings(outcome: Outcome, names: List[str]) -> List[Finding]:
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
    neither slow nor fast, and the gate must not pass their nodes as checked."""
    out = []
    for r in outcome.rounds:
        for g in r.groups:
            if not out_of_memory(g.error):
                continue
            hosts = [names[n] for n in g.nodes]
            one = len(hosts) == 1
            out.append(Finding(
                "out-of-memory", "error",
                f"{'node' if one else 'nodes'} {', '.join(hosts)}: the all_reduce's "
                f"{g.size_bytes:,}-byte message could not be allocated ({r.phase}-node round "
                f"{r.index}), so nothing was measured there: {g.error}",
                evidence={"node" if one else "nodes": hosts[0] if one else hosts, "round": r.index,
                          "phase": r.phase, "size_bytes": g.size_bytes, "error": g.error},
                cause="host or GPU memory was taken by other processes after the run checked "
                      "that the message fits; this says nothing about the node's speed or links",
                remedies=["rerun with a smaller --size", "free the memory other processes hold "
                          "on these nodes (`nvidia-smi`, `free -g`)"]))
    return out


def lost_findings(outcome: Outcome) -> List[Finding]:
    by_node: Dict[tuple, List[LostRank]] = {}
    for r in outcome.lost:
        by_node.setdefault((r.node, r.state), []).append(r)
    out = []
    for (node, state), rs in sorted(by_node.items()):
        ranks = sorted(r.rank for r in rs)
        what = "stopped answering (hung)" if state == "hang" else "is gone (crashed, killed or stopped)"
        out.append(Finding(
            state, "error",
            f"node {node} rank(s) {','.join(map(str, ranks))} {what} during {outcome.lost_phase}",
            evidence={"node": node, "ranks": ranks, "phase": outcome.lost_phase,
                      "messages": sorted({r.message for r in rs if r.message})[:3]}))
    return out


def drain_lines(findings: List[Finding]) -> List[str]:
    """``host reason`` per node with a drain-worthy finding (one line per host, first reason)."""
    seen: Dict[str, str] = {}
    for f in findings:
        node = (f.evidence or {}).get("node")
        if f.kind in DRAIN_KINDS and node and node not in seen:
            seen[node] = f"gputopo {f.kind}: {f.message}".replace("\n", " ")
    return [f"{node} {reason}" for node, reason in sorted(seen.items())]
