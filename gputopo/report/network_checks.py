"""The network path of every GPU: its nearest RDMA NIC, whether NCCL would use GPUDirect RDMA on
that path by NCCL's distance rule, the kernel side of GPUDirect RDMA, and the NICs' health. Turns
the scan's NIC facts (model/topology.py Nic, model/nic.py NicPort/GdrKernel) into findings.

NCCL's rule, as read in NCCL 2.30.7 (``src/graph/paths.cc``, ``ncclTopoCheckGdr``): GPUDirect
RDMA is used between a GPU and a NIC when both support it and the path type between them is
at most the GDR level. The default level is ``PATH_P2C`` since NCCL 2.26 (``NCCL_NET_GDR_C2C=1``;
``PATH_PXB`` before), and on a machine without C2C (anything but Grace) no GPU-NIC path is P2C,
so in effect: PIX and PXB yes, PHB and SYS no. ``NCCL_NET_GDR_LEVEL`` replaces the level: a path
name (``LOC NVL NVB C2C PIX PXB P2C PXN PHB SYS``) or an old number (0 LOC, 1 PIX, 2 PXB, 3 PHB,
4 and up SYS); anything else leaves the default. NCCL's path types order LOC < NVL < NVB < C2C <
PIX < PXB < P2C < PXN < PHB < SYS. nvidia-smi's NODE (through the CPU, one NUMA node) is NCCL's
PHB (NCCL has one CPU node per NUMA node); its SYS is NCCL's SYS.

``NCCL_NET_GDR_READ`` applies to sends only (the NIC reading GPU memory): ``0`` turns GPUDirect
RDMA off for sends; the default turns it off for sends from a GPU of compute capability < 8.0
(pre-Ampere) that has no NVLink to another GPU (on a machine of more than one GPU).

What this does not do: predict NCCL's choice of NIC for a GPU (rails, PXN, the version-dependent
search). "Nearest NIC" here is the NIC(s) of the best PCIe class to the GPU among those with an
Active port (NCCL uses no other), said as such.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from gputopo.model import Finding, LinkClass, Topology
from gputopo.model.bus_id import try_bus_key, try_parse
from gputopo.model.finding import gpu_ranges
from gputopo.model.nic import GdrKernel, NicPort
from gputopo.model.values import NotAvailable, is_value

#: The NCCL source the rule below was read from.
NCCL_VERSION_READ = "2.30.7"
#: NCCL's path types in order (src/graph/topo.cc topoPathTypeStr).
NCCL_PATHS = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS", "NET", "DIS")
#: NCCL_NET_GDR_LEVEL's old numbers (src/graph/paths.cc levelsOldToNew).
_OLD_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS", "SYS")
DEFAULT_GDR_LEVEL = "P2C"
#: nvidia-smi's class of a GPU-NIC path -> NCCL's path type.
SMI_TO_NCCL = {"PIX": "PIX", "PXB": "PXB", "PHB": "PHB", "NODE": "PHB", "SYS": "SYS"}
#: GPUs that reach their CPU over NVLink-C2C, where NCCL's P2C path type exists and the scan cannot tell it.
_C2C_NAMES = ("GH200", "GB200", "GB300", "GH100 C2C")
#: Classes at which a NIC is beside its GPU (one PCIe tree below a host bridge).
NEAR = ("PIX", "PXB", "PHB")


def gdr_level(env: Optional[Mapping[str, str]] = None) -> Tuple[str, str]:
    """(NCCL path type of the GDR level, where it came from) as ncclGetLevel reads NCCL_NET_GDR_LEVEL."""
    env = os.environ if env is None else env
    raw = env.get("NCCL_NET_GDR_LEVEL")
    default = (DEFAULT_GDR_LEVEL, f"NCCL {NCCL_VERSION_READ}'s default; PXB before 2.26")
    if raw is None:
        return default
    if raw in NCCL_PATHS[:NCCL_PATHS.index("SYS") + 1]:
        return raw, f"NCCL_NET_GDR_LEVEL={raw} in the scan's environment"
    if raw[:1].isdigit():
        digits = "".join(c for c in raw if c.isdigit()) if raw.isdigit() else raw[:1]
        old = min(int(digits), len(_OLD_LEVELS) - 1)
        return _OLD_LEVELS[old], f"NCCL_NET_GDR_LEVEL={raw} in the scan's environment (old numbering)"
    return default[0], f"{default[1]}; NCCL_NET_GDR_LEVEL={raw!r} is no level NCCL knows and is ignored"


def gdr_read_off(env: Optional[Mapping[str, str]] = None) -> bool:
    """NCCL_NET_GDR_READ=0 in the environment: no GPUDirect RDMA for sends."""
    env = os.environ if env is None else env
    try:
        return int(env.get("NCCL_NET_GDR_READ", "-2"), 0) == 0
    except ValueError:
        return False


@dataclass
class GpuNetPath:
    """One GPU's nearest NIC(s) and what NCCL's distance rule says of that path."""

    gpu: int
    nics: List[str]  # labels of the nearest NICs ("NIC0")
    devices: List[str]  # their RDMA device names ("mlx5_0")
    link_class: Optional[LinkClass]
    nccl_path: Any  # NCCL path type ("PIX") | NotAvailable
    gdr_by_distance: Any  # bool (receives) | NotAvailable
    gdr_send: Any  # bool | NotAvailable (NCCL_NET_GDR_READ's rule)
    level: str = DEFAULT_GDR_LEVEL
    notes: List[str] = field(default_factory=list)

    def to_json(self) -> Dict[str, Any]:
        def enc(v):
            return v.to_json() if isinstance(v, NotAvailable) else v
        return {"gpu": self.gpu, "nearest_nics": self.nics, "nearest_devices": self.devices,
                "link_class": str(self.link_class) if self.link_class is not None else None,
                "nccl_path": enc(self.nccl_path), "gdr_level": self.level,
                "gdr_by_distance": enc(self.gdr_by_distance), "gdr_send": enc(self.gdr_send),
                "notes": self.notes}


def _device(nic) -> str:
    return nic.device if is_value(nic.device) else nic.label


def usable_nics(topo: Topology) -> List[Any]:
    """The NICs NCCL's IB transport can use: those with an Active port (NCCL 2.30.7
    ``src/transport/net_ib/init.cc`` skips a port whose state is not IBV_PORT_ACTIVE), or whose
    ports were not read (a topology from `nvidia-smi topo -m` text). When no NIC has an Active
    port, all of them (the port findings say why none is usable)."""
    def usable(n) -> bool:
        return not n.ports or any(p.state == "Active" or not is_value(p.state) for p in n.ports)
    return [n for n in topo.nics if usable(n)] or list(topo.nics)


def gpu_network_paths(topo: Topology, env: Optional[Mapping[str, str]] = None) -> List[GpuNetPath]:
    """Each GPU's nearest RDMA NIC(s) by PCIe class and NCCL's GDR distance rule on that path;
    empty when the machine has no NIC."""
    if not topo.nics:
        return []
    level, _ = gdr_level(env)
    read_off = gdr_read_off(env)
    usable = usable_nics(topo)
    out = []
    for g in topo.gpus:
        classes = [(n.gpu_classes[g.nvml_index], n) for n in usable if g.nvml_index in n.gpu_classes]
        if not classes:
            continue
        best = min(c for c, _ in classes)
        near = [n for c, n in classes if c == best]
        path = SMI_TO_NCCL.get(best.kind)
        notes: List[str] = []
        gdr: Any
        if path is None:
            nccl_path: Any = NotAvailable(f"class {best} is no GPU-NIC class NCCL's rule knows")
            gdr = nccl_path
        elif is_value(g.name) and any(k in str(g.name) for k in _C2C_NAMES):
            nccl_path = NotAvailable("the GPU reaches its CPU over NVLink-C2C, where NCCL's P2C path "
                                     "type applies and a scan cannot tell it")
            gdr = nccl_path
        elif isinstance(g.gpu_memory_numa_node, int) and not isinstance(g.gpu_memory_numa_node, bool):
            # a GPU whose memory is a NUMA node of its own is attached coherently to its CPU
            # (NVLink-C2C on Grace; nvidia-smi prints the GPU-NIC class there as SYS)
            nccl_path = NotAvailable(f"the GPU's memory is NUMA node {g.gpu_memory_numa_node} (GPU NUMA ID): it "
                                     "reaches its CPU over a coherent link (NVLink-C2C), where nvidia-smi's class "
                                     "does not give NCCL's path (P2C applies) and a scan cannot tell it")
            gdr = nccl_path
        else:
            nccl_path = path
            gdr = NCCL_PATHS.index(path) <= NCCL_PATHS.index(level)
        send: Any = gdr
        if read_off and gdr is True:
            send = False
            notes.append("NCCL_NET_GDR_READ=0: no GPUDirect RDMA for sends")
        elif gdr is True and len(topo.gpus) > 1 and not g.active_nvlinks():
            send = NotAvailable("NCCL turns it off for sends from a GPU of compute capability < 8.0 "
                                "(pre-Ampere) with no NVLink to another GPU; the scan does not read "
                                "compute capability")
        out.append(GpuNetPath(gpu=g.nvml_index, nics=[n.label for n in near], devices=[_device(n) for n in near],
                              link_class=best, nccl_path=nccl_path, gdr_by_distance=gdr, gdr_send=send,
                              level=level, notes=notes))
    return out


def network_json(topo: Topology, env: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
    """The scan document's ``network`` key: GDR level, the kernel side, each GPU's path."""
    level, where = gdr_level(env)
    gdr = topo.host.gpudirect_rdma
    return {
        "rdma_nics": len(topo.nics),
        "gdr_level": {"nccl_path": level, "source": where, "nccl_version_read": NCCL_VERSION_READ},
        "gpudirect_rdma": gdr.to_json() if isinstance(gdr, GdrKernel) else
        (gdr.to_json() if hasattr(gdr, "to_json") else gdr),
        "gpus": [p.to_json() for p in gpu_network_paths(topo, env)],
    }


# ----------------------------------------------------------------------------- the scan's lines


def no_nic_line(topo: Topology) -> str:
    """The one line a machine without RDMA NICs gets (not a problem, no finding)."""
    if isinstance(topo.host.gpudirect_rdma, GdrKernel):
        return ("Network: no RDMA NIC (/sys/class/infiniband lists none with a PCI function): nothing to "
                "judge for traffic between machines")
    return f"Network: no RDMA NIC in this source ({topo.source})"


def gdr_line(topo: Topology) -> str:
    """'GPUDirect RDMA (kernel): available (nvidia_peermem loaded; dma-buf: no, ...)'."""
    level, where = gdr_level()
    g = topo.host.gpudirect_rdma
    rule = f"NCCL GDR level {level} ({where})"
    if not isinstance(g, GdrKernel):
        return f"GPUDirect RDMA (kernel side): n/a ({getattr(g, 'reason', g)}); {rule}"
    avail = g.available
    head = "available" if avail is True else "UNAVAILABLE" if avail is False else f"n/a ({avail.reason})"
    peermem = (f"{g.peermem_module} loaded" if g.peermem is True else "no peer-memory module loaded"
               if g.peermem is False else f"peer-memory module n/a ({g.peermem.reason})")
    dmabuf = ("can work" if g.dmabuf is True else "no" if g.dmabuf is False else "n/a")
    return f"GPUDirect RDMA (kernel side): {head}: {peermem}; dma-buf {dmabuf} ({g.dmabuf_reason}); {rule}"


def port_cells(nic, p: NicPort) -> List[str]:
    """One row of the scan's NIC port table."""
    def link(gen, width):
        parts = ([f"Gen{gen}"] if is_value(gen) else []) + ([f"x{width}"] if is_value(width) else [])
        return " ".join(parts) or "n/a"
    now, most = link(p.pcie_gen_current, p.pcie_width_current), link(p.pcie_gen_max, p.pcie_width_max)
    errors = {k: v for k, v in p.counters.items() if isinstance(v, int) and v > 0}
    counted = [v for v in p.counters.values() if isinstance(v, int)]
    err = (", ".join(f"{k} {v}" for k, v in errors.items()) if errors else "0" if counted else "n/a")
    rate = f"{p.rate_gbps:g} Gb/s" if isinstance(p.rate_gbps, float) else "n/a"
    return [f"{p.name} ({nic.label})", _text(p.state), _text(p.phys_state), rate, _text(p.link_layer),
            _text(p.ca_type), "n/a" if now == most == "n/a" else f"{now} ({most})", err]


