"""The host's RDMA NICs and the PCIe class of their path to each GPU, read from sysfs.

Why: NCCL sends between machines through the NIC nearest each GPU; a NIC that is SYS from its GPU
halves inter-node bandwidth, and `nvidia-smi topo -m` shows it as NIC rows and columns. NVML
knows nothing of NICs, so they come from the host:

- ``sys/class/infiniband/<name>/device`` resolves to the NIC's PCI function (``0000:1c:00.0``);
  software RDMA devices (rxe, siw) have no PCI function and are left out.
- The bridges above a NIC and above a GPU come from the same sysfs path the ACS reader walks
  (:func:`gputopo.probe.host.pci_place`); their ``numa_node`` files give the NUMA node.

A pair's class, as nvidia-smi names it: different host bridges -> NODE on one NUMA node, SYS
across; one host bridge but different root ports -> PHB; below one PCIe switch (the chains differ
only in their last bridge, a switch's downstream port) -> PIX; deeper -> PXB.
"""

from __future__ import annotations

import os
import re
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from gputopo.model import AcsBridge, LinkClass, Nic
from gputopo.model.values import NotAvailable

from gputopo.model.bus_id import try_bus_key

from .host_files import host_path, read_host_file
from .nic_ports import read_nic_ports
from .pci_bridges import pci_place

Runner = Callable[[Sequence[str]], Tuple[int, str, str]]
Place = Tuple[Optional[str], List[str], Optional[int]]  # host bridge, bridges, NUMA node


def _numa(root: str, bdf: str) -> Optional[int]:
    text = read_host_file(root, f"sys/bus/pci/devices/{bdf}/numa_node")
    try:
        node = int(text) if text is not None else -1
    except ValueError:
        return None
    return node if node >= 0 else None


def _place(root: str, bus_id: str) -> Optional[Place]:
    bdf = try_bus_key(bus_id)
    where = pci_place(root, bus_id) if bdf else None
    if bdf is None or where is None:
        return None
    host_bridge, chain = where
    numa = _numa(root, bdf)
    for bridge in chain[::-1]:  # a device without a node of its own is on its bridges' node
        if numa is not None:
            break
        numa = _numa(root, bridge)
    return host_bridge, chain, numa


def pcie_class(a: Place, b: Place) -> LinkClass:
    """The class between two devices from where each sits (see the module docstring)."""
    host_a, chain_a, numa_a = a
    host_b, chain_b, numa_b = b
    if host_a != host_b or not chain_a or not chain_b:
        return LinkClass("NODE" if numa_a == numa_b else "SYS")
    if chain_a[0] != chain_b[0]:
        return LinkClass("PHB")
    if chain_a[:-1] == chain_b[:-1] and len(chain_a) >= 2:
        return LinkClass("PIX")
    return LinkClass("PXB")


def _natural(name: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def rdma_devices(root: str) -> List[Tuple[str, str]]:
    """(device name, PCI address) of each RDMA device with a PCI function, by name (mlx5_2 < mlx5_10)."""
    base = host_path(root, "sys/class/infiniband")
    try:
        names = os.listdir(base)
    except OSError:
        return []
    out = []
    for name in sorted(names, key=_natural):
        target = os.path.basename(os.path.realpath(os.path.join(base, name, "device")))
        bdf = try_bus_key(target)
        if bdf is not None:
            out.append((name, bdf))
    return out


def read_nics(root: str, gpu_bus_ids: Mapping[int, str], run: Optional[Runner] = None) -> List[Nic]:
    """The RDMA NICs under ``root`` with their class to each GPU ({NVML index: bus id}) and to
    each other, labelled NIC0, NIC1, ... in device-name order as nvidia-smi's NIC Legend, each
    with its ports (gputopo.probe.nic_ports) and, when ``run`` is given, the ACS control bits of
    the bridges above it (lspci, as for the GPUs' bridges: gputopo.probe.host.read_acs).

    Empty when there is none, or when a GPU cannot be placed in sysfs (no class could be told).
    """
    devices = rdma_devices(root)
    if not devices:
        return []
    gpu_places: Dict[int, Place] = {}
    for index, bus in gpu_bus_ids.items():
        place = _place(root, bus)
        if place is None:
            return []
        gpu_places[index] = place
    places = {bdf: _place(root, bdf) for _, bdf in devices}
    labels = {bdf: f"NIC{k}" for k, (_, bdf) in enumerate(devices)}
    nics = []
    for name, bdf in devices:
        here = places[bdf]
        if here is None:
            continue
        nics.append(Nic(
            label=labels[bdf], device=name, pci_bus_id=bdf,
            numa_node=(here[2] if here[2] is not None
                       else NotAvailable("sysfs numa_node is -1 for it and its bridges")),
            gpu_classes={i: pcie_class(here, p) for i, p in sorted(gpu_places.items())},
            nic_classes={labels[other]: pcie_class(here, there) for other, there in places.items()
                         if other != bdf and there is not None},
            ports=read_nic_ports(root, name, bdf),
            bridges=_bridges(root, run, bdf, here[1])))
    return nics


def _bridges(root: str, run: Optional[Runner], bdf: str, chain: List[str]):
    """The NIC's bridges, root port first, with their ACS controls (``.gpus`` holds the NIC)."""
    from .host import read_acs

    if run is None:
        return NotAvailable("ACS of the NIC's bridges not read (no command runner)")
    acs = read_acs(root, run, [bdf])
    if not isinstance(acs, list):
        return acs
    by_bdf = {b.bdf: b for b in acs}
    return [by_bdf.get(b, AcsBridge(bdf=b, gpus=[bdf], controls={})) for b in chain]
