"""Where a PCI device sits and what lspci says about a bridge: the sysfs chain of bridges above
a device, and the ``ACSCtl:`` bits of an ``lspci -vvv`` block (gputopo.probe.host reads ACS
with these; gputopo.probe.nics places NICs with them).

The chain comes from the target of ``sys/bus/pci/devices/<bdf>``
(``../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:07:00.0``): the
path under ``sys/devices`` is the host bridge, then every bridge down to the device.
"""

from __future__ import annotations

import os
import re
from typing import Dict, List, Optional, Tuple

from gputopo.model.bus_id import BDF_RE, bus_key, try_bus_key
from gputopo.probe.host_files import host_path

_HOST_BRIDGE_RE = re.compile(r"^pci[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}$")
_LSPCI_HEAD_RE = re.compile(r"^([0-9a-fA-F]{4,8}:)?([0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s")


def upstream_bridges(root: str, gpu_bus_id: str) -> Optional[List[str]]:
    """PCI addresses of the bridges above a GPU, root port first; None when the GPU is not in sysfs.

    Read from the target of ``sys/bus/pci/devices/<bdf>``, whose path under ``sys/devices`` is
    the chain of bridges down to the device.
    """
    place = pci_place(root, gpu_bus_id)
    return None if place is None else place[1]


def pci_place(root: str, bus_id: str) -> Optional[Tuple[Optional[str], List[str]]]:
    """Where a PCI device sits: its host bridge (``"pci0000:17"``; None when sysfs does not say)
    and the bridges above it, root port first. None when the device is not in sysfs."""
    key = try_bus_key(bus_id)
    if key is None:
        return None
    link = host_path(root, f"sys/bus/pci/devices/{key}")
    try:
        target = os.readlink(link)
    except OSError:
        if os.path.isdir(link):  # a plain directory (unusual): no chain to read
            return None, []
        return None
    chain, host_bridge = [], None
    for part in target.replace("\\", "/").split("/"):
        if BDF_RE.match(part):
            chain.append(bus_key(part))
        elif _HOST_BRIDGE_RE.match(part):
            host_bridge = part.lower()
    if chain and chain[-1] == key:
        chain.pop()
    return host_bridge, chain


def parse_lspci_blocks(text: str) -> Dict[str, str]:
    """``lspci -vvv`` output split per device: {"0000:07:00.0": block text}."""
    blocks: Dict[str, List[str]] = {}
    current = None
    for line in text.splitlines():
        if line and not line[0].isspace():
            m = _LSPCI_HEAD_RE.match(line)
            if m:
                current = bus_key((m.group(1) or "0000:") + m.group(2))
                blocks[current] = [line]
                continue
        if current is not None:
            blocks[current].append(line)
    return {k: "\n".join(v) for k, v in blocks.items()}


def parse_acs_controls(block: str) -> Optional[Dict[str, bool]]:
    """The ``ACSCtl:`` bits of one device's lspci block, or None when it has no ACS capability."""
    for line in block.splitlines():
        line = line.strip()
        if line.startswith("ACSCtl:"):
            controls = {}
            for tok in line[len("ACSCtl:"):].split():
                if tok.endswith(("+", "-")):
                    controls[tok[:-1]] = tok.endswith("+")
            return controls
    return None