def _text(x: Any) -> str:
    return str(x) if is_value(x) else "n/a"


# ----------------------------------------------------------------------------- findings


def network_findings(topo: Topology, env: Optional[Mapping[str, str]] = None,
                     staged_gpus: Optional[set] = None) -> List[Finding]:
    """Every network finding of a scan (docs/findings.md: nic-far, gpudirect-rdma, nic-port-down,
    nic-rate, nic-errors; pcie-downgraded and acs with ``evidence.nic``). ``staged_gpus``: the
    topology's GPUs whose NET connections a job's NCCL log shows without GDRDMA (staged_gpus)."""
    if not topo.nics:  # not a problem: the scan says so in one line (no_nic_line), no finding
        return []
    paths = gpu_network_paths(topo, env)
    out = _far(topo, paths, staged_gpus)
    out += _gdr(topo, paths, {g for f in out for g in (f.gpus or [])}, env)
    out += _ports(topo)
    out += _nic_pcie(topo)
    out += _nic_acs(topo, paths)
    return out




def adapter_count(nics: List[Any]) -> int:
    """NICs counted by adapter: the PCI functions of one device (a dual-port ConnectX's mlx5_0 and
    mlx5_1 at 0000:17:00.0 and .1) are one adapter. Where the addresses are not known (a topology
    from `nvidia-smi topo -m` text), NICs that are PIX to each other and have the same class to
    every GPU are taken as one card's ports (nvidia-smi prints a dual-port card's two functions so)."""
    keys: Dict[int, Any] = {}
    for k, n in enumerate(nics):
        addr = try_parse(n.pci_bus_id) if is_value(n.pci_bus_id) else None
        if addr is not None:
            keys[k] = addr.device_key
            continue
        twin = next((j for j, m in enumerate(nics[:k]) if not is_value(m.pci_bus_id)
                     and str(n.nic_classes.get(m.label, "")) == "PIX" and m.gpu_classes == n.gpu_classes), None)
        keys[k] = keys[twin] if twin is not None else ("name", k)
    return len(set(keys.values()))


