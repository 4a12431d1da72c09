"""The ``[cluster]`` keys of a spec, judged on a `gputopo cluster` run: one outcome (JUnit
testcase) per node and per measured node pair, named by host.

- ``min_inter_node_busbw_gbps``: every node pair's inter-node all_reduce busbw (its lowest);
- ``nodes_alike``: no node differs from the majority (``topology-mismatch``);
- ``no_slow_node``: no ``slow-node`` finding names the node, and none says that a group of it
  measured nothing for want of memory (``out-of-memory``) or because its rank failed
  (``rank-error``): unmeasured is not passed.

A run that is not a cluster run (no cluster.json) is refused (exit 2): those keys cannot judge
it, and "skipped" would let the gate pass. So is a cluster run judged by a spec without
``[cluster]`` (a bench spec passed a cluster whose report said "broken").
"""

from __future__ import annotations

from typing import Dict, List

from gputopo.errors import UsageError
from gputopo.report.cluster_view import inter_groups
from gputopo.runfolder.cluster import read_cluster_doc
from gputopo.runfolder.layout import CLUSTER_JSON
from gputopo.report.summary import Summary

from .rules import FAILED, PASSED, SKIPPED, Outcome
from .spec import Spec


def cluster_rules(spec: Spec, s: Summary) -> List[Outcome]:
    asked = [k for k, on in (("cluster.min_inter_node_busbw_gbps", spec.cluster_min_inter_gbps is not None),
                             ("cluster.nodes_alike", spec.cluster_nodes_alike),
                             ("cluster.no_slow_node", spec.cluster_no_slow_node)) if on]
    doc = read_cluster_doc(s.run.path)
    if not asked:
        if doc is not None:  # the mirror case: a bench spec's rules judge nothing of a cluster's rounds
            raise UsageError(f"spec {spec.name} has no [cluster] table, and {s.run.path} is a `gputopo cluster` "
                             "run: none of its node pairs or nodes would be judged, so the gate would pass "
                             "whatever the rounds found; add [cluster] (min_inter_node_busbw_gbps, "
                             "nodes_alike, no_slow_node) to the spec")
        return []
    if doc is None:  # a gate whose rules cannot apply is a wrong gate, not a skipped rule
        raise UsageError(f"spec {spec.name}: its [cluster] table ({', '.join(asked)}) judges a "
                         f"`gputopo cluster` run, and {s.run.path} is not one (no {CLUSTER_JSON}); "
                         "use a spec without [cluster] for this run")
    names = [n["name"] for n in doc.get("nodes", [])]
    out: List[Outcome] = []
    if spec.cluster_min_inter_gbps is not None:
        out += _busbw(spec.cluster_min_inter_gbps, doc, names)
    for key, on, kind in (("cluster.nodes_alike", spec.cluster_nodes_alike, "topology-mismatch"),
                          ("cluster.no_slow_node", spec.cluster_no_slow_node, "slow-node")):
        if on:
            out += _per_node(key, kind, s, names)
    return out


def _busbw(limit: float, doc, names) -> List[Outcome]:
    rule = "cluster.min_inter_node_busbw_gbps"
    lowest: Dict[str, dict] = {}  # node pair -> its slowest group record
    for g in inter_groups(doc):
        subject = "-".join(names[n] for n in sorted(g["nodes"]))
        prev = lowest.get(subject)
        if prev is None or (g.get("busbw_gbps") or 0) < (prev.get("busbw_gbps") or 0):
            lowest[subject] = g
    if not lowest:
        return [Outcome(rule, "cluster", SKIPPED, "no inter-node group was measured")]
    out = []
    for subject, g in sorted(lowest.items()):
        v = g.get("busbw_gbps")
        ok = v is not None and v >= limit
        msg = (f"nodes {subject}: inter-node busbw {v:.1f} GB/s ({g.get('timing')}), minimum {limit:g}"
               if v is not None else f"nodes {subject}: not measured ({g.get('error') or g.get('na')})")
        out.append(Outcome(rule, subject, PASSED if ok else FAILED, msg,
                           evidence={"busbw_gbps": v, "min_gbps": limit, "timing": g.get("timing"),
                                     "error": g.get("error")}))
    return out


def _per_node(rule: str, kind: str, s: Summary, names) -> List[Outcome]:
    # unmeasured is not passed: a buffer that did not fit, a rank that failed on its own
    kinds = (kind, "out-of-memory", "rank-error") if kind == "slow-node" else (kind,)
    out = []
    for name in names:
        bad = [f for f in s.findings if f.kind in kinds and _names(f, name)]
        out.append(Outcome(rule, name, FAILED if bad else PASSED,
                           bad[0].message if bad else f"node {name}: no {kind} finding",
                           evidence=dict(bad[0].evidence) if bad else {}))
    return out


def _names(f, name: str) -> bool:
    """Whether finding ``f`` is about node ``name`` (an out-of-memory group of two nodes names
    both in ``evidence.nodes``)."""
    ev = f.evidence or {}
    return ev.get("node") == name or (f.kind == "out-of-memory" and name in (ev.get("nodes") or []))
