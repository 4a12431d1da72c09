"""The NVLinks of a machine description: each GPU's ports (``nvlinks``, ``nvlink_errors``), wired
to its peers from the NV<n> pair classes or spread over NVSwitches (``nvswitch = true``), then
taken down by ``nvlinks_down`` and ``link_down`` faults (a scan then sees the pair's PCIe class).
"""

from __future__ import annotations

from typing import Any, Dict, List, Set, Tuple

from gputopo.model.linkclass import LinkClass
from gputopo.model.topology import NVLINK_ERROR_COUNTERS

from .description_context import DescContext, check_int, check_str
from .records import Fault
from .pci import PciAddress
from .records import DEFAULT_NVSWITCHES, GpuDesc, NvLinkDesc, shared_link_class


def wire_nvlinks(ctx: DescContext, data: Dict[str, Any], gpus: List[GpuDesc], specs: List[Dict[str, Any]],
                 faults: List[Fault], wired: Dict[Tuple[int, int], LinkClass], nvswitch: bool
                 ) -> Tuple[List[str], Dict[Tuple[int, int], int]]:
    """Make every GPU's NVLink ports, wire them and take the down ones down.

    Returns (the NVSwitches' bus ids, active NVLinks per directly linked pair); ``wired`` gets
    the NV<n> class of each pair behind NVSwitches."""
    switch_ids: List[str] = []
    peer_links: Dict[Tuple[int, int], Tuple[List[int], List[int]]] = {}
    if nvswitch:
        switch_ids = _wire_switch(ctx, data, gpus, specs, wired)
    else:
        peer_links = _wire_direct(ctx, gpus, specs, wired)
    _apply_link_downs(ctx, gpus, specs, faults, wired, nvswitch, peer_links)
    nv_active: Dict[Tuple[int, int], int] = {}
    if not nvswitch:
        for (i, j), (li, _lj) in peer_links.items():
            nv_active[(i, j)] = sum(1 for a in li if gpus[i].nvlinks[a].active)
    return switch_ids, nv_active


def _ports(ctx, spec, idx, needed, model_ports: int = 0) -> int:
    """The GPU's NVLink ports: ``nvlinks`` when given, else its model's (NVML lists every port of
    an NVLink-capable GPU, bridged or not: the unused ones inactive, with no far end), else as
    many as its pairs need."""
    if "nvlinks" in spec:
        ports = check_int(ctx, spec["nvlinks"], 0, 36, "gpu", idx, "nvlinks")
        if ports < needed:
            raise ctx.error(f"GPU {idx} has {ports} NVLink ports but its pairs need {needed}",
                            "gpu", idx, "nvlinks")
        return ports
    return max(needed, model_ports)


def _error_counts(ctx, spec, idx, ports) -> Dict[int, Dict[str, int]]:
    """Per link: error counters from the GPU's nvlink_errors (by counter for all links, or by link)."""
    table = spec.get("nvlink_errors", {})
    key = ("gpu", idx, "nvlink_errors")
    if not isinstance(table, dict):
        raise ctx.error("expected a table of counters (replay, recovery, crc_flit, crc_data) or of links", *key)
    per_link: Dict[int, Dict[str, int]] = {}

    def counters(d, k):
        if not isinstance(d, dict):
            raise ctx.error("expected a table of counters", *key, k)
        for c, v in d.items():
            if c not in NVLINK_ERROR_COUNTERS:
                raise ctx.error(f"unknown NVLink error counter {c!r}; counters: "
                                f"{', '.join(NVLINK_ERROR_COUNTERS)}", *key, k)
            check_int(ctx, v, 0, 2**64 - 1, *key, k)
        return d

    for k, v in table.items():
        if k.isdigit():
            link = int(k)
            if link >= ports:
                raise ctx.error(f"GPU {idx} has no NVLink {link} (it has {ports})", *key, k)
            per_link.setdefault(link, {}).update(counters(v, k))
        elif k in NVLINK_ERROR_COUNTERS:
            check_int(ctx, v, 0, 2**64 - 1, *key, k)
            for link in range(ports):
                per_link.setdefault(link, {})[k] = v
        else:
            raise ctx.error(f"unknown key {k!r}: use a counter name ({', '.join(NVLINK_ERROR_COUNTERS)}) "
                            "or a link number", *key, k)
    return per_link


