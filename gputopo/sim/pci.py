"""PCI addresses in the two spellings a simulated machine must keep consistent.

NVML writes a bus id with an 8-digit domain in upper case (``"00000000:1A:00.0"``); lspci and
sysfs write a 4-digit domain in lower case (``"0000:1a:00.0"``), and lspci leaves the domain
out altogether unless ``-D`` is given or the machine has several PCI domains. Descriptions accept
any of these spellings; :class:`~gputopo.sim.description.GpuDesc` keeps the NVML form, the fake
host writes the lspci/sysfs form, and both come from one parsed address so they never disagree.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_ADDR_RE = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):(?P<dev>[0-9a-fA-F]{1,2})\.(?P<fn>[0-7])$"
)


class PciAddress(NamedTuple):
    domain: int
    bus: int
    device: int
    function: int

    @classmethod
    def parse(cls, text: str) -> "PciAddress":
        """Parse ``07:00.0``, ``0000:07:00.0`` or ``00000000:07:00.0``. Raises ValueError."""
        m = _ADDR_RE.match(str(text).strip())
        if not m:
            raise ValueError(f"not a PCI address: {text!r} (expected e.g. \"0000:07:00.0\")")
        addr = cls(int(m.group("domain") or "0", 16), int(m.group("bus"), 16),
                   int(m.group("dev"), 16), int(m.group("fn")))
        if addr.device > 0x1F:
            raise ValueError(f"not a PCI address: {text!r} (device number above 1f)")
        return addr

    @property
    def nvml(self) -> str:
        """NVML's form: ``00000000:1A:00.0``."""
        return f"{self.domain:08X}:{self.bus:02X}:{self.device:02X}.{self.function}"

    @property
    def lspci(self) -> str:
        """lspci -D / sysfs form: ``0000:1a:00.0``."""
        return f"{self.domain:04x}:{self.bus:02x}:{self.device:02x}.{self.function}"

    @property
    def short(self) -> str:
        """lspci's form without the domain: ``1a:00.0``."""
        return f"{self.bus:02x}:{self.device:02x}.{self.function}"


def nvml_bus_id(text: str) -> str:
    """Any spelling -> NVML form ``00000000:1A:00.0``. Raises ValueError."""
    return PciAddress.parse(text).nvml


def lspci_bdf(text: str) -> str:
    """Any spelling -> lspci -D / sysfs form ``0000:1a:00.0``. Raises ValueError."""
    return PciAddress.parse(text).lspci
