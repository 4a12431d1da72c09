"""Plain records for what a machine is: GPUs, their NVLinks and PCIe links, GPU pairs, host facts.

Devices are keyed by PCI bus id (and UUID). Both the NVML index and the CUDA index are kept,
since CUDA_VISIBLE_DEVICES renumbers CUDA devices but not NVML ones. Any field may hold a
NotAvailable or Failed value (see values.py) instead of data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Tuple

from .fabric import fabric_from_json, fabric_to_json
from .health import health_from_json, health_to_json
from .linkclass import LinkClass
from .nic import GdrKernel, NicPort
from .values import Failed, NotAvailable, field_from_json, is_value

#: P2P capabilities in NVML's index order (nvmlGpuP2PCapsIndex_t).
P2P_CAPS = ("read", "write", "nvlink", "atomics", "pci")
#: nvmlGpuP2PStatus_t value -> nvidia-smi's abbreviation.
P2P_STATUS_NAMES = {0: "OK", 1: "CNS", 2: "GNS", 3: "TNS", 4: "DR", 5: "NS", 6: "U"}
P2P_STATUS_MEANING = {
    "OK": "Status Ok",
    "CNS": "Chipset not supported",
    "GNS": "GPU not supported",
    "TNS": "Topology not supported",
    "DR": "Disabled by regkey",
    "NS": "Not supported",
    "U": "Unknown",
}
#: NVLink error counters read per link (nvmlNvLinkErrorCounter_t order).
NVLINK_ERROR_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data")


@dataclass
class NvLink:
    """One NVLink of a GPU as NVML reports it."""

    link: int
    active: Any  # bool | NotAvailable | Failed
    version: Any = NotAvailable("not read")
    remote_bus_id: Any = NotAvailable("not read")
    remote_type: Any = NotAvailable("not read")  # "GPU" | "SWITCH" | "IBMNPU"
    errors: Dict[str, Any] = field(default_factory=dict)  # counter -> int | NotAvailable | Failed


@dataclass
class PcieLink:
    """The PCIe link of a GPU to its upstream port."""

    gen_current: Any = NotAvailable("not read")
    gen_max: Any = NotAvailable("not read")
    width_current: Any = NotAvailable("not read")
    width_max: Any = NotAvailable("not read")
    replay_counter: Any = NotAvailable("not read")


@dataclass
class Gpu:
    """One GPU. ``lost`` is a Failed value when NVML lost the device; the rest is then n/a."""

    nvml_index: int
    name: Any = NotAvailable("not read")
    uuid: Any = NotAvailable("not read")
    pci_bus_id: Any = NotAvailable("not read")
    cuda_index: Any = NotAvailable("not read")
    #: NUMA node of the CPU socket the GPU's PCIe link attaches to (sysfs numa_node; nvidia-smi's
    #: "NUMA Affinity"). Before schema note 8 (issue 8) it came from nvmlDeviceGetNumaNodeId.
    numa_node: Any = NotAvailable("not read")
    #: NVML's nvmlDeviceGetNumaNodeId: the NUMA node of the GPU's own memory on coherent systems
    #: (Grace Hopper, GB200); NOT_SUPPORTED on x86 (nvidia-smi's "GPU NUMA ID").
    gpu_memory_numa_node: Any = NotAvailable("not read")
    cpu_affinity: Any = NotAvailable("not read")  # cpulist text, e.g. "0-31,64-95"
    pcie: PcieLink = field(default_factory=PcieLink)
    mig_mode: Any = NotAvailable("not read")  # "enabled" | "disabled"
    nvlinks: List[NvLink] = field(default_factory=list)
    lost: Optional[Failed] = None
    health: Any = NotAvailable("not read")  # GpuHealth (model/health.py) | NotAvailable | Failed
    #: NVML's GPU fabric information (NVSwitch registration): GpuFabric (model/fabric.py), or
    #: NotAvailable where the GPU, the driver or the bindings have none (no fabric to be in).
    fabric: Any = NotAvailable("not read")

    @property
    def key(self) -> str:
        """Stable identity: PCI bus id where known, else UUID, else the NVML index."""
        for v in (self.pci_bus_id, self.uuid):
            if is_value(v):
                return str(v)
        return f"nvml:{self.nvml_index}"

    def active_nvlinks(self) -> List[NvLink]:
        return [lk for lk in self.nvlinks if lk.active is True]


@dataclass
class Pair:
    """Two GPUs (NVML indices, i < j), how they connect, and what P2P NVML allows."""

    gpus: Tuple[int, int]
    link_class: LinkClass
    nvlink_count: int = 0
    p2p: Dict[str, Any] = field(default_factory=dict)  # cap -> "OK"/"CNS"/... | NotAvailable

    def __post_init__(self):
        i, j = self.gpus
        if i == j:
            raise ValueError(f"a pair needs two different GPUs, got {i},{j}")
        self.gpus = (min(i, j), max(i, j))


@dataclass
class Nic:
    """A network device (an RDMA NIC) and the class of its path to each GPU and each other NIC.

    Why: NCCL sends between machines through the NIC nearest a GPU, so `nvidia-smi topo -m` prints
    NIC rows and columns and a NIC far from its GPU (SYS) is a finding in itself. ``label`` is
    the column name nvidia-smi prints (``NIC0``; older drivers print the device name), ``device``
    the RDMA device name (``mlx5_0``: the NIC Legend, or /sys/class/infiniband).
    """

    label: str
    device: Any = NotAvailable("not read")
    pci_bus_id: Any = NotAvailable("not read")
    numa_node: Any = NotAvailable("not read")
    gpu_classes: Dict[int, LinkClass] = field(default_factory=dict)  # GPU NVML index -> class
    nic_classes: Dict[str, LinkClass] = field(default_factory=dict)  # other NIC's label -> class
    #: its ports' state, rate, counters and PCIe link (model/nic.py); empty where not read
    #: (a topology read from `nvidia-smi topo -m` text has none)
    ports: List[NicPort] = field(default_factory=list)
    #: the PCIe bridges above it, root port first, with their ACS control bits (``.gpus`` holds the
    #: NIC's own bus id), or NotAvailable(why): for ACS redirect between a GPU and its NIC
    bridges: Any = NotAvailable("not read")
    #: the host it is in, where a topology joins several hosts' NICs (a multi-node job's import:
    #: `gputopo import nccl-tests --nics`); None on a one-host topology
    host: Optional[str] = None


@dataclass
class AcsBridge:
    """A PCIe bridge upstream of one or more GPUs and its ACS control bits (from lspci)."""

    bdf: str
    gpus: List[str]  # bus ids of the GPUs below it
    controls: Dict[str, bool] = field(default_factory=dict)  # SrcValid, ReqRedir, CmpltRedir, ...

    @property
    def redirects(self) -> bool:
        """ACS request/completion redirect forces peer traffic up to the root complex."""
        return bool(self.controls.get("ReqRedir") or self.controls.get("CmpltRedir"))


@dataclass
class HostInfo:
    """Host facts that decide whether PCIe peer-to-peer DMA works."""

    hostname: Any = NotAvailable("not read")
    kernel: Any = NotAvailable("not read")
    #: "translated" (DMA remapped by the IOMMU), "passthrough", "off", or NotAvailable.
    iommu_mode: Any = NotAvailable("not read")
    iommu_evidence: List[str] = field(default_factory=list)
    acs: Any = NotAvailable("not read")  # List[AcsBridge] | NotAvailable
    driver_version: Any = NotAvailable("not read")
    nvml_version: Any = NotAvailable("not read")
    cuda_driver_version: Any = NotAvailable("not read")  # e.g. "12.4"
    #: the command the kernel log was read with ("dmesg"), or NotAvailable(why it could not be)
    kernel_log: Any = NotAvailable("not read")
    #: Xid lines naming a PCI bus that is none of the GPUs read:
    #: {bus: {"events": [event json], "attributed_to_gpu": the one GPU whose bus id is unknown, or None}}
    xid_unmatched: Dict[str, Any] = field(default_factory=dict)
    #: what else the kernel log read says (probe/xid_lines.py kernel_log_document: NVIDIA driver
    #: lines that are no Xid, lines that could not be read), or None when no log was read
    kernel_log_facts: Optional[Dict[str, Any]] = None
    #: "intel" | "amd" | "zhaoxin" | "arm" | "power" | other (NCCL's P2P level depends on it).
    cpu_vendor: Any = NotAvailable("not read")
    #: the kernel side of GPUDirect RDMA (model/nic.py GdrKernel: peer-memory module, dma-buf), or NotAvailable
    gpudirect_rdma: Any = NotAvailable("not read")


@dataclass
class Topology:
    """Everything `gputopo scan` knows about one machine.

    ``source`` says where it came from ("nvml", "nvidia-smi text", "sim:NAME"); ``simulated``
    is true for simulated machines and every output made from one must say SIMULATED.
    """

    gpus: List[Gpu]
    pairs: List[Pair]
    host: HostInfo = field(default_factory=HostInfo)
    source: str = "nvml"
    simulated: bool = False
    machine: str = ""  # a name for the machine (hostname or sim name)
    nics: List[Nic] = field(default_factory=list)  # in nvidia-smi's column order
    #: What reading its file said and an import must say too (`--topo FILE: the text ends after
    #: row NIC2 ...`); not part of topology.json, not compared.
    notes: List[str] = field(default_factory=list, compare=False, repr=False)

    def __post_init__(self):
        self._pairs = {p.gpus: p for p in self.pairs}

    def gpu(self, nvml_index: int) -> Gpu:
        for g in self.gpus:
            if g.nvml_index == nvml_index:
                return g
        raise KeyError(nvml_index)

    def pair(self, i: int, j: int) -> Pair:
        return self._pairs[(min(i, j), max(i, j))]

    def link_class(self, i: int, j: int) -> LinkClass:
        return self.pair(i, j).link_class

    @property
    def indices(self) -> List[int]:
        return [g.nvml_index for g in self.gpus]

    def classes(self) -> List[LinkClass]:
        """Distinct link classes present, best first."""
        return sorted({p.link_class for p in self.pairs})


# ----------------------------------------------------------------------------- JSON


def class_of(topo: Optional[Topology], gpus: Iterable[int]) -> Optional[LinkClass]:
    """The link class of a pair, or the worst class among a group's pairs; None when unknown."""
    gpus = sorted(set(gpus))
    if topo is None or len(gpus) < 2:
        return None
    classes = []
    for k, a in enumerate(gpus):
        for b in gpus[k + 1:]:
            try:
                classes.append(topo.link_class(a, b))
            except KeyError:
                return None
    return max(classes) if classes else None  # LinkClass orders best first: max = worst


