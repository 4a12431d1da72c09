"""Free memory of GPUs through NVML, for the bench's size check before a run (bench/memory_check).

Best effort: a GPU whose memory cannot be read is left out (the check then does not judge it);
this never stops a run by itself.
"""

from __future__ import annotations

from typing import Dict, Iterable

from gputopo.errors import GputopoError
from gputopo.model import Topology, is_value


def gpu_free_bytes(topology: Topology, nvml_indices: Iterable[int]) -> Dict[int, int]:
    """NVML index -> free bytes (nvmlDeviceGetMemoryInfo(handle).free) of the given GPUs."""
    from .nvml_lib import close_nvml, load_nvml

    try:
        lib = load_nvml()
    except GputopoError:
        return {}
    out: Dict[int, int] = {}
    try:
        for k in nvml_indices:
            bus_id = topology.gpu(k).pci_bus_id
            try:  # by bus id: NVML indices are stable, but the bus id is what the scan keyed on
                handle = (lib.nvmlDeviceGetHandleByPciBusId(bus_id) if is_value(bus_id)
                          else lib.nvmlDeviceGetHandleByIndex(k))
                out[k] = int(lib.nvmlDeviceGetMemoryInfo(handle).free)
            except Exception:  # noqa: BLE001 - pynvml.NVMLError or a missing call: not judged
                continue
    finally:
        close_nvml(lib)
    return out
