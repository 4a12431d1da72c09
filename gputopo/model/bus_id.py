"""PCI bus ids: every source's spelling decoded into one canonical key, and the forms shown.

Each tool names a GPU's PCI address (domain, bus, device, function) in its own way; each
spelling has its decoder here, and nothing else in gputopo takes a bus id apart:

================================================  ==========================  ==================
source                                            spelling                    decoder
================================================  ==========================  ==================
NVML, nvidia-smi (``pci.bus_id``, ``-q``)         ``00000000:B4:00.0``        PciAddress.parse
sysfs, ``lspci -D``                               ``0000:b4:00.0``            PciAddress.parse
``lspci`` without -D, old tools (domain 0)        ``b4:00.0``                 PciAddress.parse
NCCL busId (Init lines, ``0[1b000]``, MNNVL)      ``1b000``, ``0x1b000``      from_nccl
nccl-tests rank lines                             ``0000:b4:00`` / ``0x1b``   from_nccl_tests
nvbandwidth device lines (v0.5+)                  ``00000000:99:00``          from_nvbandwidth
nvbandwidth / p2pBandwidthLatencyTest device      ``00000000:99:00`` / ``99`` from_matrix_output
(as their parsers record it)
p2pBandwidthLatencyTest ``Device:`` lines         ``pciBusID: 99`` (+ ids)    from_p2pbw
kernel log NVRM lines (Xid, fallen off the bus)   ``PCI:0000:01:00``          from_xid
``torch.cuda.get_device_properties(d)``           three ints                  from_torch
================================================  ==========================  ==================

The canonical key is a :class:`PciAddress` (equal however it was spelled); its text form is
``.lspci`` (``0000:b4:00.0``, what sysfs names the device; :func:`bus_key`). NVML's form is
``.nvml``; ``.short`` (``b4:00.0``) and ``.device_text`` (``0000:b4:00``) are for display.

Sources that print no function name a PCI *device*: their decoders give function 0, because a
GPU is function 0 of its device (its audio and USB controllers are functions 1 to 3), the way
torch itself names a device's sysfs entry. A source that prints only a bus number (older
nccl-tests' ``0x1b``, a bare ``pciBusID``) gives a :class:`BusOnly`: domain, device and function
are unknown, and ``.assumed`` is the address such output has always been read as.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple, Optional, Tuple, Union

#: domain:bus:device.function as sysfs and lspci -D name a directory or device (4 to 8 domain
#: digits, 2 bus and 2 device digits): for telling a PCI address among other path components.
BDF_RE = re.compile(r"^([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")

#: An address with its function, the domain optional (``b4:00.0`` is domain 0).
_ADDRESS_RE = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):(?P<dev>[0-9a-fA-F]{1,2})\.(?P<fn>[0-7])$")
#: A device as tools without the function print it: domain:bus:device, a function allowed.
_DEVICE_RE = re.compile(
    r"^(?P<domain>[0-9a-fA-F]{1,8}):(?P<bus>[0-9a-fA-F]{1,2}):(?P<dev>[0-9a-fA-F]{1,2})(?:\.(?P<fn>[0-7]))?$")
_HEX_RE = re.compile(r"^(?:0[xX])?([0-9a-fA-F]+)$")

#: (domain, bus, device): what a source that prints no function names.
DeviceKey = Tuple[int, int, int]


class PciAddress(NamedTuple):
    """A PCI address: the canonical key of a GPU (or NIC, bridge) however a source spelled it.
    Ordered as PCI enumerates: domain, bus, device, function."""

    domain: int
    bus: int
    device: int
    function: int

    @classmethod
    def parse(cls, text: str) -> "PciAddress":
        """NVML's / nvidia-smi's ``00000000:07:00.0``, sysfs's / lspci -D's ``0000:07:00.0`` or
        old tools' ``07:00.0`` (domain 0), in either case. Raises ValueError."""
        m = _ADDRESS_RE.match(str(text).strip())
        if not m:
            raise ValueError(f"not a PCI address: {text!r} (expected e.g. \"0000:07:00.0\")")
        return _checked(cls(int(m.group("domain") or "0", 16), int(m.group("bus"), 16),
                            int(m.group("dev"), 16), int(m.group("fn"))), text)

    @property
    def nvml(self) -> str:
        """NVML's and nvidia-smi's form: ``00000000:1A:00.0``."""
        return f"{self.domain:08X}:{self.bus:02X}:{self.device:02X}.{self.function}"

    @property
    def lspci(self) -> str:
        """The canonical text: lspci -D's and sysfs's form, ``0000:1a:00.0``."""
        return f"{self.domain:04x}:{self.bus:02x}:{self.device:02x}.{self.function}"

    @property
    def short(self) -> str:
        """lspci's form without the domain: ``1a:00.0`` (for addresses of one host)."""
        return f"{self.bus:02x}:{self.device:02x}.{self.function}"

    @property
    def nvml_device(self) -> str:
        """NVML's form without the function, as nvbandwidth and p2pBandwidthLatencyTest's
        import name a device: ``00000000:1A:00``."""
        return f"{self.domain:08X}:{self.bus:02X}:{self.device:02X}"

    @property
    def device_key(self) -> DeviceKey:
        """(domain, bus, device): what compares with a source that prints no function."""
        return self.domain, self.bus, self.device

    @property
    def device_text(self) -> str:
        """The device as the kernel log names it: ``0000:1a:00``."""
        return device_text(self.device_key)


