"""A node's fingerprint (software versions, NICs, topology): the facts each node reports, which
the report compares across nodes (report/cluster_findings.py: a node that differs from the
majority is a ``topology-mismatch``, named by hostname).

The fingerprint is plain JSON so it travels through ``all_gather_object``. Values that could not
be read are the text ``"n/a: <reason>"`` (never a silent empty value), and are compared like any
other value: a node whose driver cannot be read differs from nodes whose driver can.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List

from gputopo.model import Topology, is_value


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
