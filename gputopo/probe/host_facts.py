"""Small host facts read from procfs/sysfs under a root ("/" or a simulated host's folder):
the CPU vendor (NCCL's peer-to-peer level depends on it) and the NUMA node of a PCI device.

- CPU vendor: ``proc/cpuinfo``'s ``vendor_id`` on x86 (GenuineIntel -> "intel", AuthenticAMD ->
  "amd", CentaurHauls / Shanghai -> "zhaoxin", as NCCL's ncclTopoCpuType names them; another
  vendor string is kept in lower case), ``CPU implementer`` lines -> "arm", ``cpu : POWER..`` ->
  "power".
- NUMA node of a GPU's socket: ``sys/bus/pci/devices/<bdf>/numa_node``, the node the kernel
  attaches the PCIe device to (what nvidia-smi prints as NUMA Affinity). NVML's
  ``nvmlDeviceGetNumaNodeId`` is another thing: the NUMA node of the GPU's *own memory* on
  coherent systems (Grace Hopper, GB200), NOT_SUPPORTED on x86; it is kept as
  ``Gpu.gpu_memory_numa_node``.
"""

from __future__ import annotations

import os
from typing import Union

from gputopo.model.values import NotAvailable

_X86_VENDORS = {"genuineintel": "intel", "authenticamd": "amd", "centaurhauls": "zhaoxin",
                "shanghai": "zhaoxin"}


def _read(root: str, rel: str):
    try:
        with open(os.path.join(root, rel.lstrip("/")), encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def read_cpu_vendor(root: str = "/") -> Union[str, NotAvailable]:
    """"intel" | "amd" | "zhaoxin" | "arm" | "power" | another vendor string, or NotAvailable."""
    text = _read(root, "proc/cpuinfo")
    if text is None:
        return NotAvailable(f"cannot read {os.path.join(root, 'proc/cpuinfo')}")
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip().lower(), value.strip()
        if key == "vendor_id" and value:
            return _X86_VENDORS.get(value.lower(), value.lower())
        if key == "cpu implementer":
            return "arm"
        if key == "cpu" and value.upper().startswith("POWER"):
            return "power"
    return NotAvailable("proc/cpuinfo names no CPU vendor (no vendor_id / CPU implementer line)")


def read_pci_numa_node(root: str, key) -> Union[int, NotAvailable]:
    """The NUMA node the kernel attaches PCI device ``key`` (sysfs form ``0000:07:00.0``, see
    gputopo.model.bus_id.bus_key; None when unknown) to, or NotAvailable(reason)."""
    if key is None:
        return NotAvailable("no PCI address to look up the NUMA node of")
    rel = f"sys/bus/pci/devices/{key}/numa_node"
    text = _read(root, rel)
    if text is None:
        return NotAvailable(f"cannot read {os.path.join(root, rel)}")
    try:
        node = int(text.strip())
    except ValueError:
        return NotAvailable(f"{rel} holds {text.strip()!r}, not a number")
    if node < 0:
        return NotAvailable(f"{rel} is {node}: the firmware gives this device no NUMA node "
                            "(one-node machine or no ACPI proximity info)")
    return node
