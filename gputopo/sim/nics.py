"""The RDMA NICs a simulated machine declares (``[[nic]]``), and where they sit in its PCIe tree.

Why: NCCL reaches other machines through the NIC nearest each GPU, and `nvidia-smi topo -m`
prints each GPU-NIC class; a simulated machine shows NICs the way a real one does, through the
same sysfs the host reader walks (``/sys/class/infiniband/<name>/device``), so the class a scan
reports comes from the bridge tree, not from the description. A NIC is declared by where it is::

    [[nic]]
    name = "mlx5_0"            # required: the RDMA device name
    bus_id = "0000:1c:00.0"    # required: its PCI address
    gpu = 0                    # optional: the GPU it sits beside ...
    class = "PIX"              # ... on its PCIe switch (PIX), below its root port (PXB), or on its
                               #     host bridge (PHB); default PIX
    numa_node = 0              # without gpu: its own host bridge on this node (NODE to the GPUs
                               #     on it, SYS to the rest); with gpu: the GPU's node

and, all optional, what its one port (port 1) and its PCIe link show in sysfs (healthy by default;
a fault is a value other than the default)::

    rate_gbps = 400            # the port's rate, Gb/s (sysfs "400 Gb/sec (4X NDR)")
    link_layer = "InfiniBand"  # or "Ethernet" (RoCE)
    state = "Active"           # Down | Initializing | Armed | Active | ActiveDefer
    phys_state = "LinkUp"      # LinkUp when Active; else default Polling; Disabled, Sleep, ...
    counters = { symbol_error = 12, link_downed = 1 }   # error counters (model/nic.py names); others 0
    pcie_gen = 5               # current PCIe generation; default its maximum
    pcie_gen_max = 5           # default: the GPU's beside it (the machine's highest without gpu)
    pcie_width = 16            # current lanes; default its maximum
    pcie_width_max = 16
    ca_type = "MT4129"         # adapter model (hca_type; MT4129 = ConnectX-7), firmware, board_id

The tree is built over GPUs and NICs together (``endpoint_kind`` gives every pair of them a class
for :func:`gputopo.sim.pcie_tree.build_tree`): a NIC beside a GPU takes the GPU's classes to
everything else, or its own declared class where that is farther.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

from gputopo.model.bus_id import PciAddress
from gputopo.model.nic import ERROR_COUNTERS, PHYS_STATES

from .pcie_tree import RANK

NIC_KEYS = {"name", "bus_id", "gpu", "class", "numa_node", "rate_gbps", "link_layer", "state", "phys_state",
            "counters", "pcie_gen", "pcie_gen_max", "pcie_width", "pcie_width_max", "ca_type", "firmware",
            "board_id"}
LINK_LAYERS = ("InfiniBand", "Ethernet")
#: sysfs spelling of each logical port state ("4: ACTIVE").
SYSFS_PORT_STATE = {"Down": "1: DOWN", "Initializing": "2: INIT", "Armed": "3: ARMED", "Active": "4: ACTIVE",
                    "ActiveDefer": "5: ACTIVE_DEFER"}
#: Classes a NIC may have to the GPU it is declared beside (farther ones: use numa_node alone).
NEAR_CLASSES = ("PIX", "PXB", "PHB")
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]*$")
#: A ConnectX-7 (vendor Mellanox), what DGX H100 class machines carry.
NIC_PCI_IDS = (0x15B3, 0x1021, 0x0207, "Infiniband controller", "MT2910 Family [ConnectX-7]")


@dataclass
class NicDesc:
    """One declared NIC. ``gpu``/``near_class`` place it beside a GPU; else its own host bridge."""

    name: str
    address: PciAddress
    numa_node: Optional[int]
    gpu: Optional[int] = None
    near_class: Optional[str] = None
    pcie_gen: int = 4  # the maximum (what lspci's LnkCap says)
    pcie_gen_now: Optional[int] = None  # current; None: the maximum
    pcie_width: int = 16  # maximum lanes
    pcie_width_now: Optional[int] = None
    rate_gbps: float = 400.0
    link_layer: str = "InfiniBand"
    state: str = "Active"
    phys_state: str = "LinkUp"
    counters: Dict[str, int] = field(default_factory=dict)
    ca_type: str = "MT4129"
    firmware: str = "28.39.1002"
    board_id: str = "MT_0000000838"

    @property
    def lspci_bdf(self) -> str:
        return self.address.lspci


def parse_nics(ctx, entries, gpus, taken: Dict[str, str]) -> List[NicDesc]:
    """Validate the ``[[nic]]`` array; ``taken`` maps lspci addresses already used to their owner."""
    if not isinstance(entries, list):
        raise ctx.error("expected an array of tables ([[nic]])", "nic")
    nics: List[NicDesc] = []
    names: Dict[str, int] = {}
    used = dict(taken)
    for k, entry in enumerate(entries):
        key = ("nic", k)
        if not isinstance(entry, dict):
            raise ctx.error("expected a table", *key)
        for name in entry:
            if name not in NIC_KEYS:
                raise ctx.error(f"unknown key {name!r}; allowed: {', '.join(sorted(NIC_KEYS))}", *key, name)
        for need in ("name", "bus_id"):
            if need not in entry:
                raise ctx.error(f"missing {need}", *key)
        name = entry["name"]
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ctx.error(f"expected an RDMA device name like \"mlx5_0\", got {name!r}", *key, "name")
        if name in names:
            raise ctx.error(f"NIC name {name!r} is also NIC {names[name]}'s", *key, "name")
        names[name] = k
        if not isinstance(entry["bus_id"], str):
            raise ctx.error(f"expected a PCI address like \"0000:1c:00.0\", got {entry['bus_id']!r}",
                            *key, "bus_id")
        try:
            addr = PciAddress.parse(entry["bus_id"])
        except ValueError as exc:
            raise ctx.error(str(exc), *key, "bus_id") from None
        if addr.lspci in used:
            raise ctx.error(f"bus id {addr.lspci} is also {used[addr.lspci]}'s", *key, "bus_id")
        used[addr.lspci] = f"NIC {name}"
        gpu = entry.get("gpu")
        if gpu is not None and (isinstance(gpu, bool) or not isinstance(gpu, int) or not 0 <= gpu < len(gpus)):
            raise ctx.error(f"expected a GPU index 0..{len(gpus) - 1}, got {gpu!r}", *key, "gpu")
        near = entry.get("class")
        if near is not None and gpu is None:
            raise ctx.error("class is the NIC's class to its gpu: set gpu too", *key, "class")
        if gpu is not None:
            near = "PIX" if near is None else near
            if near not in NEAR_CLASSES:
                raise ctx.error(f"expected one of {', '.join(NEAR_CLASSES)} (a NIC farther from its GPU: "
                                f"leave out gpu and set numa_node), got {near!r}", *key, "class")
        numa = entry.get("numa_node")
        if numa is not None and (not isinstance(numa, int) or isinstance(numa, bool) or not 0 <= numa <= 1023):
            raise ctx.error(f"expected an integer in 0..1023, got {numa!r}", *key, "numa_node")
        if gpu is not None:
            if numa is not None and numa != gpus[gpu].numa_node:
                raise ctx.error(f"numa_node {numa} differs from GPU {gpu}'s ({gpus[gpu].numa_node}), "
                                "which a NIC beside it shares", *key, "numa_node")
            numa = gpus[gpu].numa_node
        elif numa is None:
            numa = 0
        gen = gpus[gpu].pcie_gen_max if gpu is not None else max((g.pcie_gen_max for g in gpus), default=4)
        nic = NicDesc(name=name, address=addr, numa_node=numa, gpu=gpu, near_class=near, pcie_gen=gen)
        _port_facts(ctx, entry, key, nic)
        nics.append(nic)
    return nics


def _int_in(ctx, entry, key, name, low, high, default):
    v = entry.get(name, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
        raise ctx.error(f"expected an integer in {low}..{high}, got {v!r}", *key, name)
    return v


def _port_facts(ctx, entry, key, nic: NicDesc) -> None:
    """The optional port and PCIe keys of one [[nic]] (see the module docstring)."""
    nic.pcie_gen = _int_in(ctx, entry, key, "pcie_gen_max", 1, 6, nic.pcie_gen)
    nic.pcie_gen_now = _int_in(ctx, entry, key, "pcie_gen", 1, nic.pcie_gen, None)
    nic.pcie_width = _int_in(ctx, entry, key, "pcie_width_max", 1, 32, 16)
    nic.pcie_width_now = _int_in(ctx, entry, key, "pcie_width", 1, nic.pcie_width, None)
    rate = entry.get("rate_gbps", 400)
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate <= 3200:
        raise ctx.error(f"expected a rate in Gb/s (0 < rate <= 3200), got {rate!r}", *key, "rate_gbps")
    nic.rate_gbps = float(rate)
    for name, allowed in (("link_layer", LINK_LAYERS), ("state", tuple(SYSFS_PORT_STATE))):
        v = entry.get(name, getattr(nic, name))
        if v not in allowed:
            raise ctx.error(f"expected one of {', '.join(allowed)}, got {v!r}", *key, name)
        setattr(nic, name, v)
    phys = entry.get("phys_state", "LinkUp" if nic.state in ("Active", "Armed", "ActiveDefer") else "Polling")
    if phys not in PHYS_STATES.values():
        raise ctx.error(f"expected one of {', '.join(PHYS_STATES.values())}, got {phys!r}", *key, "phys_state")
    if nic.state in ("Active", "Armed", "ActiveDefer") and phys != "LinkUp":
        raise ctx.error(f"a port in state {nic.state} has its physical link up: phys_state = \"LinkUp\", "
                        f"got {phys!r}", *key, "phys_state")
    nic.phys_state = phys
    counters = entry.get("counters", {})
    if not isinstance(counters, dict):
        raise ctx.error("expected a table of error counters, e.g. { symbol_error = 12 }", *key, "counters")
    for name, v in counters.items():
        if name not in ERROR_COUNTERS:
            raise ctx.error(f"unknown counter {name!r}; known: {', '.join(ERROR_COUNTERS)}", *key, "counters", name)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2 ** 64:
            raise ctx.error(f"expected a count >= 0, got {v!r}", *key, "counters", name)
    nic.counters = dict(counters)
    for name in ("ca_type", "firmware", "board_id"):
        v = entry.get(name, getattr(nic, name))
        if not isinstance(v, str) or not v.strip() or len(v) > 64 or "\n" in v:
            raise ctx.error(f"expected a short text, got {v!r}", *key, name)
        setattr(nic, name, v)


def _worse(*kinds: str) -> str:
    return max(kinds, key=RANK.__getitem__)


def endpoint_kind(gpu_kind: Callable[[int, int], str], gpu_numa: Sequence[Optional[int]],
                  nics: Sequence[NicDesc]) -> Callable[[int, int], str]:
    """PCIe class between endpoints i, j: GPUs first (NVML index), then NICs (declared order)."""
    n = len(gpu_numa)

    def by_numa(numa, other_numa) -> str:
        return "NODE" if numa == other_numa else "SYS"

    def near_class(a: NicDesc) -> str:
        # parse_nics sets a NIC's class to its GPU whenever it sets the GPU
        if a.near_class is None:
            raise ValueError(f"NIC {a.name} is placed beside GPU {a.gpu} without a class to it")
        return a.near_class

    def nic_to_gpu(a: NicDesc, g: int) -> str:
        if a.gpu is None:
            return by_numa(a.numa_node, gpu_numa[g])
        return near_class(a) if g == a.gpu else _worse(near_class(a), gpu_kind(a.gpu, g))

    def kind(i: int, j: int) -> str:
        if i < n and j < n:
            return gpu_kind(i, j)
        if i < n or j < n:
            g, a = (i, nics[j - n]) if i < n else (j, nics[i - n])
            return nic_to_gpu(a, g)
        a, b = nics[i - n], nics[j - n]
        if a.gpu is None:
            return by_numa(a.numa_node, b.numa_node) if b.gpu is None else nic_to_gpu(a, b.gpu)
        if b.gpu is None:
            return nic_to_gpu(b, a.gpu)
        if a.gpu == b.gpu:
            return _worse(near_class(a), near_class(b))
        return _worse(near_class(a), near_class(b), gpu_kind(a.gpu, b.gpu))

    return kind