def _enc(obj: Any) -> Any:
    if isinstance(obj, (NotAvailable, Failed)):
        return obj.to_json()
    if isinstance(obj, LinkClass):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _enc(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_enc(v) for v in obj]
    return obj


def _dec_fields(d: Dict[str, Any]) -> Dict[str, Any]:
    return {k: field_from_json(v) for k, v in d.items()}


def pair_to_json(p: Pair) -> Dict[str, Any]:
    """One pair as topology_to_json writes it."""
    return {"gpus": list(p.gpus), "link_class": str(p.link_class), "nvlink_count": p.nvlink_count,
            "p2p": _enc(p.p2p)}


def topology_to_json(topo: Topology, with_pairs: bool = True) -> Dict[str, Any]:
    """Encode a topology; pairs carry ``gpus: [i, j]`` and ``link_class`` (docs/scan.md).
    ``with_pairs=False``: "pairs" is left empty, for a writer that writes them itself (the
    half million pairs of a 1,024-GPU machine, report/pairs_json.py)."""
    gpus = []
    for g in topo.gpus:
        gpus.append(
            {
                "nvml_index": g.nvml_index,
                "cuda_index": _enc(g.cuda_index),
                "name": _enc(g.name),
                "uuid": _enc(g.uuid),
                "pci_bus_id": _enc(g.pci_bus_id),
                "numa_node": _enc(g.numa_node),
                "gpu_memory_numa_node": _enc(g.gpu_memory_numa_node),
                "cpu_affinity": _enc(g.cpu_affinity),
                "mig_mode": _enc(g.mig_mode),
                "pcie": _enc(vars(g.pcie)),
                "nvlinks": [_enc(vars(lk)) for lk in g.nvlinks],
                "lost": _enc(g.lost),
                "health": health_to_json(g.health),
                "fabric": fabric_to_json(g.fabric),
            }
        )
    pairs = [pair_to_json(p) for p in topo.pairs] if with_pairs else []
    h = topo.host
    host = {k: _enc(v) for k, v in vars(h).items() if k not in ("acs", "gpudirect_rdma")}
    host["gpudirect_rdma"] = (h.gpudirect_rdma.to_json() if isinstance(h.gpudirect_rdma, GdrKernel)
                              else _enc(h.gpudirect_rdma))
    host["acs"] = (
        [{"bdf": b.bdf, "gpus": b.gpus, "controls": b.controls, "redirects": b.redirects} for b in h.acs]
        if isinstance(h.acs, list)
        else _enc(h.acs)
    )
    nics = [
        {"label": n.label, "device": _enc(n.device), "pci_bus_id": _enc(n.pci_bus_id),
         "numa_node": _enc(n.numa_node),
         "gpu_link_classes": [{"gpu": i, "link_class": str(c)} for i, c in sorted(n.gpu_classes.items())],
         "nic_link_classes": [{"nic": k, "link_class": str(c)} for k, c in n.nic_classes.items()],
         "ports": [p.to_json() for p in n.ports],
         "bridges": ([{"bdf": b.bdf, "controls": b.controls, "redirects": b.redirects} for b in n.bridges]
                     if isinstance(n.bridges, list) else _enc(n.bridges)),
         **({"host": n.host} if n.host is not None else {})}
        for n in topo.nics
    ]
    return {"machine": topo.machine, "source": topo.source, "simulated": topo.simulated,
            "gpus": gpus, "pairs": pairs, "nics": nics, "host": host}


