"""The nccl-tests collectives gputopo reads (every one of the collective table,
model/collectives.py), the spellings of an op in file and program names, and the check of an
--op value.
"""

from __future__ import annotations

import re
from typing import Optional

from gputopo.errors import UsageError
from gputopo.model.collectives import COLLECTIVES, spellings

#: nccl-tests program / op name -> its entry in the collective table.
OPS = {c.name: c for c in COLLECTIVES}
#: Spellings in file names, one containing another first so "reduce_scatter" wins over "reduce".
_OP_ALIASES = list(spellings().items())


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