def _nvlink_to(topo: Topology, gpu: int, others: List[int]) -> List[int]:
    """The GPUs of ``others`` joined to ``gpu`` by NVLink (NCCL's PXN can relay through them)."""
    out = []
    for p in topo.pairs:
        if gpu in p.gpus and p.link_class.is_nvlink:
            other = p.gpus[0] if p.gpus[1] == gpu else p.gpus[1]
            if other in others:
                out.append(other)
    return sorted(out)


def _far(topo: Topology, paths: List[GpuNetPath], staged: Optional[set] = None) -> List[Finding]:
    """GPUs whose nearest RDMA NIC is through the CPU (NODE / SYS) while others have one beside
    them. A design fact, not a fault (a box of 8 GPUs with 4 NICs, a GPU box with one front-end
    NIC): info, saying what it costs: no GPUDirect RDMA for those GPUs by NCCL's distance rule,
    and PXN where NVLink joins them to a GPU near a NIC. A warning only where a job's own log
    shows those GPUs' network traffic staged through host memory (``staged``: their NET
    connections without GDRDMA). A spec that needs GPUDirect RDMA on every GPU lists ``nic-far``
    in ``findings.fail_on``. NICs are counted by adapter (adapter_count)."""
    near = [p for p in paths if p.link_class is not None and p.link_class.kind in NEAR]
    far = [p for p in paths if p.link_class is not None and p.link_class.kind in ("NODE", "SYS")]
    if not near or not far:
        return []
    staged = staged or set()
    best = min(p.link_class for p in near if p.link_class is not None)
    near_gpus = sorted({p.gpu for p in near})
    adapters = adapter_count(topo.nics)
    groups: Dict[Tuple[str, Tuple[str, ...]], List[GpuNetPath]] = {}
    for p in far:
        groups.setdefault((str(p.link_class), tuple(p.devices)), []).append(p)
    out = []
    for (cls, devices), members in groups.items():
        gpus = [p.gpu for p in members]
        gdr = members[0].gdr_by_distance
        relay = {g: _nvlink_to(topo, g, near_gpus) for g in gpus}
        pxn = sorted(g for g, via in relay.items() if via)
        cost = (f"by NCCL's distance rule ({members[0].nccl_path} > {members[0].level}) no GPUDirect RDMA for "
                f"{'them' if len(gpus) > 1 else 'it'}: their network traffic crosses the CPU and host memory"
                if gdr is False else "their network traffic crosses the CPU")
        if pxn:
            via = sorted({v for g in pxn for v in relay[g]})
            cost += (f"; NVLink joins GPU {gpu_ranges(pxn)} to GPU {gpu_ranges(via)} beside a NIC, so NCCL's PXN "
                     "can send their traffic over NVLink to that GPU's NIC instead")
        hit = sorted(set(gpus) & staged)
        severity = "warning" if hit else "info"
        said = (f". The job's NCCL log shows GPU {gpu_ranges(hit)}'s NET connections without GDRDMA: their traffic "
                "was staged through host memory" if hit else "")
        out.append(Finding(
            "nic-far", severity,
            f"GPU {gpu_ranges(gpus)}: nearest RDMA NIC {', '.join(devices)} is {cls} (through the CPU"
            f"{' and across sockets' if cls == 'SYS' else ''}), while GPU "
            f"{gpu_ranges(near_gpus)} {'has' if len(near_gpus) == 1 else 'have'} one at {best} "
            f"({adapters} RDMA adapter{'s' if adapters != 1 else ''} for {len(topo.gpus)} GPUs): {cost}{said}",
            gpus=gpus, link_class=cls,
            evidence={"nic": list(devices), "nearest_class": cls, "closest_on_node": str(best),
                      "gdr_by_distance": gdr if isinstance(gdr, bool) else None, "adapters": adapters,
                      "pxn_via_nvlink": {str(g): relay[g] for g in pxn}, "staged_in_job_log": hit},
            cause=("the job's traffic from these GPUs went through host memory: its NIC is through the CPU"
                   if hit else None),
            remedies=["a job that needs GPUDirect RDMA on every GPU: use the GPUs beside a NIC, or a machine with a "
                      "NIC beside each GPU (a spec can require it: findings.fail_on = [\"nic-far\"])",
                      "bind the job's ranks so GPUs far from a NIC carry less inter-node traffic"]
            if not hit else ["check the NCCL log's NET lines: PXN (NCCL_PXN_DISABLE unset) relays over NVLink "
                             "where it can; otherwise place the job on GPUs beside a NIC",
                             "place a NIC beside each GPU (one PCIe switch) where the chassis allows"]))
    return out


