"""Which CUDA device a cluster rank drives, chosen by what its task can see.

torchrun (and ``srun`` without GPU binding) shows every task all the node's GPUs: the rank
drives CUDA device ``LOCAL_RANK``. Slurm with ``--gpus-per-task`` or a per-task ``--gpu-bind``
shows each task only its own GPU(s) (renumbered from 0), so ``device_count()`` is smaller than
the node's task count and ``LOCAL_RANK`` names no device: the rank drives the first GPU it
sees. Either way the choice is checked afterwards by PCI bus id (:func:`shared_gpus`): two
ranks of one node on the same GPU is a launch error, never a measurement. No torch import here
(``cuda`` is ``torch.cuda`` or a test's stand-in).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from gputopo.errors import NoHardwareError


def choose_device(cuda: Any, local_rank: int, local_world_size: int,
                  where: str = "") -> Tuple[int, Optional[str]]:
    """(CUDA device index, its PCI bus id or None) for this rank; NoHardwareError when the task
    sees no GPU."""
    count = int(cuda.device_count()) if cuda.is_available() else 0
    if count == 0:
        raise NoHardwareError(f"{where or 'this rank'}: CUDA sees no GPU in this task "
                              "(CUDA_VISIBLE_DEVICES / the launcher's GPU binding)")
    # every task sees the node's GPUs (torchrun): by local rank; a task bound to its own
    # GPU(s) (Slurm --gpus-per-task / --gpu-bind): the first one it sees
    index = local_rank if count >= local_world_size and local_rank < count else 0
    return index, bus_id_of(cuda, index)


def bus_id_of(cuda: Any, index: int) -> Optional[str]:
    """``0000:1b:00.0`` of CUDA device ``index`` (from its properties), None if unknown."""
    try:
        p = cuda.get_device_properties(index)
        return f"{int(p.pci_domain_id):04x}:{int(p.pci_bus_id):02x}:{int(p.pci_device_id):02x}.0"
    except (AttributeError, TypeError, ValueError, RuntimeError):
        return None


def shared_gpus(records: List[Dict[str, Any]]) -> List[str]:
    """One line per GPU that two or more ranks of one node chose (records from every rank:
    ``rank``, ``node``, ``gpu_bus_id``); empty when every rank has a GPU of its own."""
    seen: Dict[Tuple[str, str], List[int]] = {}
    for r in records:
        bus = r.get("gpu_bus_id")
        if bus:
            seen.setdefault((str(r["node"]), str(bus)), []).append(int(r["rank"]))
    return [f"ranks {', '.join(map(str, sorted(ranks)))} on {node} all drive GPU {bus}"
            for (node, bus), ranks in sorted(seen.items()) if len(ranks) > 1]
