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

from typing import Any, Dict, List, Optional, Tuple, Union

from gputopo.bench.fabrics.fabric import Fabric, fabric_named
from gputopo.errors import NoHardwareError
from gputopo.model.bus_id import from_torch


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
        addr = from_torch(cuda.get_device_properties(index))
    except (AttributeError, TypeError, ValueError, RuntimeError):
        return None
    return addr.lspci if addr is not None else None


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


#: Buffers of the message size a cpu-fabric rank holds during gloo's all_reduce: the tensor and
#: gloo's scratch for what arrives (an upper estimate, stated in the message).
GLOO_BUFFERS = 2


def free_bytes(torch: Any, fabric: Union[str, Fabric], index: Optional[int]) -> Optional[int]:
    """Memory the rank's all_reduce can use: the GPU's free bytes (cuda, through CUDA's
    ``cudaMemGetInfo``), or the host's MemAvailable (cpu); None where it cannot be read."""
    if fabric_named(fabric).memory != "gpu":
        from gputopo.bench.memory_check import host_available_bytes

        return host_available_bytes()
    try:
        return int(torch.cuda.mem_get_info(index)[0])
    except (AttributeError, RuntimeError, TypeError, ValueError):
        return None


def message_fit_error(size_bytes: int, fabric: Union[str, Fabric], free: Optional[int],
                      local_ranks: int) -> Optional[str]:
    """Why this rank cannot all_reduce a message of ``size_bytes``, or None (also when ``free``
    is unknown). Checked before the rendezvous: a message larger than the memory is the user's
    input, and measured it would fail every group and read as slow or failed nodes."""
    if free is None:
        return None
    from gputopo.bench.options import format_size

    gib = lambda n: f"{n / (1 << 30):.1f} GiB"  # noqa: E731
    if fabric_named(fabric).memory == "gpu":
        if size_bytes <= free:
            return None
        return (f"--size {format_size(size_bytes)} does not fit in this rank's GPU: "
                f"{gib(free)} free; use a smaller --size")
    need = GLOO_BUFFERS * size_bytes * max(1, local_ranks)
    if need <= free:
        return None
    return (f"--size {format_size(size_bytes)} does not fit in host memory: this node's "
            f"{local_ranks} rank(s) hold {GLOO_BUFFERS} buffers of it each ({gib(need)}), and "
            f"{gib(free)} is available; use a smaller --size")
