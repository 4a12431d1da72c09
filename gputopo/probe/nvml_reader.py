"""NVML -> Topology: every GPU, its PCIe and NVLinks, and how each pair of GPUs connects.

Reads through an NVML library object (``pynvml`` from nvml_lib.load_nvml(), or a simulated
machine's fake NVML); every call goes through nvml_query.query, so an unsupported function is a
NotAvailable with its reason, a failing one a Failed, and a lost GPU is marked lost while the
others are read completely. Each GPU is read once (cached); pairs cost O(n^2) calls, nothing more.

Link class of a pair (i, j), as ``nvidia-smi topo -m`` names it (docs/scan.md):

- ``NV<n>`` when NVLinks join them. Direct links: n = active links of i whose remote PCI bus id is
  j's; when both GPUs could be read and they disagree, the smaller count is taken (a link is only
  usable when both ends are up). NVSwitch: a GPU with active links to a switch
  (``NVML_NVLINK_DEVICE_TYPE_SWITCH``) reaches every other GPU with active switch links, and the
  pair is counted as min(switch links of i, switch links of j) -- the bandwidth a pair can use is
  bound by the side with fewer links. Direct and switch links add up. A remote of unknown type
  (bindings without nvmlDeviceGetNvLinkRemoteDeviceType) counts only when its bus id is a GPU's.
- Otherwise the PCIe class from ``nvmlDeviceGetTopologyCommonAncestor`` (LinkClass.from_nvml_level).
- When that call cannot be answered, ``SYS`` if the GPUs' NUMA nodes are known and differ (the path
  then crosses the inter-socket link); otherwise **the pair is omitted** from Topology.pairs rather
  than given an invented class. With a lost GPU this is the usual outcome for its pairs.

P2P status per capability is read for (i, j) with i < j (nvidia-smi's row i, column j).

A lost GPU (NVML_ERROR_GPU_IS_LOST from any of its calls): ``Gpu.lost`` = Failed(...), its name,
UUID and bus id are kept if they were read before the loss (they say *which* GPU is gone), every
other field is NotAvailable("GPU lost"); no CUDA index (CUDA cannot use it, and the other GPUs
are numbered without it). Its pairs are listed when their class can still be told: from the
peers' NVLinks (when exactly one GPU's bus id is unknown, peers' active links to a GPU bus id no
readable GPU has are attributed to it), else from the topology call, else the NUMA rule above;
their P2P status is NotAvailable("GPU lost"). The other GPUs are read completely.

NVLink ``version`` is the NVLink generation (1..6): NVML answers an nvmlNvlinkVersion_t enum
(an A100 says 5, "3.1"), mapped back with NVLINK_GENERATION.

This module is the entry (read_topology, gpu_bus_ids); it reads the system and drives its parts,
which import only downwards: nvml_gpu (one GPU and its NVLinks, lost and unreadable GPUs) and
nvml_pairs (link class and P2P status of each pair).
"""

from __future__ import annotations

import dataclasses
from typing import Any, List, Mapping, Optional

from gputopo.errors import NoHardwareError
from gputopo.model.topology import Gpu, HostInfo, Topology
from gputopo.model.values import NotAvailable, is_value
from gputopo.model.bus_id import try_bus_key
from gputopo.probe.cuda_index import cuda_indices
from gputopo.probe.host_facts import read_pci_numa_node
from gputopo.probe.nvml_gpu import (LOST, REMOTE_TYPES, cpulist_from_mask, failed_gpu, mark_lost,
                                    pci_info_bus_id, read_gpu)
from gputopo.probe.nvml_pairs import read_pairs
from gputopo.probe.nvml_query import GpuLost, query

__all__ = ["DEFAULT_MAX_NVLINKS", "LOST", "REMOTE_TYPES", "cpulist_from_mask", "cuda_version_text",
           "gpu_bus_ids", "read_topology"]

#: NVLinks probed per GPU when the library does not say (NVML_NVLINK_MAX_LINKS of NVML 12).
DEFAULT_MAX_NVLINKS = 18


# ----------------------------------------------------------------------------- system


def cuda_version_text(version: Any) -> Any:
    """NVML's CUDA driver version int (12040) as "12.4"; anything else unchanged."""
    if isinstance(version, int) and not isinstance(version, bool):
        return f"{version // 1000}.{(version % 1000) // 10}"
    return version


