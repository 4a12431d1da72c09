"""Which path NCCL takes between two GPUs: the one rule the sim fabric, the numerics and the
report's causes share. Written from NCCL's ``ncclTopoCheckP2p`` / ``ncclGetLevel``
(src/graph/paths.cc, NCCL 2.23 to 2.30). No torch here.

- NCCL compares the pair's *path type* with a P2P level. Path types, nearest first: LOC 0, NVL 1,
  NVB 2, C2C 3, PIX 4, PXB 5, P2C 6, PXN 7, PHB 8, SYS 9. NCCL has no NODE: host bridges of one
  NUMA node are folded into its CPU node, so nvidia-smi's NODE is NCCL's PHB.
- Default level: PXB. On an x86 AMD CPU with at most 2 GPUs in the communicator it is SYS (P2P
  across the root complex and the sockets). Before NCCL 2.23 the default was SYS, lowered to PXB
  on Intel x86, ARM and Zhaoxin (``nccl_version`` selects that rule).
- ``NCCL_P2P_DISABLE=1`` (read with strtol: exactly the number 1) is level LOC: no P2P at all,
  not even NVLink. Otherwise ``NCCL_P2P_LEVEL`` names a level (LOC, NVL, NVB, C2C, PIX, PXB,
  P2C, PXN, PHB, SYS; case matters, as strcmp) or gives an old number (0 LOC, 1 PIX, 2 PXB,
  3 PHB, 4 and above SYS); anything else is ignored. The user's level replaces the default.
- P2P is used when the path type is at most the level and NVML says P2P read and write are OK
  (``peer_ok``); else NCCL goes through host memory (SHM). This is why a broken PCIe P2P path
  spares DDP on an Intel host while it corrupts DataParallel's raw peer copies (docs/architecture.md).
"""

from __future__ import annotations

import os
import re
from typing import Mapping, Optional, Sequence, Tuple

#: NCCL's path type names, in order (topoPathTypeStr[] in src/graph/topo.cc).
PATH_TYPES = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS")
PATH = {name: k for k, name in enumerate(PATH_TYPES)}
#: Old NCCL_P2P_LEVEL numbers -> path type (levelsOldToNew[]).
_OLD_LEVELS = (PATH["LOC"], PATH["PIX"], PATH["PXB"], PATH["PHB"], PATH["SYS"], PATH["SYS"])
#: nvidia-smi class -> NCCL path type between two GPUs.
_CLASS_PATH = {"PIX": PATH["PIX"], "PXB": PATH["PXB"], "PHB": PATH["PHB"], "NODE": PATH["PHB"],
               "SYS": PATH["SYS"]}
#: NCCL version that made PXB the default (2.23.4: "Allow P2P between pairs of GPUs on AMD").
_NEW_RULE = (2, 23)


def _strtol(text: str) -> Optional[int]:
    """C strtol(text, NULL, 0) for the leading number; None when there is none."""
    m = re.match(r"\s*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)", text)
    if not m:
        return None
    digits = m.group(2)
    base = 16 if digits[:2].lower() == "0x" else (8 if digits.startswith("0") and len(digits) > 1 else 10)
    value = int(digits, base)
    return -value if m.group(1) == "-" else value


def user_p2p_level(env: Mapping[str, str]) -> Optional[Tuple[int, str]]:
    """(path type, why) that the user's NCCL_P2P_DISABLE / NCCL_P2P_LEVEL set, or None."""
    disable = env.get("NCCL_P2P_DISABLE")
    if disable is not None and _strtol(disable) == 1:
        return PATH["LOC"], "NCCL_P2P_DISABLE=1"
    level = env.get("NCCL_P2P_LEVEL")
    if level is None:
        return None
    if level in PATH:
        return PATH[level], f"NCCL_P2P_LEVEL={level}"
    if level[:1].isdigit():
        old = _strtol(level) or 0
        return _OLD_LEVELS[min(old, len(_OLD_LEVELS) - 1)], f"NCCL_P2P_LEVEL={level}"
    return None  # NCCL ignores a level it does not know


def p2p_level(cpu_vendor=None, n_gpus: int = 2, env: Optional[Mapping[str, str]] = None,
              nccl_version: Optional[Sequence[int]] = None) -> Tuple[int, str]:
    """(the farthest path type NCCL still uses P2P over, why) for a communicator of ``n_gpus``
    GPUs on a host whose CPU vendor is ``cpu_vendor`` ("intel", "amd", "zhaoxin", "arm", ...;
    anything else, NotAvailable included, counts as unknown)."""
    env = os.environ if env is None else env
    vendor = cpu_vendor if isinstance(cpu_vendor, str) else None
    if nccl_version is not None and tuple(nccl_version)[:2] < _NEW_RULE:
        if vendor in ("intel", "zhaoxin", "arm"):
            level, why = PATH["PXB"], f"NCCL < 2.23 default on {vendor} CPUs"
        else:
            level, why = PATH["SYS"], f"NCCL < 2.23 default on {vendor or 'unknown'} CPUs"
    elif vendor == "amd" and n_gpus <= 2:
        level, why = PATH["SYS"], "NCCL default on AMD x86 with at most 2 GPUs"
    else:
        level, why = PATH["PXB"], (f"NCCL default on {vendor} CPUs" if vendor
                                   else "NCCL default (CPU vendor unknown)")
    user = user_p2p_level(env)
    return user if user is not None else (level, why)


def path_type(link_class: str) -> int:
    """NCCL's path type for a pair of nvidia-smi class ``link_class`` ("NV4", "NODE", ...)."""
    cls = str(link_class)
    if cls.startswith("NV"):
        return PATH["NVL"]
    return _CLASS_PATH.get(cls, PATH["SYS"])


def nccl_route(link_class: str, peer_ok: bool, env: Optional[Mapping[str, str]] = None,
               cpu_vendor=None, n_gpus: int = 2,
               nccl_version: Optional[Sequence[int]] = None) -> str:
    """"p2p" or "host" for a pair of class ``link_class`` whose P2P status allows peer access
    (``peer_ok``), under the NCCL settings in ``env`` (default: os.environ)."""
    return route_and_reason(link_class, peer_ok, env, cpu_vendor, n_gpus, nccl_version)[0]


def route_and_reason(link_class: str, peer_ok: bool, env: Optional[Mapping[str, str]] = None,
                     cpu_vendor=None, n_gpus: int = 2,
                     nccl_version: Optional[Sequence[int]] = None) -> Tuple[str, str]:
    """("p2p" | "host", one sentence saying why NCCL takes that route)."""
    level, why = p2p_level(cpu_vendor, n_gpus, env, nccl_version)
    path = path_type(link_class)
    name = "NODE (NCCL: PHB)" if str(link_class) == "NODE" else PATH_TYPES[path]
    if path > level:
        return "host", (f"NCCL goes through host memory: path {name} is beyond its P2P level "
                        f"{PATH_TYPES[level]} ({why})")
    if not peer_ok:
        return "host", ("NCCL goes through host memory: NVML does not report P2P read/write OK "
                        "for this pair")
    return "p2p", (f"NCCL uses peer-to-peer: path {name} is within its P2P level "
                   f"{PATH_TYPES[level]} ({why})")
