"""NVML -> Topology.pairs: how each pair of GPUs connects (NV<n> or a PCIe class) and its P2P
status per capability.

Part of gputopo.probe.nvml_reader, whose docstring gives the rules (direct and NVSwitch link
counts, the PCIe class and its NUMA fallback, omitted pairs, lost GPUs). Works on GPUs already
read; the only NVML calls are the topology common ancestor and the P2P status of each pair.
"""

from __future__ import annotations

import functools
from collections import Counter
from typing import Any, Dict, List, Optional, Tuple

from gputopo.model.linkclass import LinkClass
from gputopo.model.topology import P2P_CAPS, P2P_STATUS_NAMES, Gpu, Pair
from gputopo.model.values import Failed, NotAvailable, is_value
from gputopo.probe.bus_id import try_bus_key
from gputopo.probe.nvml_gpu import LOST
from gputopo.probe.nvml_query import P2P_CAP_INDEX, GpuLost, asker

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


def _nvlink_count(a: int, b: int, keys, direct, switch, trusted: List[bool]) -> int:
    """Active NVLinks between GPUs a and b: the smaller count of the sides that were fully read,
    else the larger count any side saw (a link seen up is up). ``trusted``: _links_trusted per
    GPU, worked out once, not once per pair."""
    ka, kb = keys[a], keys[b]
    ab: int = 0 if kb is None else direct[a].get(kb, 0)  # what a's side says
    ba: int = 0 if ka is None else direct[b].get(ka, 0)
    sure_ab = kb is not None and trusted[a]  # a side that cannot name the other says nothing
    sure_ba = ka is not None and trusted[b]
    if sure_ab and sure_ba:
        n = min(ab, ba)
    elif sure_ab or sure_ba:
        n = ab if sure_ab else ba
    else:
        n = max(ab, ba)
    if switch[a] and switch[b]:
        n += min(switch[a], switch[b])
    return n


def _pcie_class(ask_level, ha, hb, ga: Gpu, gb: Gpu) -> Optional[LinkClass]:
    try:
        level = ask_level(ha, hb)
    except GpuLost:
        level = Failed(LOST)
    if is_value(level):
        try:
            return _level_class(int(level))
        except ValueError:
            pass
    if isinstance(ga.numa_node, int) and isinstance(gb.numa_node, int) and ga.numa_node != gb.numa_node:
        return LinkClass("SYS")
    return None


@functools.lru_cache(maxsize=64)
def _level_class(level: int) -> LinkClass:
    """The PCIe class of an NVML topology level (ValueError for one that is none), one shared
    object per level: a big machine has hundreds of thousands of pairs and a handful of levels."""
    return LinkClass.from_nvml_level(level)


@functools.lru_cache(maxsize=64)
def _nv_class(count: int) -> LinkClass:
    """NV<count>, one shared (frozen) object per count."""
    return LinkClass("NV", count)


def _p2p_askers(lib) -> List[Tuple[str, Any, int]]:
    """(capability, its bound nvmlDeviceGetP2PStatus query, its NVML index) per capability."""
    return [(cap, asker(lib, "nvmlDeviceGetP2PStatus", default_reason=f"P2P {cap} status"),
             P2P_CAP_INDEX[cap]) for cap in P2P_CAPS]


def _p2p_status(askers, ha, hb, unreadable: Optional[str]) -> Dict[str, Any]:
    """P2P status per capability for row ``ha``, column ``hb``; all NotAvailable(unreadable) when
    one of the GPUs cannot be asked."""
    out: Dict[str, Any] = {}
    for cap, ask, index in askers:
        if unreadable:
            out[cap] = NotAvailable(unreadable)
            continue
        try:
            v = ask(ha, hb, index)
        except GpuLost as exc:
            v = Failed(str(exc))
        if is_value(v):
            name = P2P_STATUS_NAMES.get(int(v))
            v = name if name is not None else NotAvailable(f"unrecognised NVML P2P status {v}")
        out[cap] = v
    return out


def read_pairs(lib, gpus: List[Gpu], handles: List[Any]) -> List[Pair]:
    keys = _gpu_keys(gpus)
    direct, switch = _nvlink_counts(gpus, keys)
    trusted = [_links_trusted(g) for g in gpus]
    ask_level = asker(lib, "nvmlDeviceGetTopologyCommonAncestor", default_reason="topology common ancestor")
    p2p_askers = _p2p_askers(lib)
    pairs = []
    n = len(gpus)
    for a in range(n):
        for b in range(a + 1, n):
            ga, gb = gpus[a], gpus[b]
            ha, hb = handles[a], handles[b]
            count = _nvlink_count(a, b, keys, direct, switch, trusted)
            if count:
                cls: Optional[LinkClass] = _nv_class(count)
            elif ha is None or hb is None:
                cls = None
            else:
                cls = _pcie_class(ask_level, ha, hb, ga, gb)
            if cls is None:
                continue  # nothing tells how they connect: omitted (module docstring)
            if ga.lost is not None or gb.lost is not None:
                unreadable: Optional[str] = LOST
            elif ha is None or hb is None:
                unreadable = f"no NVML handle for GPU {ga.nvml_index if ha is None else gb.nvml_index}"
            else:
                unreadable = None
            pairs.append(Pair(gpus=(ga.nvml_index, gb.nvml_index), link_class=cls,
                              nvlink_count=count, p2p=_p2p_status(p2p_askers, ha, hb, unreadable)))
    return pairs
