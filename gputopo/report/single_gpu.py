"""One GPU is one GPU: a p2pBandwidthLatencyTest or nvbandwidth output of a single GPU has no
pair to measure. Said as a note (what was measured: the GPU's own copies, to and from its own
memory or the host), so a run with no pair is never read as "every pair is fine"; the series of
such a run are the GPU's, never "the link between these GPUs" (expected_basis.py says the same of
a one-GPU series)."""

from __future__ import annotations

from typing import List

from gputopo.model import is_value

from .headline import Headline
from .run_folder import Run

#: How every note of this module begins (the terminal picks it out of a summary's notes).
ONE_GPU = "one GPU: "
#: The imported tools whose outputs are matrices of GPU pairs (the ``source`` of their measurements).
PAIR_TOOLS = {"p2pBandwidthLatencyTest": "p2pBandwidthLatencyTest", "nvbandwidth": "nvbandwidth"}


def _where(h: Headline) -> str:
    """'within GPU 0's own memory', 'host -> GPU 0', 'GPU 0 <-> host': the copy's path in words."""
    d = h.direction or ""
    g = h.gpus[0]
    if d == f"{g}->{g}":
        return f"within GPU {g}'s own memory"
    arrow = "<->" if "<->" in d else "->" if "->" in d else None
    if arrow is None:
        return d or f"GPU {g}"
    ends = [e if e in ("host", "all") else f"GPU {e}" for e in d.split(arrow, 1)]
    return f" {arrow} ".join(ends)


def single_gpu_notes(run: Run, heads: List[Headline]) -> List[str]:
    """A note when an imported pair tool's output measured one GPU only: no pair, and what was."""
    sources = {str(m.extra.get("source")) for m in run.measurements}
    tools = [PAIR_TOOLS[s] for s in sorted(sources) if s in PAIR_TOOLS]
    if not tools or sources - set(PAIR_TOOLS):
        return []
    gpus = {g for m in run.measurements for g in m.gpus}
    topo_gpus = len(run.topology.gpus) if run.topology is not None else None
    if len(gpus) != 1 or (topo_gpus is not None and topo_gpus > 1):
        return []
    (g,) = gpus
    name = ""
    if run.topology is not None:
        named = [x.name for x in run.topology.gpus if x.nvml_index == g and is_value(x.name)]
        name = f", {named[0]}" if named else ""
    own = [h for h in heads if tuple(h.gpus) == (g,)]
    figures = "; ".join(f"{h.test} {h.gbps:.4g} GB/s {h.metric} ({_where(h)})" for h in own) or "no bandwidth figure"
    latency = sum(1 for m in run.measurements if m.size_bytes == 0)
    lat = f"; {latency} latency figure(s)" if latency else ""
    return [f"{ONE_GPU}this {' and '.join(tools)} output has GPU {g}{name} only: there was no GPU pair to measure, so no "
            f"link between GPUs is judged here; what was measured is the GPU's own copies: {figures}{lat}"]
