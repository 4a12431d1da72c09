"""Which path NCCL takes between two GPUs: the one rule the sim fabric and the numerics share.

NCCL uses peer-to-peer over NVLink and over PCIe up to ``NCCL_P2P_LEVEL`` (default PXB), and
only where P2P is possible at all; ``NCCL_P2P_DISABLE=1`` sends everything through host memory.
Beyond that level it stages through host memory, which is why a broken PCIe P2P path across the
sockets spares DDP while it corrupts DataParallel's raw peer copies (DESIGN.md). No torch here.
"""

from __future__ import annotations

import os
from typing import Mapping, Optional

#: NCCL_P2P_LEVEL names -> the farthest PCIe class still using P2P (LOC: none, not even NVLink).
NCCL_LEVELS = {"LOC": -1, "NVL": 0, "PIX": 1, "PXB": 2, "PHB": 3, "SYS": 5}
#: PCIe classes by distance, as NCCL_P2P_LEVEL compares them.
PCIE_ORDER = {"PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5}


def nccl_route(link_class: str, peer_ok: bool, env: Optional[Mapping[str, str]] = None) -> str:
    """"p2p" or "host" for a pair of class ``link_class`` ("NV4", "PXB", ...) whose P2P status
    allows peer access (``peer_ok``), under the NCCL settings in ``env`` (default: os.environ)."""
    env = os.environ if env is None else env
    if str(env.get("NCCL_P2P_DISABLE", "0")).strip().lower() in ("1", "true", "yes") or not peer_ok:
        return "host"
    level = str(env.get("NCCL_P2P_LEVEL", "PXB")).strip().upper()
    if str(link_class).startswith("NV"):
        return "host" if level == "LOC" else "p2p"
    return "p2p" if PCIE_ORDER.get(str(link_class), 9) <= NCCL_LEVELS.get(level, 2) else "host"