def _make_links(gpu: GpuDesc, ports: int, errors: Dict[int, Dict[str, int]]) -> None:
    gpu.nvlinks = []
    for link in range(ports):
        counts = {c: 0 for c in NVLINK_ERROR_COUNTERS}
        counts.update(errors.get(link, {}))
        gpu.nvlinks.append(NvLinkDesc(link=link, active=True, remote_bus_id=None, remote_type="GPU",
                                      errors=counts))


def _wire_direct(ctx, gpus, specs, wired):
    """Direct NVLinks from NV<n> pairs: n links on each GPU whose remote is the peer."""
    n = len(gpus)
    need = [0] * n
    for (i, j), cls in wired.items():
        if cls.is_nvlink:
            need[i] += cls.nvlinks
            need[j] += cls.nvlinks
    for g in gpus:
        model_ports = g.sim_model.nvlink_ports if g.nvlink_version is not None else 0
        ports = _ports(ctx, specs[g.index], g.index, need[g.index], model_ports)
        if ports and g.nvlink_version is None:
            raise ctx.error(f"GPU {g.index} ({g.name}) has NVLinks: set its nvlink_version",
                            "gpu", g.index, "nvlink_version")
        _make_links(g, ports, _error_counts(ctx, specs[g.index], g.index, ports))
    used = [0] * n
    peer_links: Dict[Tuple[int, int], Tuple[List[int], List[int]]] = {}
    for (i, j) in sorted(wired):
        cls = wired[(i, j)]
        if not cls.is_nvlink:
            continue
        li = list(range(used[i], used[i] + cls.nvlinks))
        lj = list(range(used[j], used[j] + cls.nvlinks))
        used[i] += cls.nvlinks
        used[j] += cls.nvlinks
        for a in li:
            gpus[i].nvlinks[a].remote_bus_id = gpus[j].bus_id
        for b in lj:
            gpus[j].nvlinks[b].remote_bus_id = gpus[i].bus_id
        peer_links[(i, j)] = (li, lj)
    for g in gpus:  # ports nothing is plugged into
        for lk in g.nvlinks[used[g.index]:]:
            lk.active = False
    return peer_links


