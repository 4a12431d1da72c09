"""NVML -> which GPUs a job is using right now: each GPU's compute processes
(``nvmlDeviceGetComputeRunningProcesses``; nvidia-ml-py 13.x calls the ``_v3`` entry point and
returns objects with ``pid``, ``usedGpuMemory``, ``gpuInstanceId``, ``computeInstanceId``).

A GPU is idle only where the call answered and listed no process; a GPU whose processes could
not be read is not known to be idle (the caller leaves it alone, saying why). Read for `gputopo
health --level quick|pairs`, which never measures a GPU a job uses. Graphics and MPS-server
processes (``nvmlDeviceGetGraphicsRunningProcesses``, ``nvmlDeviceGetMPSComputeRunningProcesses``)
are not read: a training job's are compute processes; under MPS its clients are MPS's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List

from gputopo.model.values import Failed, is_value
from gputopo.probe.nvml_query import GpuLost, as_text, query


@dataclass
class GpuUse:
    """One GPU: its NVML index, UUID and bus id, and the pids running on it (``pids`` None where
    they could not be read: ``why`` says why)."""

    index: int
    uuid: str
    bus_id: str
    pids: List[int] | None = field(default_factory=list)
    why: str = ""

    @property
    def idle(self) -> bool:
        return self.pids is not None and not self.pids

    def state(self) -> str:
        """``idle``, ``in use by pid 1, 2`` or ``running processes not read (why)``."""
        if self.pids is None:
            return f"running processes not read ({self.why})"
        if not self.pids:
            return "idle"
        return "in use by pid " + ", ".join(str(p) for p in self.pids)


def running_pids(lib: Any, handle: Any) -> Any:
    """The sorted pids of the GPU's compute processes, or a NotAvailable/Failed value."""
    got = query(lib, "nvmlDeviceGetComputeRunningProcesses", handle, default_reason="running processes")
    if not is_value(got):
        return got
    try:
        return sorted({int(p.pid) for p in got})
    except (TypeError, ValueError, AttributeError) as e:
        return Failed(f"running processes: unexpected answer ({e})")


def read_gpu_use(lib: Any) -> List[GpuUse]:
    """Every GPU NVML lists, with its running processes (``lib``: an initialised NVML library
    object, gputopo/probe/nvml_lib.py's or the fake's)."""
    out: List[GpuUse] = []
    for i in range(int(lib.nvmlDeviceGetCount())):
        handle = lib.nvmlDeviceGetHandleByIndex(i)
        try:
            uuid = query(lib, "nvmlDeviceGetUUID", handle, default_reason="UUID")
            pci = query(lib, "nvmlDeviceGetPciInfo", handle, default_reason="PCI info")
            pids = running_pids(lib, handle)
        except GpuLost as e:
            out.append(GpuUse(i, "", "", None, str(e)))
            continue
        bus = as_text(getattr(pci, "busId", "")) if is_value(pci) else ""
        use = GpuUse(i, str(uuid) if is_value(uuid) else "", str(bus or ""))
        if is_value(pids):
            use.pids = list(pids)
        else:
            use.pids, use.why = None, str(getattr(pids, "reason", None) or getattr(pids, "error", pids))
        out.append(use)
    return out
