"""The records of a simulated machine: GPUs, NVLinks, host facts, faults, link models, the machine.

They are built and validated by the description builder (description.py). ``MachineDesc``
answers what a scan sees (link classes, P2P status, NVLink state), the healthy link models, and
which faults act on a pair or GPU; ``Description`` (description.py) is a MachineDesc that can
also rebuild itself with other faults. ``Fault`` checks its own fields (ValueError naming the
field); the description builder turns those into file/key/line errors and applies the faults a
scan sees (link_down, downtrained). What the simulated transport does with the others (corrupt,
nan, slow, hang, crash) is gputopo.bench.fabrics.sim's job.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from gputopo.model.bandwidth import PCIE_X16_GBPS, nvlink_gbps, pcie_gbps
from gputopo.model.bus_id import PciAddress
from gputopo.model.linkclass import LinkClass
from gputopo.model.topology import NVLINK_ERROR_COUNTERS, P2P_CAPS, P2P_STATUS_NAMES

from .fabric import FabricDesc
from .gpu_models import gpu_model
from .health import HealthDesc
from .processes import ProcessDesc

IOMMU_MODES = ("translated", "passthrough", "off")
CPU_VENDORS = ("intel", "amd")
P2P_STATUSES = tuple(P2P_STATUS_NAMES.values())

#: Fraction of the theoretical rate a healthy path reaches (docs/report.md: 80-90 %).
DEFAULT_EFFICIENCY = 0.85
#: Extra derating of PCIe peer paths that cross the host: NODE a little, SYS more.
PCIE_CLASS_DERATE = {"PIX": 1.0, "PXB": 1.0, "PHB": 0.97, "NODE": 0.94, "SYS": 0.85}
#: Healthy peer-to-peer GB/s per direction across the sockets (SYS) by CPU vendor: a SYS peer copy
#: crosses the CPU interconnect (Intel QPI/UPI, AMD Infinity Fabric), which caps it below the
#: PCIe rate. The figures are the ones gputopo judges SYS peer copies against
#: (gputopo/report/data/reference_rates.csv rows intel-sys-p2p and amd-sys-p2p): NCCL's topology
#: model, NVIDIA/nccl src/graph/topo.h, BDW_QPI_BW 6.0 (Intel; Skylake 10, Sapphire Rapids 22,
#: Emerald Rapids 40) and AMD_ZEN12_BW 16.0 (AMD; Zen 3/4 24, Zen 5 32): the lowest socket link
#: NCCL models for each vendor, since a description names the vendor, not the CPU generation
#: (``[link_model] SYS = { gbps = ... }`` sets a newer one's). NODE and PHB pairs stay inside
#: one socket: their model is the PCIe one.
SOCKET_LINK_GBPS = {"intel": 6.0, "amd": 16.0}
#: Modeled latency of one transfer, microseconds.
DEFAULT_LATENCY_US = {"NV": 1.8, "PIX": 2.5, "PXB": 3.0, "PHB": 3.5, "NODE": 4.5, "SYS": 6.5,
                      "host": 5.0, "device": 2.5}
#: NVSwitch chips per board by NVLink version (DGX-2/A100: 6 per baseboard, H100: 4).
DEFAULT_NVSWITCHES = {2: 6, 3: 6, 4: 4, 5: 2}

@functools.lru_cache(maxsize=None)
def shared_link_class(text: str) -> LinkClass:
    """Shared LinkClass objects (256-GPU machines have 32640 pairs)."""
    return LinkClass.parse(text)


# ============================================================================ records


@dataclass(frozen=True)
class LinkModel:
    """A path's healthy throughput per direction (GB/s, 1e9 B/s) and per-transfer latency (µs)."""

    gbps: float
    latency_us: float

    def transfer_s(self, size_bytes: int) -> float:
        """Modeled seconds to move ``size_bytes`` one way: latency + size / bandwidth."""
        return self.latency_us * 1e-6 + size_bytes / (self.gbps * 1e9)


