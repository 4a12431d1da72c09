"""The PCIe bridges of a simulated machine, derived from its pair classes.

A real host reader finds the bridges above a GPU from the GPU's sysfs path
(``/sys/devices/pci0000:17/0000:17:01.0/0000:18:00.0/0000:19:00.0/0000:1a:00.0``) and reads their
ACS bits from lspci, so a simulated host needs a bridge tree that agrees with the pair classes it
claims. The tree is built from the classes by grouping GPUs at each level:

- GPUs joined by classes up to NODE share a NUMA node; up to PHB a host bridge (``pci0000:BB``);
  up to PXB a root port; PIX a PCIe switch.
- Under a root port: one GPU sits directly below it; one PIX group of several GPUs sits below one
  switch (GPU pairs on it cross a single switch: PIX); several PIX groups sit below a top switch,
  each in its own second-level switch (pairs across them cross several switches: PXB).

Bridge bus numbers are taken from free numbers just below the GPUs' own buses, so buses grow
down every chain as on real machines. A class matrix that no tree can produce (e.g. PIX, PIX but
SYS on a triangle) still gives a tree; :meth:`PcieTree.derived_kind` then says what it produces.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

from gputopo.model.bus_id import PciAddress

RANK = {"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3, "SYS": 4}

ROOT_PORT = "root_port"
SWITCH_UP = "switch_upstream"
SWITCH_DOWN = "switch_downstream"

_ROOT_PORT_IDS = {
    "intel": (0x8086, 0x347A, "Intel Corporation Device 347a (rev 04)"),
    "amd": (0x1022, 0x1483, "Advanced Micro Devices, Inc. [AMD] Starship/Matisse GPP Bridge"),
}
_SWITCH_IDS = {  # PCIe generation of the GPUs below -> (vendor, device, lspci name)
    3: (0x10B5, 0x8747, "PLX Technology, Inc. PEX 8747 48-Lane, 5-Port PCI Express Gen 3 (8.0 GT/s) Switch (rev ca)"),
    4: (0x1000, 0xC010, "Broadcom / LSI PEX880xx PCIe Gen 4 Switch (rev b0)"),
    5: (0x1000, 0xC030, "Broadcom / LSI PEX890xx PCIe Gen 5 Switch (rev b0)"),
}


@dataclass(eq=False)
class PciBridge:
    """One bridge above GPUs: a root port, or a switch's upstream or downstream port."""

    addr: PciAddress
    role: str
    parent: Optional["PciBridge"]
    host_bridge: str  # sysfs name of the host bridge, e.g. "pci0000:17"
    vendor_id: int
    device_id: int
    lspci_name: str
    pcie_gen: int
    numa_node: Optional[int]
    secondary: int = 0
    subordinate: int = 0
    gpus: List[int] = field(default_factory=list)  # NVML indices of the GPUs below it

    @property
    def bdf(self) -> str:
        """lspci -D / sysfs form, e.g. ``0000:17:01.0``."""
        return self.addr.lspci

    @property
    def acs_capable(self) -> bool:
        """Root ports and switch downstream ports carry ACS; upstream ports do not."""
        return self.role != SWITCH_UP