def _nic_bridges(nd: Dict[str, Any], bus: Any) -> Any:
    raw = nd.get("bridges", NotAvailable("not read").to_json())
    if isinstance(raw, list):
        return [AcsBridge(bdf=b["bdf"], gpus=[bus] if isinstance(bus, str) else [], controls=dict(b["controls"]))
                for b in raw]
    return field_from_json(raw)


def topology_from_json(d: Dict[str, Any]) -> Topology:
    """Inverse of :func:`topology_to_json`. Raises KeyError/ValueError on a malformed document."""
    gpus = []
    for gd in d["gpus"]:
        gd = dict(gd)
        pcie = PcieLink(**_dec_fields(gd.pop("pcie", {})))
        links = []
        for ld in gd.pop("nvlinks", []):
            ld = _dec_fields(ld)
            ld["errors"] = _dec_fields(ld.get("errors") or {})
            links.append(NvLink(**ld))
        lost = field_from_json(gd.pop("lost", None))
        health = health_from_json(gd.pop("health", None))
        fabric = fabric_from_json(gd.pop("fabric", None))
        gpus.append(Gpu(pcie=pcie, nvlinks=links, lost=lost, health=health, fabric=fabric,
                        **_dec_fields(gd)))
    pairs = [
        Pair(gpus=tuple(pd["gpus"]), link_class=LinkClass.parse(pd["link_class"]),
             nvlink_count=pd.get("nvlink_count", 0), p2p=_dec_fields(pd.get("p2p") or {}))
        for pd in d["pairs"]
    ]
    hd = dict(d.get("host") or {})
    acs = hd.pop("acs", NotAvailable("not read"))
    if isinstance(acs, list):
        acs = [AcsBridge(bdf=b["bdf"], gpus=list(b["gpus"]), controls=dict(b["controls"])) for b in acs]
    else:
        acs = field_from_json(acs)
    evidence = hd.pop("iommu_evidence", [])
    gdr = hd.pop("gpudirect_rdma", NotAvailable("not read").to_json())
    gdr = GdrKernel.from_json(gdr) if isinstance(gdr, dict) and "peermem" in gdr else field_from_json(gdr)
    host = HostInfo(acs=acs, iommu_evidence=list(evidence), gpudirect_rdma=gdr, **_dec_fields(hd))
    nics = [
        Nic(label=nd["label"], device=field_from_json(nd.get("device")),
            pci_bus_id=field_from_json(nd.get("pci_bus_id")), numa_node=field_from_json(nd.get("numa_node")),
            gpu_classes={int(e["gpu"]): LinkClass.parse(e["link_class"]) for e in nd.get("gpu_link_classes", [])},
            nic_classes={e["nic"]: LinkClass.parse(e["link_class"]) for e in nd.get("nic_link_classes", [])},
            ports=[NicPort.from_json(p) for p in nd.get("ports") or []], bridges=_nic_bridges(nd, nd.get("pci_bus_id")),
            host=nd["host"] if isinstance(nd.get("host"), str) else None)
        for nd in d.get("nics") or []  # absent in documents written before NICs were read
    ]
    return Topology(gpus=gpus, pairs=pairs, host=host, source=d.get("source", ""),
                    simulated=bool(d.get("simulated", False)), machine=d.get("machine", ""), nics=nics)
