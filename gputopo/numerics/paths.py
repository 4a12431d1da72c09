"""Which path the bytes of each way take between two GPUs, from the pair's facts.

- NCCL (DDP's all-reduce; and DataParallel's broadcast / gradient reduce, which PyTorch routes
  through ``torch.cuda.nccl`` when built with NCCL) uses peer-to-peer on NVLink and over PCIe
  up to its P2P level (PXB; SYS on an AMD host with 2 GPUs; NCCL_P2P_LEVEL / NCCL_P2P_DISABLE),
  and only where NVML reports P2P as OK; beyond that it goes through host memory. The rule is
  gputopo.bench.routes.nccl_route, shared with the sim fabric; the CPU vendor is the host's.
- Raw tensor copies (DataParallel's scatter and gather) are peer DMA whenever CUDA allows peer
  access, which it does for any pair whose P2P status is OK (or unknown), whatever the class:
  that is exactly how a broken PCIe P2P path reaches DataParallel and not DDP (docs/architecture.md).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from gputopo.bench.routes import nccl_route
from gputopo.model import LinkClass, Topology
from gputopo.model.values import is_value


def _p2p_ok(p2p: Optional[Dict[str, Any]]) -> bool:
    """P2P allowed unless NVML says otherwise for read or write (unknown counts as allowed)."""
    if not p2p:
        return True
    for cap in ("read", "write"):
        v = p2p.get(cap)
        if is_value(v) and str(v) != "OK":
            return False
    return True


def nccl_path(link_class: LinkClass, p2p: Optional[Dict[str, Any]] = None,
              cpu_vendor=None) -> str:
    """"p2p" or "host": the path NCCL's transport selection takes for the pair in a 2-GPU
    communicator on a ``cpu_vendor`` host (the bench's rule, NCCL_P2P_* included)."""
    return nccl_route(str(link_class), _p2p_ok(p2p), cpu_vendor=cpu_vendor, n_gpus=2)


def copy_path(p2p: Optional[Dict[str, Any]] = None) -> str:
    """"p2p" or "host": a raw copy between the GPUs (peer DMA when peer access is possible)."""
    return "p2p" if _p2p_ok(p2p) else "host"


def pair_paths(topology: Topology, i: int, j: int) -> Dict[str, str]:
    """{"copy": path of raw copies, "nccl": path of NCCL collectives} for GPUs i, j."""
    pair = topology.pair(i, j)
    return {"copy": copy_path(pair.p2p),
            "nccl": nccl_path(pair.link_class, pair.p2p, topology.host.cpu_vendor)}
