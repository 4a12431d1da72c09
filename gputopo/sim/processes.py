"""Processes running on a simulated GPU: the one description key ``processes`` (per GPU or in
[defaults]) and the fake NVML's ``nvmlDeviceGetComputeRunningProcesses``, answered as
nvidia-ml-py (13.x) answers it: a list of objects with ``pid``, ``usedGpuMemory`` (bytes; None
where NVML has no value), ``gpuInstanceId`` and ``computeInstanceId``; ``[]`` for an idle GPU.

``processes = [4242]`` or ``processes = [{ pid = 4242, used_mib = 30000 }]``: the GPU is in use
by a job (`gputopo health --level quick|pairs` leaves it not judged: in use). See
docs/sim-format.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

#: GPU description keys of this module.
PROCESS_KEYS = {"processes"}
#: Linux's largest pid (pid_max's ceiling, 2^22).
PID_MAX = 4194304
#: NVML's "no instance" for gpuInstanceId / computeInstanceId (not a MIG instance).
NO_INSTANCE = 0xFFFFFFFF


@dataclass(frozen=True)
class ProcessDesc:
    pid: int
    used_mib: Optional[int] = None  # None: NVML has no value (usedGpuMemory None)


@dataclass
class ProcessInfo:
    """One entry of nvmlDeviceGetComputeRunningProcesses, as pynvml's friendly object has it."""

    pid: int
    usedGpuMemory: Optional[int]
    gpuInstanceId: int = NO_INSTANCE
    computeInstanceId: int = NO_INSTANCE


def parse_processes(ctx, spec: Dict[str, Any], where) -> List[ProcessDesc]:
    """The processes of one GPU from its merged description entry (``where(key)``: the key path
    for error messages; ``ctx.error`` builds an InputFileError)."""
    raw = spec.get("processes", [])
    if not isinstance(raw, list):
        raise ctx.error(f"expected a list of pids (or {{ pid = N, used_mib = M }} tables), got {raw!r}",
                        *where("processes"))
    out: List[ProcessDesc] = []
    for item in raw:
        entry = item if isinstance(item, dict) else {"pid": item}
        extra = sorted(set(entry) - {"pid", "used_mib"})
        if extra:
            raise ctx.error(f"unknown key {extra[0]!r} in a process (keys: pid, used_mib)", *where("processes"))
        pid, used = entry.get("pid"), entry.get("used_mib")
        if not isinstance(pid, int) or isinstance(pid, bool) or not 1 <= pid <= PID_MAX:
            raise ctx.error(f"expected a pid (integer 1..{PID_MAX}), got {pid!r}", *where("processes"))
        if used is not None and (not isinstance(used, int) or isinstance(used, bool) or not 0 <= used <= 2**30):
            raise ctx.error(f"expected used_mib as an integer >= 0, got {used!r}", *where("processes"))
        if any(p.pid == pid for p in out):
            raise ctx.error(f"pid {pid} is listed twice", *where("processes"))
        out.append(ProcessDesc(pid, used))
    return out


def nvmlDeviceGetComputeRunningProcesses(self, i):
    return [ProcessInfo(p.pid, None if p.used_mib is None else p.used_mib * 1024 * 1024)
            for p in self._gpu(i).processes]


def install_process_calls(cls, device_decorator) -> None:
    """Add the running-process call (and its _v3 name, which pynvml's calls) to the fake NVML."""
    for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v3"):
        setattr(cls, name, device_decorator(name=name)(nvmlDeviceGetComputeRunningProcesses))
