"""PCI addresses in the two spellings a simulated machine must keep consistent.

NVML writes a bus id with an 8-digit domain in upper case (``"00000000:1A:00.0"``); lspci and
sysfs write a 4-digit domain in lower case (``"0000:1a:00.0"``), and lspci leaves the domain
out altogether unless ``-D`` is given or the machine has several PCI domains. Descriptions accept
any of these spellings; :class:`~gputopo.sim.description.GpuDesc` keeps the NVML form, the fake
host writes the lspci/sysfs form, and both come from one parsed address so they never disagree.
The address and its spellings are gputopo.model.bus_id's (the one decoder of every source's form).
"""

from __future__ import annotations

from gputopo.model.bus_id import PciAddress

__all__ = ["PciAddress", "lspci_bdf"]


def lspci_bdf(text: str) -> str:
    """Any spelling -> lspci -D / sysfs form ``0000:1a:00.0``. Raises ValueError."""
    return PciAddress.parse(text).lspci