@dataclass
class NvLinkDesc:
    """One NVLink port of a GPU. ``remote_bus_id`` is None for a port with nothing attached."""

    link: int
    active: bool
    remote_bus_id: Optional[str]  # NVML form, "00000000:07:00.0"
    remote_type: str = "GPU"  # "GPU" | "SWITCH"
    errors: Dict[str, int] = field(default_factory=lambda: {c: 0 for c in NVLINK_ERROR_COUNTERS})


@dataclass
class GpuDesc:
    """One simulated GPU as NVML would report it (current PCIe values include downtrained faults)."""

    index: int
    name: str
    uuid: str
    bus_id: str  # NVML form "00000000:07:00.0" (8-digit domain, upper-case hex)
    numa_node: Optional[int]  # None: NVML says NOT_SUPPORTED
    cpu_affinity: Optional[str]  # cpulist "0-31,64-95"; None: not supported
    pcie_gen: int  # current
    pcie_gen_max: int
    pcie_width: int  # current
    pcie_width_max: int
    pcie_replay: int = 0
    nvlink_version: Optional[int] = None  # NVLink generation 1..5 (not NVML's enum)
    nvlinks: List[NvLinkDesc] = field(default_factory=list)
    mig_mode: Optional[str] = None  # "disabled" | "enabled" | None (MIG not supported)
    #: current width as declared, before downtrained faults (what the healthy link model uses)
    pcie_width_healthy: Optional[int] = field(default=None, repr=False)
    health: HealthDesc = field(default_factory=HealthDesc)  # ECC, remapped rows, Xids... (health.py)
    #: the simulated model when the name alone does not say it (``model =`` in the description)
    model: str = ""
    #: NVLink fabric registration (fabric.py); None: the fabric calls answer NOT_SUPPORTED
    fabric: Optional[FabricDesc] = None
    #: processes running on it (processes.py): NVML's compute running processes; [] idle
    processes: List[ProcessDesc] = field(default_factory=list)
    #: the device's minor number (/dev/nvidia<minor>, nvmlDeviceGetMinorNumber); None: its index
    minor_number: Optional[int] = None

    @property
    def minor(self) -> int:
        return self.index if self.minor_number is None else self.minor_number

    @property
    def sim_model(self):
        """The simulated hardware model (PCI ids, memory rate): by ``model``, else by name."""
        return gpu_model(self.model or self.name)

    @property
    def address(self) -> PciAddress:
        return PciAddress.parse(self.bus_id)

    @property
    def lspci_bdf(self) -> str:
        """The same address as lspci -D and sysfs write it: ``0000:07:00.0``."""
        return self.address.lspci

    @property
    def pci_device_id(self) -> int:
        return self.sim_model.pci_device_id

    def active_nvlinks(self) -> List[NvLinkDesc]:
        return [lk for lk in self.nvlinks if lk.active]


@dataclass
class HostDesc:
    """Host facts: IOMMU mode, bridges with ACS redirect, driver versions, kernel."""

    iommu: str = "off"  # "translated" | "passthrough" | "off"
    acs_redirect_bridges: List[str] = field(default_factory=list)  # lspci -D form "0000:17:01.0"
    driver_version: str = "535.154.05"
    nvml_version: str = "12.535.154.05"
    cuda_driver_version: int = 12020
    hostname: str = "sim"
    kernel: str = "5.15.0-91-generic"
    cmdline: str = ""
    cpu_vendor: str = "intel"  # "intel" (IOMMU "dmar0") | "amd" ("ivhd0")
    iommu_group_type: Optional[str] = None  # "DMA" | "DMA-FQ" | "identity" | None (iommu off)
    peermem: str = "nvidia_peermem"  # the GPUDirect RDMA peer-memory module loaded: | "nv_peer_mem" | "none"
    open_kernel_module: bool = False  # the open GPU kernel modules (dma-buf) rather than the proprietary one



