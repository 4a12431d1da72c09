"""Scan the real machine: NVML for the GPUs and links, the host's sysfs/lspci for IOMMU and ACS."""

from __future__ import annotations

import socket

from gputopo.model import Topology


def scan_real() -> Topology:
    """Read this machine. Raises NoHardwareError when there is no driver or no GPU."""
    from gputopo.probe.host import read_host
    from gputopo.probe.nvml_lib import load_nvml
    from gputopo.probe.nvml_reader import read_topology

    lib = load_nvml()
    try:
        bus_ids = [_bus_id(lib, k) for k in range(lib.nvmlDeviceGetCount())]
        host = read_host(root="/", gpu_bus_ids=[b for b in bus_ids if b])
        return read_topology(lib, host=host, machine=socket.gethostname(), source="nvml")
    finally:
        try:
            lib.nvmlShutdown()
        except Exception:  # shutdown failing must not hide the scan
            pass


def _bus_id(lib, index):
    from gputopo.probe.nvml_query import query
    from gputopo.model import is_value

    try:
        handle = lib.nvmlDeviceGetHandleByIndex(index)
        info = query(lib, "nvmlDeviceGetPciInfo", handle)
    except Exception:
        return None
    bus = getattr(info, "busId", None) if is_value(info) else None
    return bus.decode() if isinstance(bus, bytes) else bus