def _versions(lib, host: HostInfo) -> HostInfo:
    cuda = query(lib, "nvmlSystemGetCudaDriverVersion", default_reason="CUDA driver version")
    return dataclasses.replace(
        host,
        driver_version=query(lib, "nvmlSystemGetDriverVersion", default_reason="driver version"),
        nvml_version=query(lib, "nvmlSystemGetNVMLVersion", default_reason="NVML version"),
        cuda_driver_version=cuda_version_text(cuda),
    )


def gpu_bus_ids(lib: Any) -> List[str]:
    """PCI bus ids (NVML form) of the GPUs NVML can name, for read_host before the full read.

    Lost or unreadable GPUs are left out; never raises for NVML errors."""
    count = query(lib, "nvmlDeviceGetCount", default_reason="GPU count")
    out: List[str] = []
    for index in range(int(count) if is_value(count) else 0):
        try:
            handle = query(lib, "nvmlDeviceGetHandleByIndex", index, default_reason="device handle")
            bus = pci_info_bus_id(query(lib, "nvmlDeviceGetPciInfo", handle, default_reason="PCI info")) \
                if is_value(handle) else handle
        except GpuLost:
            continue
        if isinstance(bus, str):
            out.append(bus)
    return out


def read_topology(lib: Any, host: Optional[HostInfo] = None, machine: str = "", source: str = "nvml",
                  simulated: bool = False, env: Optional[Mapping[str, str]] = None,
                  sysfs_root: Optional[str] = None) -> Topology:
    """Read every GPU and GPU pair through the NVML library object ``lib`` (already initialised).

    ``host`` (from probe.host.read_host) gets the driver, NVML and CUDA driver versions filled
    in (a copy; the argument is not changed). ``machine`` defaults to the host name. ``env``
    (default os.environ) supplies CUDA_VISIBLE_DEVICES / CUDA_DEVICE_ORDER for the CUDA index.
    ``sysfs_root`` ("/" on a real machine, a simulated host's folder) is where each GPU's socket
    NUMA node is read (``sys/bus/pci/devices/<bdf>/numa_node``); None leaves it NotAvailable.
    """
    host = _versions(lib, host if host is not None else HostInfo())
    if not machine and is_value(host.hostname):
        machine = str(host.hostname)

    count = query(lib, "nvmlDeviceGetCount", default_reason="GPU count")
    if not is_value(count):
        why = count.reason if isinstance(count, NotAvailable) else count.error
        raise NoHardwareError(f"NVML cannot count GPUs ({why})")

    max_links = getattr(lib, "NVML_NVLINK_MAX_LINKS", DEFAULT_MAX_NVLINKS)
    max_links = max_links if isinstance(max_links, int) and max_links > 0 else DEFAULT_MAX_NVLINKS

    gpus: List[Gpu] = []
    handles: List[Any] = []
    for index in range(int(count)):
        gpu = Gpu(nvml_index=index)
        try:
            handle = query(lib, "nvmlDeviceGetHandleByIndex", index, default_reason="device handle")
        except GpuLost as exc:
            gpus.append(mark_lost(gpu, exc))
            handles.append(None)
            continue
        if not is_value(handle):
            gpus.append(failed_gpu(index, handle))
            handles.append(None)
            continue
        handles.append(handle)
        try:
            gpus.append(read_gpu(lib, gpu, handle, max_links))
        except GpuLost as exc:
            gpus.append(mark_lost(gpu, exc))
            continue
        gpu.numa_node = (read_pci_numa_node(sysfs_root, try_bus_key(gpu.pci_bus_id))
                         if sysfs_root is not None
                         else NotAvailable("socket NUMA node: no host root to read sysfs from"))

    readable = [k for k, g in enumerate(gpus) if g.lost is None and handles[k] is not None]
    cuda = cuda_indices(
        [gpus[k].pci_bus_id if is_value(gpus[k].pci_bus_id) else None for k in readable],
        [gpus[k].uuid if is_value(gpus[k].uuid) else None for k in readable],
        [gpus[k].name if is_value(gpus[k].name) else None for k in readable],
        env=env,
    )
    for k, idx in zip(readable, cuda):
        gpus[k].cuda_index = idx

    pairs = read_pairs(lib, gpus, handles)
    return Topology(gpus=gpus, pairs=pairs, host=host, source=source, simulated=simulated,
                    machine=machine)
