"""Whether two runs come from the same machine, and how they differ when not.

`gputopo diff A B` compares one machine over time; a diff of two different machines (another
host, other GPU models or count, other GPU UUIDs, a simulated run against a real one) reads like
a regression or an improvement of hardware that was never there. The differences are listed so
the diff can say so at its top.
"""

from __future__ import annotations

from collections import Counter
from typing import List, Optional

from gputopo.model import Topology, is_value

from .run_folder import Run


def _gpus_text(topo: Optional[Topology]) -> str:
    if topo is None or not topo.gpus:
        return "unknown GPUs"
    names = Counter(str(g.name) if is_value(g.name) else "?" for g in topo.gpus)
    return ", ".join(f"{n} x {name}" for name, n in names.items())


def _host(run: Run) -> Optional[str]:
    topo = run.topology
    if topo is None or not is_value(topo.host.hostname):
        return None
    return str(topo.host.hostname)


def machine_differences(a: Run, b: Run) -> List[str]:
    """What tells run ``a``'s machine from run ``b``'s; empty when nothing does."""
    out = []
    if a.simulated != b.simulated:
        out.append(f"A is {'simulated' if a.simulated else 'a real machine'}, B is "
                   f"{'simulated' if b.simulated else 'a real machine'}")
    if a.machine and b.machine and a.machine != b.machine:
        out.append(f"machine {a.machine!r} vs {b.machine!r}")
    ha, hb = _host(a), _host(b)
    if ha and hb and ha != hb:
        out.append(f"host {ha} vs {hb}")
    ga, gb = _gpus_text(a.topology), _gpus_text(b.topology)
    if ga != gb:
        out.append(f"GPUs {ga} vs {gb}")
    elif a.topology is not None and b.topology is not None:
        ua = [str(g.uuid) for g in a.topology.gpus if is_value(g.uuid)]
        ub = [str(g.uuid) for g in b.topology.gpus if is_value(g.uuid)]
        if ua and ub and set(ua) != set(ub):
            out.append(f"GPU UUIDs differ ({len(set(ua) - set(ub))} of {len(ua)} GPUs of A are not in B)")
    return out
