"""NVML -> Topology.pairs: how each pair of GPUs connects (NV<n> or a PCIe class) and its P2P
status per capability.

Part of gputopo.probe.nvml_reader, whose docstring gives the rules (direct and NVSwitch link
counts, the PCIe class and its NUMA fallback, omitted pairs, lost GPUs). Works on GPUs already
read; the only NVML calls are the topology common ancestor and the P2P status of each pair.
"""

from __future__ import annotations

import contextlib
import functools
import gc
from collections import Counter
from typing import Any, Callable, Dict, List, Optional, Tuple

from gputopo.model.linkclass import LinkClass
from gputopo.model.topology import P2P_CAPS, P2P_STATUS_NAMES, Gpu, Pair
from gputopo.model.values import Failed, NotAvailable, is_value
from gputopo.model.bus_id import try_bus_key
from gputopo.probe.nvml_gpu import LOST
from gputopo.probe.nvml_query import P2P_CAP_INDEX, GpuLost, as_text, asker, nvml_failure

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


def _p2p_reader(lib) -> Callable[[Any, Any], Dict[str, Any]]:
    """``read(ha, hb)``: the P2P status per capability for row ``ha``, column ``hb``, one
    nvmlDeviceGetP2PStatus call per capability, each failure what :func:`query` makes of it
    (a lost GPU: Failed for that capability). query's steps are written out here because this
    runs five times per pair, 2.6 million times on 1,024 GPUs."""
    name = "nvmlDeviceGetP2PStatus"
    fn = getattr(lib, name, None)
    caps = [(cap, f"P2P {cap} status", P2P_CAP_INDEX[cap]) for cap in P2P_CAPS]

    def read(ha, hb) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        for cap, what, index in caps:
            if fn is None:
                v: Any = NotAvailable(f"{what}: {name} is not in these NVML bindings (nvidia-ml-py too old)")
            else:
                try:
                    v = fn(ha, hb, index)
                except Exception as exc:  # noqa: BLE001 - every failure becomes a typed value
                    try:
                        v = nvml_failure(exc, name, what)
                    except GpuLost as lost:
                        v = Failed(str(lost))
                else:
                    if isinstance(v, (bytes, bytearray)):
                        v = as_text(v)
            if v.__class__ is int or is_value(v):
                status = P2P_STATUS_NAMES.get(int(v))
                v = status if status is not None else NotAvailable(f"unrecognised NVML P2P status {v}")
            out[cap] = v
        return out

    return read


def _unreadable_p2p(reason: str) -> Dict[str, Any]:
    return {cap: NotAvailable(reason) for cap in P2P_CAPS}


@contextlib.contextmanager
def _no_gc_pauses():
    """The cyclic garbage collector off while the pairs are read: they make no cycles, and its
    passes over the growing list (half a million pairs on 1,024 GPUs) cost a fifth of the loop."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def read_pairs(lib, gpus: List[Gpu], handles: List[Any]) -> List[Pair]:
    keys = _gpu_keys(gpus)
    direct, switch = _nvlink_counts(gpus, keys)
    trusted = [_links_trusted(g) for g in gpus]
    ask_level = asker(lib, "nvmlDeviceGetTopologyCommonAncestor", default_reason="topology common ancestor")
    read_p2p = _p2p_reader(lib)
    pairs = []
    n = len(gpus)
    with _no_gc_pauses():
        for a in range(n):
            ga, ha = gpus[a], handles[a]
            for b in range(a + 1, n):
                gb, hb = gpus[b], handles[b]
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
                    p2p = _unreadable_p2p(LOST)
                elif ha is None or hb is None:
                    p2p = _unreadable_p2p(f"no NVML handle for GPU {ga.nvml_index if ha is None else gb.nvml_index}")
                else:
                    p2p = read_p2p(ha, hb)
                pairs.append(Pair(gpus=(ga.nvml_index, gb.nvml_index), link_class=cls,
                                  nvlink_count=count, p2p=p2p))
    return pairs
