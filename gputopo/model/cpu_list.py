"""Bounds of a host's CPU numbers and NUMA nodes, for the readers of CPU-affinity lists
("0-31,64-95") and NUMA node numbers in descriptions and `nvidia-smi topo -m` text.

Linux numbers at most 8192 CPUs (NR_CPUS) and 1024 NUMA nodes (NODES_SHIFT 10): "0-99999999"
is no machine, and carrying it on would print a CPU list of 100 million entries into advice.
"""

from __future__ import annotations

import re
from typing import Optional

#: Highest CPU number a Linux host can have (NR_CPUS is at most 8192).
MAX_CPU = 8191
#: Highest NUMA node number (NODES_SHIFT at most 10).
MAX_NUMA_NODE = 1023

_CPULIST_RE = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


def cpu_list_problem(text: str) -> Optional[str]:
    """Why ``text`` is not a CPU list a host could have (None when it is one)."""
    cpus = text.replace(" ", "")
    if not _CPULIST_RE.match(cpus):
        return f"expected a CPU list like \"0-31,64-95\", got {text!r}"
    for part in cpus.split(","):
        lo, _, hi = part.partition("-")
        a, b = int(lo), int(hi or lo)
        if b > MAX_CPU:
            return f"CPU {b} in {text!r} is beyond any host (CPUs are numbered 0..{MAX_CPU})"
        if b < a:
            return f"range {part!r} in {text!r} runs backwards"
    return None


def numa_node_problem(node: int) -> Optional[str]:
    """Why ``node`` is not a NUMA node number (None when it is one)."""
    if not 0 <= node <= MAX_NUMA_NODE:
        return f"NUMA node {node} is beyond any host (nodes are numbered 0..{MAX_NUMA_NODE})"
    return None