class PcieTree:
    """Bridges (pre-order) and, per GPU, its chain of bridges from the root port down."""

    def __init__(self, bridges: List[PciBridge], chains: List[List[PciBridge]],
                 gpu_addrs: Sequence[PciAddress], node_group: List[int]):
        self.bridges = bridges
        self.chains = chains
        self.gpu_addrs = list(gpu_addrs)
        self._node_group = node_group
        self.by_bdf: Dict[str, PciBridge] = {b.bdf: b for b in bridges}

    def chain(self, gpu: int) -> List[PciBridge]:
        return self.chains[gpu]

    def host_bridge(self, gpu: int) -> str:
        return self.chains[gpu][0].host_bridge

    def sysfs_path(self, gpu: int) -> str:
        """Path under ``sys/`` of the GPU's device folder: ``devices/pci0000:17/.../0000:1a:00.0``."""
        parts = [b.bdf for b in self.chains[gpu]] + [self.gpu_addrs[gpu].lspci]
        return "/".join(["devices", self.host_bridge(gpu)] + parts)

    def bridge_sysfs_path(self, bridge: PciBridge) -> str:
        parts = []
        b: Optional[PciBridge] = bridge
        while b is not None:
            parts.append(b.bdf)
            b = b.parent
        return "/".join(["devices", bridge.host_bridge] + parts[::-1])

    def derived_kind(self, i: int, j: int) -> str:
        """The PCIe class the tree gives GPUs i and j (what a host reader would conclude)."""
        ci, cj = self.chains[i], self.chains[j]
        if ci[0].host_bridge != cj[0].host_bridge:
            return "NODE" if self._node_group[i] == self._node_group[j] else "SYS"
        if ci[0] is not cj[0]:
            return "PHB"
        last_i, last_j = ci[-1], cj[-1]
        if (last_i.role == SWITCH_DOWN and last_j.role == SWITCH_DOWN
                and last_i.parent is last_j.parent):
            return "PIX"
        return "PXB"


def _components(n: int, kind_rank: List[List[int]], level: int, members: Sequence[int]) -> List[List[int]]:
    """Connected components of ``members`` joined by pairs of rank <= level (ordered by first member)."""
    parent = {m: m for m in members}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    ms = sorted(members)
    for a_pos, a in enumerate(ms):
        row = kind_rank[a]
        for b in ms[a_pos + 1:]:
            if row[b] <= level:
                ra, rb = find(a), find(b)
                if ra != rb:
                    parent[max(ra, rb)] = min(ra, rb)
    groups: Dict[int, List[int]] = {}
    for m in ms:
        groups.setdefault(find(m), []).append(m)
    return sorted(groups.values(), key=lambda g: g[0])


class _BusPool:
    """Free bus numbers per PCI domain (GPU buses are taken)."""

    def __init__(self, addrs: Sequence[PciAddress]):
        self.used: Dict[int, set] = {}
        for a in addrs:
            self.used.setdefault(a.domain, set()).add(a.bus)

    def take(self, domain: int, count: int, below: int) -> list[tuple[int, int]]:
        """``count`` free (domain, bus) numbers, from ``domain`` just below bus ``below`` first.
        A group of GPUs that needs more bridges than its domain has buses (hundreds of GPUs
        behind one host bridge in a big description) gets the rest in fresh domains: a real
        host would have run out of buses, but the simulated machine must still build (the
        classes come from the tree's shape, never from bus numbers)."""
        used = self.used.setdefault(domain, set())
        got: List[int] = []
        for bus in list(range(below - 1, -1, -1)) + list(range(below + 1, 256)):
            if len(got) == count:
                break
            if bus not in used:
                got.append(bus)
        used.update(got)
        out = [(domain, b) for b in sorted(got)]
        while len(out) < count:  # spill into a domain no GPU uses
            spare = max(self.used) + 1
            if spare > 0xFFFF:
                raise ValueError("no free PCI domain left for the simulated machine's bridges")
            take = min(256, count - len(out))
            self.used[spare] = set(range(take))
            out += [(spare, b) for b in range(take)]
        return out