def _peermem_nics(devices: List[str]) -> bool:
    """Whether every NIC is an NVIDIA/Mellanox HCA (mlx4/mlx5 verbs devices), the NICs whose GPUDirect
    RDMA nvidia_peermem provides; for another NIC (EFA, a cloud VF) the module is not known to be
    what it needs."""
    return bool(devices) and all(str(d).startswith(("mlx4", "mlx5")) for d in devices)


def staged_gpus(nccl_debug: Optional[Mapping[str, Any]]) -> set:
    """The topology GPUs (``gpu_index``, matched by the importer) whose NET connections over an RDMA
    network (not NET/Socket) went without GDRDMA in a job's NCCL log: their data was staged
    through host memory."""
    conns = ((nccl_debug or {}).get("network") or {}).get("connections") or []
    return {c["gpu_index"] for c in conns if isinstance(c, Mapping) and isinstance(c.get("gpu_index"), int)
            and str(c.get("net")) != "Socket" and not c.get("gdr")}


def _gdr(topo: Topology, paths: List[GpuNetPath], covered, env) -> List[Finding]:
    out = []
    devices = [_device(n) for n in topo.nics]
    gdr = topo.host.gpudirect_rdma
    if isinstance(gdr, GdrKernel) and gdr.available is False:
        out.append(Finding(
            "gpudirect-rdma", "warning",
            f"GPUDirect RDMA unavailable on this host: no peer-memory module loaded (nvidia_peermem / "
            f"nv_peer_mem, {gdr.sources.get('peermem', 'module list')}) and no dma-buf ({gdr.dmabuf_reason}). "
            "NCCL stages every inter-node transfer through host memory",
            evidence={"nic": devices, "peermem": False, "dmabuf": False, "dmabuf_reason": gdr.dmabuf_reason},
            cause="the nvidia_peermem module is not loaded and the open GPU kernel modules / a kernel >= 5.12 "
                  "are not in use",
            remedies=(["modprobe nvidia_peermem (and load it at boot)",
                       "or use the open GPU kernel modules on a kernel >= 5.12 for dma-buf"] if _peermem_nics(devices)
                      else [f"whether {', '.join(devices[:4])} can do GPUDirect RDMA at all is not known from this "
                            "scan (nvidia_peermem serves NVIDIA/Mellanox mlx4/mlx5 HCAs): the NIC's documentation or "
                            "the instance type tells", "where it can: load its peer-memory support (nvidia_peermem "
                            "for mlx5) or use dma-buf (open GPU kernel modules, kernel >= 5.12)"])))
    beyond = [p for p in paths if p.gdr_by_distance is False and p.gpu not in covered]
    groups: Dict[Tuple[str, Tuple[str, ...]], List[GpuNetPath]] = {}
    for p in beyond:
        groups.setdefault((str(p.link_class), tuple(p.devices)), []).append(p)
    for (cls, devs), members in groups.items():
        level, where = gdr_level(env)
        gpus = [p.gpu for p in members]
        out.append(Finding(
            "gpudirect-rdma", "info",
            f"GPU {gpu_ranges(gpus)}: nearest RDMA NIC {', '.join(devs)} is {cls} (NCCL path "
            f"{members[0].nccl_path}), beyond NCCL's GDR level {level} ({where}): by NCCL's distance rule "
            f"(ncclTopoCheckGdr, NCCL {NCCL_VERSION_READ}) NCCL would not use GPUDirect RDMA on that path",
            gpus=gpus, link_class=cls,
            evidence={"nic": list(devs), "nccl_path": members[0].nccl_path, "gdr_level": level}))
    return out


