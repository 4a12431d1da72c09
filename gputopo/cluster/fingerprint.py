"""A node's fingerprint (software versions, NICs, topology) and the nodes that differ from the
majority: the ``topology-mismatch`` findings of a cluster run, named by hostname.

The fingerprint is plain JSON so it travels through ``all_gather_object``. Values that could not
be read are the text ``"n/a: <reason>"`` (never a silent empty value), and are compared like any
other value: a node whose driver cannot be read differs from nodes whose driver can.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any, Dict, List, Optional

from gputopo.model import Finding, Topology, is_value

#: Fields compared across nodes, in the order findings name them.
FIELDS = ("gpu_count", "gpu_model", "matrix", "nvlinks_active", "driver", "cuda", "nccl", "torch",
          "nics")


def _text(v: Any, what: str) -> str:
    return str(v) if is_value(v) and v not in (None, "") else f"n/a: {what} not read"


def topology_facts(topo: Topology) -> Dict[str, Any]:
    """The topology part: GPU count and model, the pair matrix as text, active NVLinks."""
    models = sorted({str(g.name) for g in topo.gpus if is_value(g.name)})
    matrix = " ".join(f"{i}-{j}:{p.link_class}" for p in sorted(topo.pairs, key=lambda p: p.gpus)
                      for i, j in [p.gpus])
    links = sum(1 for g in topo.gpus for nl in g.nvlinks if nl.active is True)
    host = topo.host
    return {"gpu_count": len(topo.gpus), "gpu_model": ",".join(models) or "n/a: no GPU name",
            "matrix": matrix, "nvlinks_active": links,
            "driver": _text(getattr(host, "driver_version", None), "driver version")}


def local_nics(root: str = "/") -> List[str]:
    """Network interfaces of this host (``/sys/class/net`` without ``lo``, and InfiniBand HCAs)."""
    names: List[str] = []
    for sub in ("sys/class/net", "sys/class/infiniband"):
        try:
            names += [n for n in os.listdir(os.path.join(root, sub)) if n != "lo"]
        except OSError:
            continue
    return sorted(names)


def software_facts() -> Dict[str, Any]:
    """torch, CUDA and NCCL versions as this process's torch sees them (torch is imported)."""
    import torch

    nccl = "n/a: no CUDA"
    if torch.cuda.is_available():
        try:
            v = torch.cuda.nccl.version()
            nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        except Exception as e:  # noqa: BLE001 - a build without NCCL says so
            nccl = f"n/a: {e}"
    return {"torch": torch.__version__, "cuda": torch.version.cuda or "n/a: CPU build of torch",
            "nccl": nccl}


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
