"""Which GPUs a cuda-fabric run can measure: those CUDA lets its workers see.

NVML lists every GPU of the machine; a worker's CUDA sees only those ``CUDA_VISIBLE_DEVICES``
lets through, numbered afresh. Mapping an NVML GPU to "the CUDA device with the same number"
measured the wrong GPU (with ``CUDA_VISIBLE_DEVICES=2,3`` pair 0,1 ran on GPUs 2,3, and pair 0,2
became an on-device copy reported as P2P). So a GPU CUDA cannot see is never measured: pairs
with one are left out, with one line naming them, and naming such a pair in ``--pairs`` is a
usage error (exit 2). Computed with the workers' own ``CUDA_DEVICE_ORDER=PCI_BUS_ID``
(gputopo.probe.cuda_index.worker_cuda_indices). No torch here.
"""

from __future__ import annotations

import os
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from gputopo.errors import UsageError
from gputopo.model import Topology, is_value
from gputopo.model.values import NotAvailable
from gputopo.probe.cuda_index import CudaIndex, worker_cuda_indices

Pair = Tuple[int, int]


def worker_cuda_map(topology: Topology, env: Optional[Mapping[str, str]] = None
                    ) -> Dict[int, CudaIndex]:
    """NVML index -> the CUDA index a gputopo worker gives that GPU, or NotAvailable(reason)."""
    env = os.environ if env is None else env

    def val(x):
        return x if is_value(x) else None

    # as the NVML reader does: CUDA's order is counted over the GPUs NVML could read
    gpus = [g for g in topology.gpus if g.lost is None and val(g.pci_bus_id)]
    got = worker_cuda_indices([val(g.pci_bus_id) for g in gpus], [val(g.uuid) for g in gpus],
                              [val(g.name) for g in gpus], env=env)
    out: Dict[int, CudaIndex] = {g.nvml_index: NotAvailable("GPU lost or its PCI bus id unknown")
                                 for g in topology.gpus}
    out.update({g.nvml_index: idx for g, idx in zip(gpus, got)})
    return out


def _names(gpus: Iterable[int]) -> str:
    return ", ".join(str(g) for g in sorted(gpus))


def restrict_to_cuda_visible(topology: Topology, pairs: Sequence[Pair], self_gpus: Sequence[int],
                             explicit_pairs: bool = False,
                             env: Optional[Mapping[str, str]] = None
                             ) -> Tuple[List[Pair], List[int], Optional[str]]:
    """(pairs, self GPUs, note) keeping only GPUs CUDA can see; ``note`` is the one line that
    names what was left out (None when nothing was).

    UsageError when ``explicit_pairs`` (the user named the pairs) and one has a GPU CUDA cannot
    see, or when nothing is left to measure.
    """
    env = os.environ if env is None else env
    cuda = worker_cuda_map(topology, env)
    hidden = {g for g, idx in cuda.items() if not isinstance(idx, int)}
    shown = env.get("CUDA_VISIBLE_DEVICES")
    why = f"CUDA_VISIBLE_DEVICES={shown}" if shown is not None else "CUDA cannot see them"
    if hidden:
        reason = next(getattr(cuda[g], "reason", "") for g in sorted(hidden))
        if "MIG" in reason or "not visible" not in reason:
            why = reason
    if explicit_pairs:
        bad = [p for p in pairs if set(p) & hidden]
        if bad:
            p = bad[0]
            raise UsageError(f"--pairs {p[0]},{p[1]}: GPU(s) {_names(set(p) & hidden)} not visible "
                             f"to CUDA ({why}); unset CUDA_VISIBLE_DEVICES or pick visible GPUs")
    kept = [p for p in pairs if not set(p) & hidden]
    kept_self = [g for g in self_gpus if g not in hidden]
    involved = {g for p in pairs for g in p} | set(self_gpus)
    skipped = sorted(involved & hidden)
    if not kept and not kept_self:
        raise UsageError(f"nothing to measure: GPU(s) {_names(skipped or hidden)} not visible to "
                         f"CUDA ({why})")
    note = None
    if skipped:
        n_pairs = len(pairs) - len(kept)
        note = (f"skipped GPU(s) {_names(skipped)}: not visible to CUDA ({why}); "
                f"{n_pairs} pair(s) with them not measured")
    return kept, kept_self, note