def build_tree(addrs: Sequence[PciAddress], numa_nodes: Sequence[Optional[int]],
               pcie_kind: Callable[[int, int], str], gens: Sequence[int],
               cpu_vendor: str = "intel") -> PcieTree:
    """Build the bridge tree for GPUs at ``addrs`` whose pair classes are ``pcie_kind(i, j)``."""
    n = len(addrs)
    kind_rank = [[0] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            r = RANK[pcie_kind(i, j)]
            kind_rank[i][j] = kind_rank[j][i] = r
    pool = _BusPool(addrs)
    rp_vendor, rp_device, rp_name = _ROOT_PORT_IDS.get(cpu_vendor, _ROOT_PORT_IDS["intel"])
    bridges: List[PciBridge] = []
    chains: List[List[PciBridge]] = [[] for _ in range(n)]
    node_group = [0] * n

    everyone = list(range(n))
    for g_node, node in enumerate(_components(n, kind_rank, RANK["NODE"], everyone)):
        for m in node:
            node_group[m] = g_node
        for phb in _components(n, kind_rank, RANK["PHB"], node):
            domain = addrs[phb[0]].domain
            numa = numa_nodes[phb[0]]
            gen = max(gens[m] for m in phb)
            sw_vendor, sw_device, sw_name = _SWITCH_IDS[min(max(gen, 3), 5)]
            plan = []  # per root port: list of PIX groups
            switches = 0
            for pxb in _components(n, kind_rank, RANK["PXB"], phb):
                pix_groups = _components(n, kind_rank, RANK["PIX"], pxb)
                plan.append(pix_groups)
                if len(pix_groups) == 1:
                    switches += 1 if len(pix_groups[0]) > 1 else 0
                else:
                    switches += 1 + len(pix_groups)
            buses = iter(pool.take(domain, 1 + 2 * switches, min(addrs[m].bus for m in phb)))
            root_domain, root_bus = next(buses)
            host = f"pci{root_domain:04x}:{root_bus:02x}"

            # bridge, switch and attach are called only within this iteration, so the loop's
            # variables they read (B023) are this iteration's
            def bridge(addr, role, parent, gpus):
                if role == ROOT_PORT:
                    ids = (rp_vendor, rp_device, rp_name)
                else:
                    ids = (sw_vendor, sw_device, sw_name)  # noqa: B023
                b = PciBridge(addr=addr, role=role, parent=parent, host_bridge=host, vendor_id=ids[0],  # noqa: B023
                              device_id=ids[1], lspci_name=ids[2], pcie_gen=gen, numa_node=numa,  # noqa: B023
                              gpus=list(gpus))
                bridges.append(b)
                return b

            def switch(parent, groups_below):
                """A switch below ``parent``; each entry of groups_below is a GPU index or a list
                (a PIX group that gets its own second-level switch). Returns its DSPs."""
                usp_domain, usp_bus = next(buses)  # noqa: B023
                parent.secondary = usp_bus
                all_gpus = [g for e in groups_below for g in (e if isinstance(e, list) else [e])]
                usp = bridge(PciAddress(usp_domain, usp_bus, 0, 0), SWITCH_UP, parent, all_gpus)
                dsp_domain, dsp_bus = next(buses)  # noqa: B023
                usp.secondary = dsp_bus
                for k, entry in enumerate(groups_below):
                    gpus = entry if isinstance(entry, list) else [entry]
                    if k and k % 256 == 0:  # a bus holds 32 devices x 8 functions: the next on a new bus
                        dsp_domain, dsp_bus = pool.take(dsp_domain, 1, dsp_bus)[0]
                    slot = k % 256
                    dsp = bridge(PciAddress(dsp_domain, dsp_bus, slot % 32, slot // 32), SWITCH_DOWN, usp, gpus)
                    if isinstance(entry, list):
                        switch(dsp, entry)
                    else:
                        dsp.secondary = addrs[entry].bus
                        attach(entry, dsp)

            def attach(gpu, parent):
                chain = []
                b = parent
                while b is not None:
                    chain.append(b)
                    b = b.parent
                chains[gpu] = chain[::-1]

            for k, pix_groups in enumerate(plan):
                members = [m for g in pix_groups for m in g]
                rp = bridge(PciAddress(root_domain, root_bus, 1 + k // 8, k % 8), ROOT_PORT, None, members)
                if len(pix_groups) == 1 and len(pix_groups[0]) == 1:
                    rp.secondary = addrs[members[0]].bus
                    attach(members[0], rp)
                elif len(pix_groups) == 1:
                    switch(rp, list(pix_groups[0]))
                else:
                    switch(rp, [list(g) for g in pix_groups])

    # subordinate bus: the largest bus below each bridge
    for b in bridges:
        b.subordinate = max([b.secondary] + [addrs[g].bus for g in b.gpus])
    for b in reversed(bridges):
        if b.parent is not None:
            b.parent.subordinate = max(b.parent.subordinate, b.subordinate)
    return PcieTree(bridges, chains, addrs, node_group)