class BusOnly(NamedTuple):
    """A source printed only the bus number (older nccl-tests' ``0x1b``, a bare ``pciBusID``)."""

    bus: int

    @property
    def unknown(self) -> str:
        """What such a source does not say."""
        return "domain, device and function (only the bus number is printed)"

    @property
    def assumed(self) -> PciAddress:
        """The address this output has always been read as: domain 0, device 0, function 0 (on
        one-domain machines with one GPU per bus, as behind PCIe switch ports, it is)."""
        return PciAddress(0, self.bus, 0, 0)


#: What a tool's printed bus id decodes to.
Decoded = Union[PciAddress, BusOnly]


def as_address(decoded: Decoded) -> PciAddress:
    """The address, or for a bus alone the address it is assumed to be (:attr:`BusOnly.assumed`)."""
    return decoded.assumed if isinstance(decoded, BusOnly) else decoded


def device_text(key: DeviceKey) -> str:
    """(domain, bus, device) -> ``0000:3b:00``, as the kernel log prints it."""
    return f"{key[0]:04x}:{key[1]:02x}:{key[2]:02x}"


def _checked(addr: PciAddress, text: object) -> PciAddress:
    if addr.device > 0x1F:
        raise ValueError(f"not a PCI address: {text!r} (device number above 1f)")
    return addr


def parse_device(text: object) -> Optional[PciAddress]:
    """A device address, the domain required and the function optional (0 when not printed):
    ``0000:3b:00``, ``00000000:3B:00.0``; None for anything else (a NotAvailable too). For
    matching an address against a source that names devices (:attr:`PciAddress.device_key`)."""
    if not isinstance(text, str):
        return None
    m = _DEVICE_RE.match(text.strip())
    if not m:
        return None
    addr = PciAddress(int(m.group("domain"), 16), int(m.group("bus"), 16), int(m.group("dev"), 16),
                      int(m.group("fn") or "0"))
    return addr if addr.device <= 0x1F else None


def try_parse(bus_id: object) -> Optional[PciAddress]:
    """:meth:`PciAddress.parse`, or None when ``bus_id`` is not an address (e.g. a NotAvailable)."""
    if not isinstance(bus_id, str):
        return None
    try:
        return PciAddress.parse(bus_id)
    except ValueError:
        return None


def from_nccl(token: str) -> Optional[PciAddress]:
    """NCCL's packed busId, ``1b000`` or ``0x1b000`` (the hex digits of ``0000:1b:00.0`` run
    together: domain<<20 | bus<<12 | device<<4 | function), as NCCL_DEBUG=INFO prints it in
    ``Init`` lines (``busId 1b000``), channel lines (``0[1b000]``) and MNNVL lines
    (``busId 0x1b000``). None for a short decimal without ``0x`` (NCCL's own device number, as
    in ``0[0]``: under 4 digits) and for text that is not hex."""
    text = str(token).strip()
    m = _HEX_RE.match(text)
    if not m or (len(text) < 4 and not text.lower().startswith("0x")):
        return None
    v = int(m.group(1), 16)
    return PciAddress(v >> 20, (v >> 12) & 0xFF, (v >> 4) & 0xFF, v & 0xF)


def from_nccl_tests(printed: str) -> Optional[Decoded]:
    """A nccl-tests rank line's bus id: ``0000:b4:00`` (domain:bus:device, nccl-tests 2.x) or
    ``0x1b`` (older releases: the bus only, a :class:`BusOnly`). None for anything else."""
    text = str(printed).strip()
    addr = parse_device(text)
    if addr is not None:
        return addr
    m = re.fullmatch(r"0[xX]([0-9a-fA-F]{1,2})", text)
    return BusOnly(int(m.group(1), 16)) if m else None


def from_nvbandwidth(printed: str) -> Optional[PciAddress]:
    """nvbandwidth's device bus id (v0.5+), ``00000000:99:00``; also the same with a function."""
    return parse_device(str(printed))