# ============================================================================ faults

FAULT_KINDS = ("corrupt", "nan", "slow", "link_down", "downtrained", "hang", "crash")
FAULT_PATHS = ("p2p", "all")

#: The pair-key syntax "I,J": a fault's ``where = "pair:I,J"`` and the keys of [pairs] and [p2p].
PAIR_KEY_RE = re.compile(r"^\s*(\d+)\s*,\s*(\d+)\s*$")


@dataclass
class Fault:
    """A fault the simulated machine has.

    ``where``: ``"pair:5,6"`` | ``"gpu:3"`` | ``"class:SYS"`` (``"class:NV"`` = any NVLink class).
    ``what``: one of FAULT_KINDS. ``path``: ``"p2p"`` (peer DMA only) or ``"all"`` (every path
    that touches the GPU/pair, staged copies and collectives included). ``rate`` (corrupt, nan):
    fraction of elements hit. ``factor`` (slow, downtrained): fraction of the healthy throughput
    that remains (0.25 = four times slower); for downtrained it is computed from ``width``/``gen``
    unless given. Raises ValueError when a field is invalid.
    """

    where: str
    what: str
    path: Optional[str] = None
    rate: Optional[float] = None
    factor: Optional[float] = None
    description: str = ""
    width: Optional[int] = None  # downtrained: the current PCIe width it drops to
    gen: Optional[int] = None  # downtrained: the current PCIe generation it drops to

    def __post_init__(self):
        if self.what not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.what!r}; kinds: {', '.join(FAULT_KINDS)}")
        if self.path is None:
            self.path = "all" if self.what == "downtrained" else "p2p"
        if self.path not in FAULT_PATHS:
            raise ValueError(f"path must be one of {', '.join(FAULT_PATHS)}, got {self.path!r}")
        self._scope, self._target = _parse_where(self.where)
        self._factor_given = self.factor is not None
        if self.rate is None:
            self.rate = 1e-3 if self.what in ("corrupt", "nan") else 0.0
        if not isinstance(self.rate, (int, float)) or isinstance(self.rate, bool) or not 0 <= self.rate <= 1:
            raise ValueError(f"rate must be a fraction of elements in [0, 1], got {self.rate!r}")
        if self.what in ("corrupt", "nan") and self.rate == 0:
            raise ValueError(f"a {self.what} fault needs rate > 0")
        if self.factor is None:
            self.factor = 0.5 if self.what == "slow" else 1.0
        if (not isinstance(self.factor, (int, float)) or isinstance(self.factor, bool)
                or not 0 < self.factor <= 1):
            raise ValueError(f"factor is the fraction of throughput left, in (0, 1] "
                             f"(0.25 = four times slower), got {self.factor!r}")
        if self.what == "downtrained" and self._scope != "gpu":
            raise ValueError("a downtrained fault is a GPU's PCIe link: where = \"gpu:N\"")
        for name in ("width", "gen"):
            v = getattr(self, name)
            if v is not None and self.what != "downtrained":
                raise ValueError(f"{name} applies to downtrained faults only")
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        self.rate = float(self.rate)
        self.factor = float(self.factor)

    @property
    def factor_given(self) -> bool:
        """Whether ``factor`` was given (a downtrained fault's is computed otherwise)."""
        return self._factor_given

    @property
    def scope(self) -> str:
        """"pair" | "gpu" | "class"."""
        return self._scope

    @property
    def gpus(self) -> Tuple[int, ...]:
        """The GPU (gpu scope) or the two GPUs (pair scope); () for a class."""
        return self._target if self._scope != "class" else ()

    @property
    def link_class(self) -> Optional[str]:
        """The class a class-scoped fault hits ("SYS", "NV4", or "NV" for any NVLink class)."""
        return self._target if self._scope == "class" else None

    def hits_path(self, path: str) -> bool:
        """Whether the fault acts on transfers over ``path`` ("p2p", or another path name such as
        "host"; "any" matches every fault)."""
        return path == "any" or self.path == "all" or self.path == path

    def matches_class(self, cls: LinkClass) -> bool:
        target = self.link_class
        if target is None:
            return False
        if target == "NV":
            return cls.is_nvlink
        return str(cls) == target

    def to_json(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"where": self.where, "what": self.what, "path": self.path}
        if self.what in ("corrupt", "nan"):
            d["rate"] = self.rate
        if self.what == "slow" or (self.what == "downtrained" and self.factor_given):
            d["factor"] = self.factor
        for k in ("width", "gen"):
            if getattr(self, k) is not None:
                d[k] = getattr(self, k)
        if self.description:
            d["description"] = self.description
        return d