def _ports_of(topo: Topology) -> List[NicPort]:
    return [p for n in topo.nics for p in n.ports]


def _ports(topo: Topology) -> List[Finding]:
    out = []
    ports = _ports_of(topo)
    for p in ports:
        if not is_value(p.state) or p.state == "Active":
            continue
        ev = {"nic": p.device, "port": p.port, "state": p.state, "phys_state": _v(p.phys_state),
              "source": p.sources.get("state", "")}
        if p.phys_state == "Disabled":
            out.append(Finding("nic-port-down", "info",
                               f"{p.name} is {p.state}, physical state Disabled: switched off (by an admin "
                               "or a port policy), which may be deliberate", evidence=ev))
        elif p.phys_state == "Polling":
            out.append(Finding("nic-port-down", "warning",
                               f"{p.name} is {p.state}, physical state Polling: the port looks for a peer "
                               "and finds none (cable, transceiver or the switch port); a port meant to be "
                               "unused can be disabled", evidence=ev,
                               cause="no link partner: unplugged or faulty cable/transceiver, or the switch port down",
                               remedies=["check the cable and the switch port", "ibstat / ibv_devinfo on the host"]))
        elif p.phys_state == "LinkUp":
            out.append(Finding("nic-port-down", "warning",
                               f"{p.name} is {p.state} with its physical link up: no subnet manager has "
                               "brought it to Active (InfiniBand) or it is still being configured", evidence=ev,
                               cause="no subnet manager on the fabric, or the port not yet configured",
                               remedies=["check the subnet manager (sminfo)"]))
        else:
            out.append(Finding("nic-port-down", "warning",
                               f"{p.name} is {p.state}, physical state {_v(p.phys_state)}", evidence=ev))
    out += _no_port_up(ports)
    # rate against peers: Active ports of the same adapter model and link layer
    peers: Dict[Tuple[str, str], List[NicPort]] = {}
    for p in ports:
        if p.state == "Active" and isinstance(p.rate_gbps, float) and is_value(p.ca_type) and is_value(p.link_layer):
            peers.setdefault((str(p.ca_type), str(p.link_layer)), []).append(p)
    for (model, layer), group in peers.items():
        top = max(p.rate_gbps for p in group)
        full = [p for p in group if p.rate_gbps == top]
        for p in group:
            if p.rate_gbps < top:
                out.append(Finding(
                    "nic-rate", "warning",
                    f"{p.name} runs at {p.rate_gbps:g} Gb/s, below the {top:g} Gb/s of its {len(full)} peer "
                    f"port(s) of the same adapter ({model}, {layer}): trained down (cable, transceiver, or "
                    "the switch port's speed)",
                    evidence={"nic": p.device, "port": p.port, "rate_gbps": p.rate_gbps, "peer_rate_gbps": top,
                              "ca_type": model, "link_layer": layer, "peers": [q.name for q in full]},
                    cause="the link trained below its peers' speed", remedies=["reseat or replace the cable/transceiver",
                                                                                "check the switch port's configured speed"]))
    for p in ports:
        nonzero = {k: v for k, v in p.counters.items() if isinstance(v, int) and v > 0}
        if nonzero:
            listed = ", ".join(f"{k} {v}" for k, v in sorted(nonzero.items(), key=lambda kv: -kv[1]))
            out.append(Finding(
                "nic-errors", "info",
                f"{p.name} error counters are not zero: {listed} (cumulative since the counters were last "
                "cleared or the driver loaded: a fact, not a rate; growth between scans is what to watch)",
                evidence={"nic": p.device, "port": p.port, "counters": nonzero,
                          "source": p.sources.get("counters", "")}))
    return out


