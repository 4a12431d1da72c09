"""NVML -> one Gpu: name, UUID, PCIe, CPU affinity, MIG mode, NVLinks and NVLink fabric
(nvml_fabric.py), read once per GPU.

Part of gputopo.probe.nvml_reader (its docstring has the rules); every call goes through
nvml_query.query, so a lost GPU raises GpuLost here and the reader marks it with mark_lost.
"""

from __future__ import annotations

import math
import os
from typing import Any, List, Optional

from gputopo.model.topology import NVLINK_ERROR_COUNTERS, Gpu, NvLink, PcieLink
from gputopo.model.values import Failed, NotAvailable, is_value
from gputopo.probe.nvml_codes import NVLINK_GENERATION, NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_FOUND
from gputopo.probe.nvml_fabric import read_fabric
from gputopo.probe.nvml_query import GpuLost, as_text, nvlink_count, query

#: nvmlNvLinkDeviceType -> name.
REMOTE_TYPES = {0: "GPU", 1: "IBMNPU", 2: "SWITCH"}
LOST = "GPU lost"


def cpulist_from_mask(words) -> str:
    """CPU list text ("0-31,64-95") from 64-bit affinity mask words, word 0 holding CPUs 0-63."""
    cpus = []
    for w, word in enumerate(words):
        word = int(word) & 0xFFFFFFFFFFFFFFFF
        base = w * 64
        while word:
            low = word & -word
            cpus.append(base + low.bit_length() - 1)
            word ^= low
    ranges: List[List[int]] = []
    for c in cpus:
        if ranges and c == ranges[-1][1] + 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in ranges)


def pci_info_bus_id(info: Any) -> Any:
    """The bus id of an nvmlPciInfo_t (or look-alike): busId, else the legacy field."""
    if not is_value(info):
        return info
    for attr in ("busId", "busIdLegacy"):
        value = as_text(getattr(info, attr, None))
        if isinstance(value, str) and value:
            return value
    return Failed("PCI info has no busId")


def _affinity_words() -> int:
    """Mask words to ask for: enough for every CPU here, and at least 1024 CPUs (simulated hosts)."""
    return max(16, math.ceil((os.cpu_count() or 1) / 64))


# ----------------------------------------------------------------------------- one GPU


def _read_nvlink(lib, handle, link: int) -> Optional[NvLink]:
    """One NVLink, or None when the GPU has no usable link with this index (unsupported, not
    found, or past its last link): such an index is skipped, the next ones are still read."""
    state = query(lib, "nvmlDeviceGetNvLinkState", handle, link, default_reason=f"NVLink {link} state",
                  not_available_codes=(NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_FOUND))
    if isinstance(state, NotAvailable):
        return None
    active = bool(state) if is_value(state) else state
    version = query(lib, "nvmlDeviceGetNvLinkVersion", handle, link, default_reason="NVLink version")
    if is_value(version) and int(version) == 0:  # NVML_NVLINK_VERSION_INVALID: a link not up
        version = NotAvailable("NVLink version: NVML says invalid (0), as for a link that is not up")
    elif is_value(version):
        version = NVLINK_GENERATION.get(int(version), NotAvailable(
            f"NVLink version: unknown nvmlNvlinkVersion_t value {version}"))
    remote = pci_info_bus_id(query(lib, "nvmlDeviceGetNvLinkRemotePciInfo", handle, link,
                           default_reason="NVLink remote PCI info"))
    rtype = query(lib, "nvmlDeviceGetNvLinkRemoteDeviceType", handle, link,
                  default_reason="NVLink remote device type")
    if is_value(rtype):
        rtype = REMOTE_TYPES.get(int(rtype), NotAvailable(f"remote device type unknown ({rtype})"))
    errors = {
        name: query(lib, "nvmlDeviceGetNvLinkErrorCounter", handle, link, k,
                    default_reason=f"NVLink {name} error counter")
        for k, name in enumerate(NVLINK_ERROR_COUNTERS)
    }
    return NvLink(link=link, active=active, version=version, remote_bus_id=remote,
                  remote_type=rtype, errors=errors)