def _parse_where(where: Any) -> Tuple[str, Any]:
    if not isinstance(where, str) or ":" not in where:
        raise ValueError(f"where must be \"pair:I,J\", \"gpu:N\" or \"class:CLASS\", got {where!r}")
    scope, _, rest = where.partition(":")
    scope, rest = scope.strip(), rest.strip()
    if scope == "pair":
        m = PAIR_KEY_RE.match(rest)
        if not m or m.group(1) == m.group(2):
            raise ValueError(f"where = {where!r}: a pair is two different GPU indices, e.g. \"pair:5,6\"")
        i, j = int(m.group(1)), int(m.group(2))
        return "pair", (min(i, j), max(i, j))
    if scope == "gpu":
        if not rest.isdigit():
            raise ValueError(f"where = {where!r}: expected a GPU index, e.g. \"gpu:3\"")
        return "gpu", (int(rest),)
    if scope == "class":
        if rest.upper() == "NV":
            return "class", "NV"
        try:
            cls = LinkClass.parse(rest)
        except ValueError:
            cls = None
        if cls is None or cls.kind == "X":
            raise ValueError(f"where = {where!r}: unknown link class (NV, NV4, PIX, PXB, PHB, NODE, SYS)")
        return "class", str(cls)
    raise ValueError(f"where = {where!r}: expected \"pair:I,J\", \"gpu:N\" or \"class:CLASS\"")


# ============================================================================ the machine