def _no_port_up(ports: List[NicPort]) -> List[Finding]:
    """Every RDMA port of the node (or the pod: the ports its text shows) read, and none Active:
    RDMA cannot work there, whatever each port's own finding says (a Disabled port alone is info)."""
    if not ports or not all(is_value(p.state) for p in ports) or any(p.state == "Active" for p in ports):
        return []
    listed = ", ".join(f"{p.name} {p.state}/{_text(p.phys_state)}" for p in ports)
    return [Finding(
        "nic-port-down", "warning",
        f"no RDMA port of this node is Active, so RDMA (InfiniBand / RoCE, GPUDirect RDMA) cannot work here "
        f"and jobs across nodes fall back to TCP sockets or fail ({len(ports)} port(s) read, none Active; {listed})",
        evidence={"all_ports_down": True, "ports": [p.name for p in ports],
                  "states": {p.name: [_v(p.state), _v(p.phys_state)] for p in ports}},
        cause="every port is down or disabled: cables, the switch, the subnet manager, or ports switched off",
        remedies=["bring at least one port to Active: check its cable and switch port (Polling), the subnet "
                  "manager (LinkUp but not Active), or enable it (Disabled)",
                  "in a container or pod: check that the RDMA devices given to it are the ones cabled"])]


def _v(x: Any) -> Any:
    return x if is_value(x) else str(x)


