"""The nccl-tests collectives gputopo reads: each op's gputopo test name and busbw factor, the
spellings of an op in file and program names, and the check of an --op value.
"""

from __future__ import annotations

import re
from typing import Optional

from gputopo.errors import UsageError

#: nccl-tests program / op name -> (gputopo test, busbw factor as a function of ranks n).
OPS = {
    "all_reduce": ("collective.all_reduce", lambda n: 2 * (n - 1) / n),
    "all_gather": ("collective.all_gather", lambda n: (n - 1) / n),
    "reduce_scatter": ("collective.reduce_scatter", lambda n: (n - 1) / n),
    "alltoall": ("collective.alltoall", lambda n: (n - 1) / n),
    "scatter": ("collective.scatter", lambda n: (n - 1) / n),
    "gather": ("collective.gather", lambda n: (n - 1) / n),
    "broadcast": ("collective.broadcast", lambda n: 1.0),
    "reduce": ("collective.reduce", lambda n: 1.0),
    "sendrecv": ("collective.sendrecv", lambda n: 1.0),
    "hypercube": ("collective.hypercube", lambda n: (n - 1) / n),
}
#: Spellings in file names, longest first so "reduce_scatter" wins over "reduce".
_OP_ALIASES = [("reduce_scatter", "reduce_scatter"), ("reducescatter", "reduce_scatter"),
               ("all_reduce", "all_reduce"), ("allreduce", "all_reduce"), ("all_gather", "all_gather"),
               ("allgather", "all_gather"), ("alltoall", "alltoall"), ("all_to_all", "alltoall"),
               ("sendrecv", "sendrecv"), ("hypercube", "hypercube"), ("broadcast", "broadcast"),
               ("scatter", "scatter"), ("gather", "gather"), ("reduce", "reduce")]


def op_from_name(name: str) -> Optional[str]:
    low = name.lower().replace("-", "_")
    for alias, op in _OP_ALIASES:
        if alias in low:
            return op
    return None


def check_op(op: Optional[str]) -> Optional[str]:
    """An --op value, exactly: "all_reduce", "allreduce", "all_reduce_perf", "collective.all_reduce"."""
    if op is None:
        return None
    name = op.strip().lower().replace("-", "_")
    name = re.sub(r"^collective\.", "", name)
    name = re.sub(r"_perf(_mpi)?$", "", name)
    found = dict(_OP_ALIASES).get(name)
    if found is None:
        raise UsageError(f"unknown nccl-tests op {op!r}; known: {', '.join(sorted(OPS))}")
    return found