def _mig_mode(lib, handle) -> Any:
    modes = query(lib, "nvmlDeviceGetMigMode", handle, default_reason="MIG mode")
    if not is_value(modes):
        return modes
    current = modes[0] if isinstance(modes, (list, tuple)) else modes
    return "enabled" if int(current) == 1 else "disabled"


def read_gpu(lib, gpu: Gpu, handle, max_links: int) -> Gpu:
    """Fill in everything about one GPU. Raises GpuLost as soon as NVML says the device is gone
    (``gpu`` then holds what was read until then)."""
    gpu.name = query(lib, "nvmlDeviceGetName", handle, default_reason="GPU name")
    gpu.uuid = query(lib, "nvmlDeviceGetUUID", handle, default_reason="GPU UUID")
    gpu.pci_bus_id = pci_info_bus_id(query(lib, "nvmlDeviceGetPciInfo", handle, default_reason="PCI info"))
    # NVML's NUMA node is the GPU memory's own node (coherent systems), not the socket's: the
    # socket's comes from sysfs (read_topology's ``sysfs_root``; gputopo.probe.host_facts).
    gpu.gpu_memory_numa_node = query(lib, "nvmlDeviceGetNumaNodeId", handle,
                                     default_reason="GPU memory NUMA node")
    words = query(lib, "nvmlDeviceGetCpuAffinity", handle, _affinity_words(),
                  default_reason="CPU affinity")
    if is_value(words):
        text = cpulist_from_mask(list(words))
        gpu.cpu_affinity = text if text else NotAvailable("CPU affinity: NVML returned an empty mask")
    else:
        gpu.cpu_affinity = words
    gpu.pcie = PcieLink(
        gen_current=query(lib, "nvmlDeviceGetCurrPcieLinkGeneration", handle, default_reason="PCIe generation"),
        gen_max=query(lib, "nvmlDeviceGetMaxPcieLinkGeneration", handle, default_reason="PCIe max generation"),
        width_current=query(lib, "nvmlDeviceGetCurrPcieLinkWidth", handle, default_reason="PCIe width"),
        width_max=query(lib, "nvmlDeviceGetMaxPcieLinkWidth", handle, default_reason="PCIe max width"),
        replay_counter=query(lib, "nvmlDeviceGetPcieReplayCounter", handle, default_reason="PCIe replay counter"),
    )
    gpu.mig_mode = _mig_mode(lib, handle)
    links = []
    for link in range(nvlink_count(lib, handle, max_links)):
        lk = _read_nvlink(lib, handle, link)
        if lk is not None:  # an unsupported link in the middle does not end the enumeration
            links.append(lk)
    gpu.nvlinks = links
    gpu.fabric = read_fabric(lib, handle)  # NVSwitch fabric registration, n/a outside a fabric
    return gpu


def mark_lost(gpu: Gpu, exc: GpuLost) -> Gpu:
    """A lost GPU: ``lost`` says why; its name, UUID and bus id stay when they were read before
    the loss (they say *which* GPU is gone), every other field is NotAvailable("GPU lost")."""
    na = NotAvailable(LOST)
    keep = lambda v: v if is_value(v) else na  # noqa: E731
    return Gpu(nvml_index=gpu.nvml_index, name=keep(gpu.name), uuid=keep(gpu.uuid),
               pci_bus_id=keep(gpu.pci_bus_id), cuda_index=na, numa_node=na, cpu_affinity=na,
               pcie=PcieLink(na, na, na, na, na), mig_mode=na, nvlinks=[], lost=Failed(str(exc)),
               fabric=na)


def failed_gpu(index: int, error: Any) -> Gpu:
    """A GPU NVML would not even give a handle for."""
    err = error if isinstance(error, (Failed, NotAvailable)) else Failed(str(error))
    return Gpu(nvml_index=index, name=err, uuid=err, pci_bus_id=err, cuda_index=err, numa_node=err,
               cpu_affinity=err, pcie=PcieLink(err, err, err, err, err), mig_mode=err, fabric=err)