def _nic_pcie(topo: Topology) -> List[Finding]:
    out = []
    for n in topo.nics:
        if not n.ports:
            continue
        p = n.ports[0]  # the PCIe link is the PCI function's: the same on every port
        gen_down = all(isinstance(x, int) for x in (p.pcie_gen_current, p.pcie_gen_max)) and \
            p.pcie_gen_current < p.pcie_gen_max
        width_down = all(isinstance(x, int) for x in (p.pcie_width_current, p.pcie_width_max)) and \
            p.pcie_width_current < p.pcie_width_max
        if not (gen_down or width_down):
            continue
        out.append(Finding(
            "pcie-downgraded", "warning",
            f"NIC {_device(n)} ({n.pci_bus_id}): PCIe link at Gen{p.pcie_gen_current} x{p.pcie_width_current}, "
            f"below its maximum Gen{p.pcie_gen_max} x{p.pcie_width_max}: every transfer through this NIC "
            "is capped by the narrower link (sysfs current_link_speed/width; an idle link does not drop "
            "its width, and NICs do not lower their speed to save power as GPUs do)",
            evidence={"nic": _device(n), "pci_bus_id": n.pci_bus_id,
                      "gen_current": p.pcie_gen_current, "gen_max": p.pcie_gen_max,
                      "width_current": p.pcie_width_current, "width_max": p.pcie_width_max},
            cause="the NIC's slot or riser trained the link down", remedies=["reseat the NIC", "check the slot and riser"]))
    return out


