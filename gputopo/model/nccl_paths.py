"""NCCL's path types by number, per NCCL version: what ``distance D`` means in NCCL's per-GPU
GPUDirect RDMA lines (``GPU Direct RDMA Disabled for GPU 1b000 / HCA 0 (distance 7 > 4)``).

NCCL prints the path type between a GPU and a NIC as its number, and the numbers changed
meaning as path types were added. Read from NVIDIA/nccl at each release tag (the ``PATH_*``
defines of src/graph/topo.h, and ``topoPathTypeStr`` of src/graph/paths.cc; before 2.6 the
``ncclPathDist`` enum of src/include/topo.h, then src/include/graph.h):

=================  =================================================================
NCCL               0    1    2    3    4    5    6    7    8    9    10   11
=================  =================================================================
2.3 - 2.4.7        PIX  PXB  PHB  SOC                                    (topo.h)
2.4.8 - 2.5        PIX  PXB  PHB  NODE SYS                               (graph.h)
2.6 - 2.7          LOC  NVL  PIX  PXB  PHB  SYS  NET
2.8 - 2.11         LOC  NVL  NVB  PIX  PXB  PHB  SYS
2.12 - 2.17        LOC  NVL  NVB  PIX  PXB  PXN  PHB  SYS  (PATH_DIS = 7 too)
2.18 - 2.25        LOC  NVL  NVB  PIX  PXB  PXN  PHB  SYS  NET  DIS
2.26               LOC  NVL  NVB  C2C  PIX  PXB  PXN  PHB  SYS  NET  DIS
2.27.3             LOC  NVL  NVB  C2C  PIX  PXB  PXN  P2C  PHB  SYS  NET  DIS
2.27.5 - 2.30      LOC  NVL  NVB  C2C  PIX  PXB  P2C  PXN  PHB  SYS  NET  DIS
=================  =================================================================

The per-GPU lines themselves, by version (src/transport/net_ib.cu, net.cc, then
src/graph/paths.cc ``ncclTopoCheckGdr``): 2.3 ``NET/IB : ... for GPU <cudaDev> / HCA <name>
(distance D >= L)``; 2.4 ``NET/<net> : ... for GPU <cudaDev>[<nvmlDev>] / HCA <n> (distance D
>= L)``; 2.5 ``NET/<net> : ... for GPU <busId hex> / HCA <n> (distance D >= L)``; 2.6 - 2.20
``... for GPU <busId hex> / HCA <n> (distance D > L)``; 2.21 - 2.23 ``... for GPU <busId hex> /
HCA <netId hex> ...``; 2.24 - 2.28 ``... for GPU <rank> / HCA <netId hex> ...``; 2.29
``... for GPU/<sys>-<busId> (rank R) - NET/<sys>-<id> (distance D > L)`` (a TRACE line from
2.30 on, not printed by release builds). ``Enabled`` lines say ``distance D <= L`` (``<`` before
2.6). Where a log states no NCCL version, or several, the number is said as printed.
"""

from __future__ import annotations

import re
from typing import List, Optional, Tuple

#: (first NCCL version the table holds for, names by number); each row holds until the next.
PATH_TABLES: List[Tuple[Tuple[int, int, int], Tuple[str, ...]]] = [
    ((2, 3, 0), ("PIX", "PXB", "PHB", "SOC")),
    ((2, 4, 8), ("PIX", "PXB", "PHB", "NODE", "SYS")),
    ((2, 6, 0), ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS", "NET")),
    ((2, 8, 0), ("LOC", "NVL", "NVB", "PIX", "PXB", "PHB", "SYS")),
    ((2, 12, 0), ("LOC", "NVL", "NVB", "PIX", "PXB", "PXN", "PHB", "SYS")),
    ((2, 18, 0), ("LOC", "NVL", "NVB", "PIX", "PXB", "PXN", "PHB", "SYS", "NET", "DIS")),
    ((2, 26, 0), ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "PXN", "PHB", "SYS", "NET", "DIS")),
    ((2, 27, 3), ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "PXN", "P2C", "PHB", "SYS", "NET", "DIS")),
    ((2, 27, 5), ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS", "NET", "DIS")),
]
#: The newest release the table was read at; a later version is read with the last row (said so).
READ_UP_TO = (2, 30, 7)

#: What each path type is, in words (src/graph/topo.h's comments).
PATH_WORDS = {
    "LOC": "the same device", "NVL": "NVLink", "NVB": "NVLink through an intermediate GPU",
    "C2C": "the CPU's C2C link", "PIX": "one PCIe switch", "PXB": "several PCIe switches, no CPU",
    "P2C": "PCIe to the CPU, then C2C to the GPU", "PXN": "a GPU of the node over NVLink, then its PCIe (PXN)",
    "PHB": "the PCIe host bridge of one CPU", "NODE": "the CPUs of one NUMA node",
    "SOC": "the CPUs' SMP interconnect", "SYS": "the CPUs' SMP interconnect (QPI/UPI, another socket)",
    "NET": "the network", "DIS": "disconnected",
}

_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)")


def version_tuple(text: Optional[str]) -> Optional[Tuple[int, int, int]]:
    """``"2.21.5+cuda12.4"`` -> (2, 21, 5); None where it is no NCCL version."""
    m = _VERSION.match(str(text or "").strip())
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def path_table(version: Optional[Tuple[int, int, int]]) -> Optional[Tuple[str, ...]]:
    """The path names by number of one NCCL version; None where it is unknown or older than 2.3."""
    if version is None or version < PATH_TABLES[0][0]:
        return None
    names = None
    for first, table in PATH_TABLES:
        if version >= first:
            names = table
    return names


def path_name(versions: List[str], number: int) -> Optional[str]:
    """The path type ``number`` means in the NCCL version the log states; None where the log
    states none, several that read it differently, or the number is outside that version's table."""
    names = {t[number] if t is not None and 0 <= number < len(t) else None
             for t in (path_table(version_tuple(v)) for v in versions)}
    if not versions or len(names) != 1:
        return None
    return next(iter(names))


def path_said(versions: List[str], number: int) -> str:
    """``SYS (7 in NCCL 2.21.5's path table: ...)``, or ``7 (as printed)`` where the log does not
    tell which table it is read with (``unread_why`` says why)."""
    name = path_name(versions, number)
    if name is None:
        return f"{number} (as printed)"
    newest = max(version_tuple(v) or (0, 0, 0) for v in versions)
    later = " (read with 2.30's table, the newest gputopo knows)" if newest > READ_UP_TO else ""
    return f"{name} ({number} in NCCL {versions[0].split('+')[0]}'s path table{later}: {PATH_WORDS.get(name, name)})"


def unread_why(versions: List[str]) -> str:
    """Why path numbers are said as printed: no NCCL version in the log, or several."""
    if not versions:
        return "the log states no NCCL version, so NCCL's path numbers are said as printed: their meaning changed between releases"
    return f"the log states several NCCL versions ({', '.join(versions)}), so NCCL's path numbers are said as printed"