def _wire_switch(ctx, data, gpus, specs, wired) -> List[str]:
    """NVSwitch: each GPU's ports spread over the switches; every pair NV<min ports>."""
    ports_list = []
    for g in gpus:
        spec = specs[g.index]
        if "nvlinks" not in spec:
            raise ctx.error("nvswitch = true needs the number of NVLink ports per GPU (nvlinks = 12 "
                            "in [defaults])", "defaults", "nvlinks")
        ports = _ports(ctx, spec, g.index, 0)
        if ports and g.nvlink_version is None:
            raise ctx.error(f"GPU {g.index} ({g.name}) has NVLinks: set its nvlink_version",
                            "gpu", g.index, "nvlink_version")
        ports_list.append(ports)
    version = max((g.nvlink_version or 0) for g in gpus)
    if "nvswitch_bus_ids" in data:
        raw = data["nvswitch_bus_ids"]
        if not isinstance(raw, list) or not raw:
            raise ctx.error("expected a list of PCI addresses", "nvswitch_bus_ids")
        try:
            switch_ids = [PciAddress.parse(check_str(ctx, b, "nvswitch_bus_ids")).nvml for b in raw]
        except ValueError as exc:
            raise ctx.error(str(exc), "nvswitch_bus_ids") from None
    else:
        count = check_int(ctx, data.get("nvswitches", DEFAULT_NVSWITCHES.get(version, 4)), 1, 64, "nvswitches")
        taken = {g.address.bus for g in gpus if g.address.domain == 0}
        buses = [b for b in range(0xC4, 0x100) if b not in taken][:count]
        switch_ids = [PciAddress(0, b, 0, 0).nvml for b in buses]
    gpu_bus = {g.bus_id for g in gpus}
    for s in switch_ids:
        if s in gpu_bus:
            raise ctx.error(f"NVSwitch address {s} is a GPU's", "nvswitch_bus_ids")
    s_count = len(switch_ids)
    for g, ports in zip(gpus, ports_list):
        _make_links(g, ports, _error_counts(ctx, specs[g.index], g.index, ports))
        sizes = [ports // s_count + (1 if k < ports % s_count else 0) for k in range(s_count)]
        link = 0
        for k, size in enumerate(sizes):
            for _ in range(size):
                g.nvlinks[link].remote_bus_id = switch_ids[k]
                g.nvlinks[link].remote_type = "SWITCH"
                link += 1
    n = len(gpus)
    for i in range(n):
        for j in range(i + 1, n):
            m = min(ports_list[i], ports_list[j])
            if m:
                wired[(i, j)] = shared_link_class(f"NV{m}")
    return switch_ids


def _apply_link_downs(ctx, gpus, specs, faults, wired, nvswitch, peer_links) -> None:
    down: Set[Tuple[int, int]] = set()  # (gpu, link)
    for g in gpus:
        spec = specs[g.index]
        if "nvlinks_down" not in spec:
            continue
        v = spec["nvlinks_down"]
        key = ("gpu", g.index, "nvlinks_down")
        if v is True or v == "all":
            down.update((g.index, lk.link) for lk in g.nvlinks)
        elif v is False:
            pass
        elif isinstance(v, list):
            for link in v:
                if not isinstance(link, int) or isinstance(link, bool) or not 0 <= link < len(g.nvlinks):
                    raise ctx.error(f"GPU {g.index} has no NVLink {link!r} (it has {len(g.nvlinks)}: "
                                    f"0..{len(g.nvlinks) - 1})" if g.nvlinks else
                                    f"GPU {g.index} has no NVLinks to take down", *key)
                down.add((g.index, link))
        else:
            raise ctx.error("expected \"all\", true, or a list of link numbers", *key)
    for k, f in enumerate(faults):
        if f.what != "link_down":
            continue
        if f.scope == "gpu":
            g = gpus[f.gpus[0]]
            if not g.nvlinks:
                raise ctx.error(f"link_down on GPU {g.index}, which has no NVLinks", "fault", k, "where")
            down.update((g.index, lk.link) for lk in g.nvlinks)
        elif f.scope == "pair":
            if nvswitch:
                raise ctx.error("on an NVSwitch machine a pair has no links of its own: take a GPU's "
                                "links down with where = \"gpu:N\"", "fault", k, "where")
            if f.gpus not in peer_links:
                raise ctx.error(f"link_down on pair {f.gpus[0]},{f.gpus[1]}, which has no NVLinks",
                                "fault", k, "where")
            li, lj = peer_links[f.gpus]
            down.update((f.gpus[0], a) for a in li)
        else:
            hit = [p for p, cls in wired.items() if cls.is_nvlink and f.matches_class(cls)]
            if not hit:
                raise ctx.error(f"link_down on class {f.link_class}, which no pair has", "fault", k, "where")
            if nvswitch:
                for i, j in hit:
                    down.update((x, lk.link) for x in (i, j) for lk in gpus[x].nvlinks)
            else:
                for p in hit:
                    down.update((p[0], a) for a in peer_links[p][0])
    # a link is one cable: both ends are down when either is
    if peer_links:
        for (i, j), (li, lj) in peer_links.items():
            for a, b in zip(li, lj):
                if (i, a) in down or (j, b) in down:
                    down.add((i, a))
                    down.add((j, b))
    for g_idx, link in down:
        gpus[g_idx].nvlinks[link].active = False

