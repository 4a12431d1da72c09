"""NVML -> Topology: every GPU, its PCIe and NVLinks, and how each pair of GPUs connects.

Reads through an NVML library object (``pynvml`` from nvml_lib.load_nvml(), or a simulated
machine's fake NVML); every call goes through nvml_query.query, so an unsupported function is a
NotAvailable with its reason, a failing one a Failed, and a lost GPU is marked lost while the
others are read completely. Each GPU is read once (cached); pairs cost O(n^2) calls, nothing more.

Link class of a pair (i, j), as ``nvidia-smi topo -m`` names it (DESIGN.md):

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
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections import Counter
from typing import Any, Dict, List, Mapping, Optional, Tuple

from gputopo.errors import NoHardwareError
from gputopo.model.linkclass import LinkClass
from gputopo.model.topology import (NVLINK_ERROR_COUNTERS, P2P_CAPS, P2P_STATUS_NAMES, Gpu,
                                    HostInfo, NvLink, Pair, PcieLink, Topology)
from gputopo.model.values import Failed, NotAvailable, is_value
from gputopo.probe.cuda_index import cuda_indices
from gputopo.probe.host import try_bus_key
from gputopo.probe.host_facts import read_pci_numa_node
from gputopo.probe.nvml_codes import NVLINK_GENERATION, NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_FOUND
from gputopo.probe.nvml_query import P2P_CAP_INDEX, GpuLost, as_text, nvlink_count, query

#: NVLinks probed per GPU when the library does not say (NVML_NVLINK_MAX_LINKS of NVML 12).
DEFAULT_MAX_NVLINKS = 18
#: nvmlNvLinkDeviceType -> name.
REMOTE_TYPES = {0: "GPU", 1: "IBMNPU", 2: "SWITCH"}
LOST = "GPU lost"


# ----------------------------------------------------------------------------- helpers


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
    ranges = []
    for c in cpus:
        if ranges and c == ranges[-1][1] + 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in ranges)


def cuda_version_text(version: Any) -> Any:
    """NVML's CUDA driver version int (12040) as "12.4"; anything else unchanged."""
    if isinstance(version, int) and not isinstance(version, bool):
        return f"{version // 1000}.{(version % 1000) // 10}"
    return version


def _bus_id(info: Any) -> Any:
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


# ----------------------------------------------------------------------------- per GPU