@dataclass
class MachineDesc:
    """A simulated machine. Pairs are NVML indices; ``link_class`` is what a scan reports.

    Built as its subclass ``Description`` (description.py), which adds ``with_faults``."""

    name: str
    summary: str
    path: str  # the file; "builtin:NAME" for built-ins, "generated:NAME" for generated machines
    gpus: List[GpuDesc]
    host: HostDesc
    faults: List[Fault]
    nvswitch: bool = False
    nvswitch_bus_ids: List[str] = field(default_factory=list)
    source: str = "file"  # "builtin" | "file" | "generated"
    nics: List[Any] = field(default_factory=list)  # gputopo.sim.nics.NicDesc, declared order
    #: ``clock``: the simulated time (UTC epoch s) a run of this machine happens; recorded in the
    #: history instead of now, so a series of descriptions can stand for days (issue 19)
    clock: Optional[float] = None
    # internals, filled by the builder
    _wired: Dict[Tuple[int, int], LinkClass] = field(default_factory=dict, repr=False)
    _pcie: Dict[Tuple[int, int], str] = field(default_factory=dict, repr=False)
    _nv_active: Dict[Tuple[int, int], int] = field(default_factory=dict, repr=False)
    _link_rules: Dict[str, Dict[str, float]] = field(default_factory=dict, repr=False)
    _efficiency: float = DEFAULT_EFFICIENCY
    _p2p_rules: Dict[str, Dict[str, str]] = field(default_factory=dict, repr=False)
    _raw: Optional[Dict[str, Any]] = field(default=None, repr=False)
    _text: str = field(default="", repr=False)
    _tree: Any = field(default=None, repr=False)

    # ------------------------------------------------------------------ pairs and classes
    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    def pairs(self) -> List[Tuple[int, int]]:
        n = len(self.gpus)
        return [(i, j) for i in range(n) for j in range(i + 1, n)]

    def _key(self, i: int, j: int) -> Tuple[int, int]:
        n = len(self.gpus)
        if i == j or not (0 <= i < n and 0 <= j < n):
            raise KeyError(f"no GPU pair {i},{j} on {self.name} ({n} GPUs)")
        return (i, j) if i < j else (j, i)

    def nvlink_count(self, i: int, j: int) -> int:
        """Active NVLinks joining GPUs i and j (through NVSwitches: the smaller side's count)."""
        key = self._key(i, j)
        if self.nvswitch:
            a = len(self.gpus[key[0]].active_nvlinks())
            b = len(self.gpus[key[1]].active_nvlinks())
            return min(a, b)
        return self._nv_active.get(key, 0)

    def link_class(self, i: int, j: int) -> LinkClass:
        """The class a scan reports: NV<active links>, or the PCIe class when no link is up."""
        n = self.nvlink_count(i, j)
        return shared_link_class(f"NV{n}") if n else self.pcie_class(i, j)

    def healthy_link_class(self, i: int, j: int) -> LinkClass:
        """The class as wired, before NVLinks are down."""
        return self._wired[self._key(i, j)]

    def pcie_class(self, i: int, j: int) -> LinkClass:
        """The PCIe class of the pair (what NVML's common-ancestor call reports, NVLink or not)."""
        return shared_link_class(self._pcie[self._key(i, j)])

    def classes(self) -> List[LinkClass]:
        return sorted({self.link_class(i, j) for i, j in self.pairs()})

    # ------------------------------------------------------------------ P2P
    def p2p_status(self, i: int, j: int) -> Dict[str, str]:
        """NVML P2P status per capability ("read", "write", "nvlink", "atomics", "pci")."""
        key = self._key(i, j)
        cls = self.link_class(i, j)
        if cls.is_nvlink:
            status = {c: "OK" for c in P2P_CAPS}
        else:
            status = {"read": "OK", "write": "OK", "nvlink": "NS", "atomics": "NS", "pci": "OK"}
        rules = self._p2p_rules
        for rule in ("default", "NV" if cls.is_nvlink else None, str(cls), f"{key[0]},{key[1]}"):
            if rule and rule in rules:
                status.update(rules[rule])
        return status

    # ------------------------------------------------------------------ link models
    def socket_link_cap(self, i: int, j: int) -> Optional[float]:
        """GB/s the CPU interconnect caps a SYS pair's peer path at (SOCKET_LINK_GBPS of the host's
        vendor); None for other classes, or where ``[link_model] SYS`` gives the rate itself."""
        cls = self.link_class(i, j)
        if cls.is_nvlink or cls.kind != "SYS" or "gbps" in self._link_rules.get("SYS", {}):
            return None
        return SOCKET_LINK_GBPS.get(self.host.cpu_vendor)

    def link_model(self, i: int, j: int, socket_cap: bool = True) -> LinkModel:
        """Healthy peer-to-peer model of the pair's reported class (faults are not applied);
        ``socket_cap=False``: a SYS pair's PCIe part alone, before the CPU interconnect caps it
        (the sim fabric lowers that part for a downtrained GPU, then caps it)."""
        cls = self.link_class(i, j)
        a, b = self.gpus[i], self.gpus[j]
        rules = self._link_rules
        if cls.is_nvlink:
            version = min(v for v in (a.nvlink_version, b.nvlink_version, 99) if v is not None)
            per_link = nvlink_gbps(version, 1) if version != 99 else None
            gbps = (per_link or 20.0) * cls.nvlinks * self._efficiency
            latency = DEFAULT_LATENCY_US["NV"]
            if "NV" in rules:
                if "gbps_per_link" in rules["NV"]:
                    gbps = rules["NV"]["gbps_per_link"] * cls.nvlinks
                latency = rules["NV"].get("latency_us", latency)
        else:
            theo = min(pcie_theory_gbps(a), pcie_theory_gbps(b))
            gbps = theo * self._efficiency * PCIE_CLASS_DERATE[cls.kind]
            cap = self.socket_link_cap(i, j) if socket_cap else None
            if cap is not None:  # across the CPU interconnect: its rate caps the PCIe one
                gbps = min(gbps, cap)
            latency = DEFAULT_LATENCY_US[cls.kind]
        own = rules.get(str(cls), {})
        return LinkModel(round(own.get("gbps", gbps), 2), own.get("latency_us", latency))

    def host_link_model(self, i: int) -> LinkModel:
        """GPU i <-> pinned host memory (h2d and d2h, staged copies)."""
        g = self.gpus[i]
        own = self._link_rules.get("host", {})
        gbps = own.get("gbps", round(pcie_theory_gbps(g) * self._efficiency, 2))
        return LinkModel(gbps, own.get("latency_us", DEFAULT_LATENCY_US["host"]))

    def device_link_model(self, i: int) -> LinkModel:
        """On-device copy of GPU i (bytes copied per second)."""
        own = self._link_rules.get("device", {})
        gbps = own.get("gbps", self.gpus[i].sim_model.d2d_gbps)
        return LinkModel(gbps, own.get("latency_us", DEFAULT_LATENCY_US["device"]))

    # ------------------------------------------------------------------ faults
    def faults_for(self, i: int, j: Optional[int] = None, path: str = "p2p") -> List[Fault]:
        """Faults acting on GPU pair (i, j) — or on GPU i alone when j is None — over ``path``.

        A gpu fault hits every pair with that GPU; a pair fault its pair; a class fault every
        pair whose reported class matches. ``path="p2p"`` returns faults on the peer path
        (``path`` "p2p" or "all"); any other path name ("host", "device", "collective")
        returns only ``path = "all"`` faults; ``"any"`` returns every fault that hits the GPUs.
        """
        out = []
        key = self._key(i, j) if j is not None else None
        cls = self.link_class(i, j) if j is not None else None
        for f in self.faults:
            if not f.hits_path(path):
                continue
            if f.scope == "gpu":
                hit = f.gpus[0] == i or (j is not None and f.gpus[0] == j)
            elif key is None or cls is None:
                hit = False
            elif f.scope == "pair":
                hit = f.gpus == key
            else:
                hit = f.matches_class(cls)
            if hit:
                out.append(f)
        return out

    # ------------------------------------------------------------------ PCIe tree
    @property
    def pcie_tree(self):
        """The bridges above the GPUs and NICs (gputopo.sim.pcie_tree.PcieTree), built on first use.

        Its endpoints are the GPUs (by NVML index), then the NICs: NIC k is endpoint
        ``gpu_count + k``."""
        if self._tree is None:
            from .nics import endpoint_kind
            from .pcie_tree import build_tree

            numa = [g.numa_node for g in self.gpus]
            kind = endpoint_kind(lambda i, j: self._pcie[(min(i, j), max(i, j))], numa, self.nics)
            self._tree = build_tree([g.address for g in self.gpus] + [n.address for n in self.nics],
                                    numa + [n.numa_node for n in self.nics], kind,
                                    [g.pcie_gen_max for g in self.gpus] + [n.pcie_gen for n in self.nics],
                                    self.host.cpu_vendor)
        return self._tree


def pcie_theory_gbps(g: GpuDesc) -> float:
    """Theoretical GB/s of a GPU's healthy PCIe link under load: max generation (idle GPUs drop
    the generation, load brings it back), declared width (before downtrained faults)."""
    width = g.pcie_width_healthy if g.pcie_width_healthy is not None else g.pcie_width
    return pcie_gbps(g.pcie_gen_max, width) or PCIE_X16_GBPS[4]  # an unknown generation: Gen4 x16
