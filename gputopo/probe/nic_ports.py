"""An RDMA device's ports as sysfs shows them, into model/nic.py's NicPort.

Read under ``root`` (``/`` on a real machine, a simulated host's folder):

- ``sys/class/infiniband/<dev>/ports/<n>/state`` (``4: ACTIVE``), ``phys_state`` (``5: LinkUp``),
  ``rate`` (``400 Gb/sec (4X NDR)``), ``link_layer`` (``InfiniBand`` / ``Ethernet``);
- ``.../ports/<n>/counters/<name>``: the cumulative error counters of model/nic.py's
  ERROR_COUNTERS (the mlx5 driver writes them for InfiniBand and RoCE ports alike; a file that
  is absent is NotAvailable, never 0);
- ``sys/class/infiniband/<dev>/hca_type`` (adapter model: ``MT4129``), ``fw_ver``, ``board_id``;
- the device's PCI function (``sys/bus/pci/devices/<bdf>/``): ``current_link_speed``
  (``32.0 GT/s PCIe``), ``max_link_speed``, ``current_link_width``, ``max_link_width``.

Measuring code: it returns facts; report/network_checks.py judges them.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Optional

from gputopo.model.nic import ERROR_COUNTERS, NicPort, phys_state, port_state, rate_gbps
from gputopo.model.values import NotAvailable

from .host_files import host_path, read_host_file

#: sysfs PCIe link speed (GT/s) -> PCIe generation.
SPEED_GEN = {"2.5": 1, "5.0": 2, "5": 2, "8.0": 3, "8": 3, "16.0": 4, "16": 4, "32.0": 5, "32": 5,
             "64.0": 6, "64": 6}
_SPEED_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*GT/s")


def pcie_gen(text: Optional[str]) -> Any:
    """``"32.0 GT/s PCIe"`` -> 5; NotAvailable for ``Unknown`` or an unreadable file."""
    if text is None:
        return NotAvailable("file not readable")
    m = _SPEED_RE.match(text)
    if not m or m.group(1) not in SPEED_GEN:
        return NotAvailable(f"link speed {text.strip()!r} is not a PCIe rate")
    return SPEED_GEN[m.group(1)]


def _width(text: Optional[str]) -> Any:
    if text is None:
        return NotAvailable("file not readable")
    try:
        width = int(text.strip())
    except ValueError:
        return NotAvailable(f"link width {text.strip()!r} is not a number")
    return width if width > 0 else NotAvailable(f"link width {width} (link down or unknown)")


def _fact(root: str, rel: str, parse, sources: Dict[str, str], key: str) -> Any:
    text = read_host_file(root, rel)
    if text is None:
        return NotAvailable(f"cannot read /{rel}")
    sources[key] = "/" + rel
    return parse(text)


def _port_numbers(root: str, device: str) -> List[int]:
    try:
        names = os.listdir(host_path(root, f"sys/class/infiniband/{device}/ports"))
    except OSError:
        return []
    return sorted(int(n) for n in names if n.isdigit())


def read_nic_ports(root: str, device: str, pci_bus_id: Any) -> List[NicPort]:
    """Every port of RDMA device ``device`` (``mlx5_0``), whose PCI function is ``pci_bus_id``
    (``0000:1c:00.0``; NotAvailable when unknown). Empty when sysfs lists no port."""
    base = f"sys/class/infiniband/{device}"
    dev_sources: Dict[str, str] = {}

    def text(rel: str, key: str) -> Any:
        return _fact(root, f"{base}/{rel}", lambda t: t.splitlines()[0].strip() if t else
                     NotAvailable(f"/{base}/{rel} is empty"), dev_sources, key)

    ca_type, firmware, board_id = text("hca_type", "ca_type"), text("fw_ver", "firmware"), text("board_id", "board_id")
    if isinstance(pci_bus_id, str):
        pci = f"sys/bus/pci/devices/{pci_bus_id}"
        gen_now = _fact(root, f"{pci}/current_link_speed", pcie_gen, dev_sources, "pcie_gen_current")
        gen_max = _fact(root, f"{pci}/max_link_speed", pcie_gen, dev_sources, "pcie_gen_max")
        width_now = _fact(root, f"{pci}/current_link_width", _width, dev_sources, "pcie_width_current")
        width_max = _fact(root, f"{pci}/max_link_width", _width, dev_sources, "pcie_width_max")
    else:
        gen_now = gen_max = width_now = width_max = NotAvailable("the NIC's PCI function is not known")
    ports = []
    for n in _port_numbers(root, device):
        where = f"{base}/ports/{n}"
        sources = dict(dev_sources)
        counters: Dict[str, Any] = {}
        for name in ERROR_COUNTERS:
            raw = read_host_file(root, f"{where}/counters/{name}")
            if raw is None:
                counters[name] = NotAvailable(f"no /{where}/counters/{name}")
                continue
            try:
                counters[name] = int(raw.split()[0])
            except (ValueError, IndexError):
                counters[name] = NotAvailable(f"/{where}/counters/{name} holds {raw[:40]!r}")
        if any(isinstance(v, int) for v in counters.values()):
            sources["counters"] = f"/{where}/counters/"
        ports.append(NicPort(
            device=device, port=n,
            state=_fact(root, f"{where}/state", port_state, sources, "state"),
            phys_state=_fact(root, f"{where}/phys_state", phys_state, sources, "phys_state"),
            rate_gbps=_fact(root, f"{where}/rate", rate_gbps, sources, "rate_gbps"),
            link_layer=_fact(root, f"{where}/link_layer", lambda t: t.strip(), sources, "link_layer"),
            counters=counters, pcie_gen_current=gen_now, pcie_gen_max=gen_max,
            pcie_width_current=width_now, pcie_width_max=width_max,
            pci_bus_id=pci_bus_id if isinstance(pci_bus_id, str) else NotAvailable("not a PCI device"),
            ca_type=ca_type, firmware=firmware, board_id=board_id, sources=sources))
    return ports