def _read_nvlink(lib, handle, link: int) -> Optional[NvLink]:
    """One NVLink, or None when the GPU has no usable link with this index (unsupported, not
    found, or past its last link): such an index is skipped, the next ones are still read."""
    state = query(lib, "nvmlDeviceGetNvLinkState", handle, link, default_reason=f"NVLink {link} state",
                  not_available_codes=(NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_FOUND))
    if isinstance(state, NotAvailable):
        return None
    active = bool(state) if is_value(state) else state
    version = query(lib, "nvmlDeviceGetNvLinkVersion", handle, link, default_reason="NVLink version")
    if is_value(version):
        version = NVLINK_GENERATION.get(int(version), NotAvailable(
            f"NVLink version: unknown nvmlNvlinkVersion_t value {version}"))
    remote = _bus_id(query(lib, "nvmlDeviceGetNvLinkRemotePciInfo", handle, link,
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


def _read_gpu(lib, gpu: Gpu, handle, max_links: int) -> Gpu:
    """Fill in everything about one GPU. Raises GpuLost as soon as NVML says the device is gone
    (``gpu`` then holds what was read until then)."""
    gpu.name = query(lib, "nvmlDeviceGetName", handle, default_reason="GPU name")
    gpu.uuid = query(lib, "nvmlDeviceGetUUID", handle, default_reason="GPU UUID")
    gpu.pci_bus_id = _bus_id(query(lib, "nvmlDeviceGetPciInfo", handle, default_reason="PCI info"))
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
    return gpu


def _mark_lost(gpu: Gpu, exc: GpuLost) -> Gpu:
    """A lost GPU: ``lost`` says why; its name, UUID and bus id stay when they were read before
    the loss (they say *which* GPU is gone), every other field is NotAvailable("GPU lost")."""
    na = NotAvailable(LOST)
    keep = lambda v: v if is_value(v) else na  # noqa: E731
    return Gpu(nvml_index=gpu.nvml_index, name=keep(gpu.name), uuid=keep(gpu.uuid),
               pci_bus_id=keep(gpu.pci_bus_id), cuda_index=na, numa_node=na, cpu_affinity=na,
               pcie=PcieLink(na, na, na, na, na), mig_mode=na, nvlinks=[], lost=Failed(str(exc)))


def _failed_gpu(index: int, error: Any) -> Gpu:
    """A GPU NVML would not even give a handle for."""
    err = error if isinstance(error, (Failed, NotAvailable)) else Failed(str(error))
    return Gpu(nvml_index=index, name=err, uuid=err, pci_bus_id=err, cuda_index=err, numa_node=err,
               cpu_affinity=err, pcie=PcieLink(err, err, err, err, err), mig_mode=err)


# ----------------------------------------------------------------------------- pairs


_UNKNOWN_GPU = "?"  # bus key standing for the one GPU whose bus id could not be read


def _gpu_keys(gpus: List[Gpu]) -> List[Optional[str]]:
    """Bus key per GPU; when exactly one GPU's bus id is unknown (typically a lost GPU), it gets
    a placeholder key that peers' links to an unknown GPU bus id are attributed to."""
    keys = [try_bus_key(g.pci_bus_id) for g in gpus]
    if keys.count(None) == 1:
        keys[keys.index(None)] = _UNKNOWN_GPU
    return keys


def _nvlink_counts(gpus: List[Gpu], keys: List[Optional[str]]) -> Tuple[List[Counter], List[int]]:
    """Per GPU: active direct links per peer bus key, and the number of active switch links."""
    known = set(keys) - {None}
    direct: List[Counter] = []
    switch: List[int] = []
    for g in gpus:
        to_peer: Counter = Counter()
        n_switch = 0
        for lk in g.active_nvlinks():
            if lk.remote_type == "SWITCH":
                n_switch += 1
                continue
            key = try_bus_key(lk.remote_bus_id)
            if key in known and (lk.remote_type == "GPU" or not is_value(lk.remote_type)):
                to_peer[key] += 1
            elif key is not None and lk.remote_type == "GPU" and _UNKNOWN_GPU in known:
                to_peer[_UNKNOWN_GPU] += 1  # a GPU NVML lists but cannot name: the unknown one
        direct.append(to_peer)
        switch.append(n_switch)
    return direct, switch


def _links_trusted(g: Gpu) -> bool:
    """Whether a GPU's own NVLink list is complete enough that a missing link means no link."""
    return g.lost is None and is_value(g.pci_bus_id) and all(isinstance(lk.active, bool) for lk in g.nvlinks)


def _nvlink_count(a: int, b: int, gpus, keys, direct, switch) -> int:
    """Active NVLinks between GPUs a and b: the smaller count of the sides that were fully read,
    else the larger count any side saw (a link seen up is up)."""
    seen = [direct[x][keys[y]] for x, y in ((a, b), (b, a)) if keys[y] is not None]
    trusted = [direct[x][keys[y]] for x, y in ((a, b), (b, a))
               if keys[y] is not None and _links_trusted(gpus[x])]
    n = min(trusted) if trusted else max(seen, default=0)
    if switch[a] and switch[b]:
        n += min(switch[a], switch[b])
    return n


def _pcie_class(lib, ha, hb, ga: Gpu, gb: Gpu) -> Optional[LinkClass]:
    try:
        level = query(lib, "nvmlDeviceGetTopologyCommonAncestor", ha, hb,
                      default_reason="topology common ancestor")
    except GpuLost:
        level = Failed(LOST)
    if is_value(level):
        try:
            return LinkClass.from_nvml_level(int(level))
        except ValueError:
            pass
    if isinstance(ga.numa_node, int) and isinstance(gb.numa_node, int) and ga.numa_node != gb.numa_node:
        return LinkClass("SYS")
    return None


def _p2p_status(lib, ha, hb, unreadable: Optional[str]) -> Dict[str, Any]:
    """P2P status per capability for row ``ha``, column ``hb``; all NotAvailable(unreadable) when
    one of the GPUs cannot be asked."""
    out: Dict[str, Any] = {}
    for cap in P2P_CAPS:
        if unreadable:
            out[cap] = NotAvailable(unreadable)
            continue
        try:
            v = query(lib, "nvmlDeviceGetP2PStatus", ha, hb, P2P_CAP_INDEX[cap],
                      default_reason=f"P2P {cap} status")
        except GpuLost as exc:
            v = Failed(str(exc))
        if is_value(v):
            v = P2P_STATUS_NAMES.get(int(v), NotAvailable(f"unrecognised NVML P2P status {v}"))
        out[cap] = v
    return out


def _read_pairs(lib, gpus: List[Gpu], handles: List[Any]) -> List[Pair]:
    keys = _gpu_keys(gpus)
    direct, switch = _nvlink_counts(gpus, keys)
    pairs = []
    n = len(gpus)
    for a in range(n):
        for b in range(a + 1, n):
            ga, gb = gpus[a], gpus[b]
            ha, hb = handles[a], handles[b]
            count = _nvlink_count(a, b, gpus, keys, direct, switch)
            if count:
                cls: Optional[LinkClass] = LinkClass("NV", count)
            elif ha is None or hb is None:
                cls = None
            else:
                cls = _pcie_class(lib, ha, hb, ga, gb)
            if cls is None:
                continue  # nothing tells how they connect: omitted (module docstring)
            if ga.lost is not None or gb.lost is not None:
                unreadable: Optional[str] = LOST
            elif ha is None or hb is None:
                unreadable = f"no NVML handle for GPU {ga.nvml_index if ha is None else gb.nvml_index}"
            else:
                unreadable = None
            pairs.append(Pair(gpus=(ga.nvml_index, gb.nvml_index), link_class=cls,
                              nvlink_count=count, p2p=_p2p_status(lib, ha, hb, unreadable)))
    return pairs


# ----------------------------------------------------------------------------- system


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
            bus = _bus_id(query(lib, "nvmlDeviceGetPciInfo", handle, default_reason="PCI info")) \
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
            gpus.append(_mark_lost(gpu, exc))
            handles.append(None)
            continue
        if not is_value(handle):
            gpus.append(_failed_gpu(index, handle))
            handles.append(None)
            continue
        handles.append(handle)
        try:
            gpus.append(_read_gpu(lib, gpu, handle, max_links))
        except GpuLost as exc:
            gpus.append(_mark_lost(gpu, exc))
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

    pairs = _read_pairs(lib, gpus, handles)
    return Topology(gpus=gpus, pairs=pairs, host=host, source=source, simulated=simulated,
                    machine=machine)