def from_p2pbw(bus: str, device: Optional[str] = None, domain: Optional[str] = None) -> Optional[Decoded]:
    """p2pBandwidthLatencyTest's ``pciBusID: 99, pciDeviceID: 0, pciDomainID:0`` (bare hex,
    each as printed); a bus given alone is a :class:`BusOnly`. None when a part is not hex."""
    parts = [bus] + [p for p in (device, domain) if p is not None]
    if not all(re.fullmatch(r"[0-9a-fA-F]{1,8}", str(p).strip()) for p in parts):
        return None
    b = int(str(bus).strip(), 16)
    if b > 0xFF:
        return None
    if device is None or domain is None:
        return BusOnly(b)
    addr = PciAddress(int(domain.strip(), 16), b, int(device.strip(), 16), 0)
    return addr if addr.device <= 0x1F else None


def from_matrix_output(printed: Optional[str]) -> Optional[Decoded]:
    """A device's bus id as the nvbandwidth and p2pBandwidthLatencyTest parsers record it:
    nvbandwidth's ``00000000:99:00`` (a topology's ``00000000:99:00.0`` too), or
    p2pBandwidthLatencyTest's bare hex bus ``99`` (a :class:`BusOnly`); None for other text."""
    if not printed:
        return None
    return from_nvbandwidth(printed) or from_p2pbw(printed.strip())


def matrix_nvml_id(printed: Optional[str]) -> Optional[str]:
    """A matrix tool's printed bus id (:func:`from_matrix_output`) in NVML's form,
    ``00000000:99:00.0`` (a bus alone as device 0 of domain 0, :attr:`BusOnly.assumed`); other
    text as printed, stripped; None for none."""
    decoded = from_matrix_output(printed)
    if decoded is None:
        return printed.strip() if printed else None
    return as_address(decoded).nvml


def matrix_device_id(printed: Optional[str]) -> Optional[str]:
    """The device a matrix tool's printed bus id (or a topology's) names, ``00000000:99:00``
    (function left out; a bus alone as :attr:`BusOnly.assumed`); None for other text."""
    decoded = from_matrix_output(printed)
    return as_address(decoded).nvml_device if decoded is not None else None


def from_xid(text: str) -> Optional[PciAddress]:
    """A kernel log's GPU: ``PCI:0000:01:00`` (NVRM's Xid lines), ``0000:b3:00.0`` (its "fallen
    off the bus" lines), ``00000000:3B:00.0``. Function 0 when none is printed."""
    s = str(text).strip()
    return parse_device(s[4:] if s[:4].upper() == "PCI:" else s)


def from_torch(props: Any) -> Optional[PciAddress]:
    """``torch.cuda.get_device_properties(d)``'s ``pci_domain_id``, ``pci_bus_id`` and
    ``pci_device_id`` (ints; domain 0 where a build lacks it), function 0; None when the
    properties have no bus or device number."""
    domain, bus, device = (getattr(props, "pci_domain_id", 0), getattr(props, "pci_bus_id", None),
                           getattr(props, "pci_device_id", None))
    if not (isinstance(domain, int) and isinstance(bus, int) and isinstance(device, int)):
        return None
    if min(domain, bus, device) < 0:
        return None
    return PciAddress(domain, bus, device, 0)


def bus_key(bus_id: str) -> str:
    """The canonical text of an address (NVML's, sysfs's or lspci's spelling):
    ``"00000000:07:00.0"`` -> ``"0000:07:00.0"``; compare addresses only through this.
    Raises ValueError for text that is not an address."""
    return PciAddress.parse(bus_id).lspci


def try_bus_key(bus_id: object) -> Optional[str]:
    """:func:`bus_key`, or None when ``bus_id`` is not an address (e.g. a NotAvailable)."""
    addr = try_parse(bus_id)
    return addr.lspci if addr is not None else None


def short_bus_id(bus_id: object) -> str:
    """'00000000:07:00.0' / '0000:07:00.0' / '07:00.0' -> '07:00.0', for comparing addresses of
    one host (the domain dropped); other text with two colons loses its first field, any other
    text is only case-folded."""
    addr = try_parse(bus_id)
    if addr is not None:
        return addr.short
    s = str(bus_id).lower()
    return s.split(":", 1)[1] if s.count(":") == 2 else s


def table_bus_id(bus_id: str) -> str:
    """A bus id for a table column: an address in lspci's form (``00000000:1A:00.0`` ->
    ``0000:1a:00.0``, shorter); other text (``n/a``) as it is."""
    addr = try_parse(bus_id)
    return addr.lspci if addr is not None else bus_id