def _gpu_bridges(topo: Topology) -> Dict[int, Dict[str, Any]]:
    """GPU NVML index -> {bridge bdf: AcsBridge} from the host's ACS read."""
    acs = topo.host.acs
    out: Dict[int, Dict[str, Any]] = {}
    if not isinstance(acs, list):
        return out
    by_bus = {try_bus_key(str(g.pci_bus_id)): g.nvml_index for g in topo.gpus if is_value(g.pci_bus_id)}
    for b in acs:
        for bus in b.gpus:
            index = by_bus.get(try_bus_key(bus))
            if index is not None:
                out.setdefault(index, {})[b.bdf] = b
    return out


def _nic_acs(topo: Topology, paths: List[GpuNetPath]) -> List[Finding]:
    """ACS redirect on a bridge between a GPU and its nearest NIC below one host bridge (PIX/PXB):
    the NIC's reads and writes of GPU memory go up to the root complex instead of across the switch."""
    gpu_bridges = _gpu_bridges(topo)
    nics = {n.label: n for n in topo.nics}
    hits: Dict[Tuple[str, Tuple[str, ...]], List[int]] = {}
    for p in paths:
        if p.link_class is None or p.link_class.kind not in ("PIX", "PXB"):
            continue
        mine = gpu_bridges.get(p.gpu, {})
        for label in p.nics:
            nic = nics[label]
            if not isinstance(nic.bridges, list):
                continue
            theirs = {b.bdf: b for b in nic.bridges}
            between = [b for bdf, b in {**mine, **theirs}.items() if (bdf in mine) != (bdf in theirs)]
            redirect = tuple(sorted(b.bdf for b in between if b.redirects))
            if redirect:
                hits.setdefault((_device(nic), redirect), []).append(p.gpu)
    out = []
    for (device, bridges), gpus in hits.items():
        out.append(Finding(
            "acs", "warning",
            f"ACS redirect on bridge(s) {', '.join(bridges)} between GPU {gpu_ranges(gpus)} and NIC {device}: "
            "the NIC's GPUDirect RDMA reads and writes go up to the root complex instead of across the PCIe "
            "switch (slower, or failing where the root complex drops peer traffic)",
            gpus=gpus, evidence={"nic": device, "bridges": list(bridges)},
            cause="ACS request/completion redirect enabled (BIOS or kernel) on the switch ports",
            remedies=["disable ACS redirect on the switch downstream ports (BIOS, or setpci at boot)"]))
    return out
