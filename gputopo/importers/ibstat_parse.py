"""Saved ``ibstat``, ``ibstatus`` or ``ibv_devinfo`` (``-v`` or not) text into NIC port facts
(gputopo.model.nic.NicPort), one per port, for nodes where that text was saved rather than
scanned (`gputopo import ibstat`, and `import perftest --ibstat` for the port's rate).

``ibstat`` (infiniband-diags) prints, per adapter::

    CA 'mlx5_0'
        CA type: MT4129
        Firmware version: 28.39.1002
        Port 1:
            State: Active
            Physical state: LinkUp
            Rate: 400
            Link layer: Ethernet

``ibv_devinfo`` (rdma-core) prints ``hca_id: mlx5_0``, ``fw_ver``, ``vendor_part_id: 4129`` (the
number ibstat prints as ``MT4129``), ``board_id``, then per ``port: 1`` its ``state:
PORT_ACTIVE (4)``, ``link_layer``, and with ``-v`` ``phys_state: LINK_UP (5)``, ``active_width:
4X (2)`` and ``active_speed: 100.0 Gbps (128)`` (the rate is width x lane speed). Without ``-v``
it has no physical state and no rate: those facts are NotAvailable, said as such.

``ibstatus`` prints ``Infiniband device 'mlx5_0' port 1 status:`` then ``state: 4: ACTIVE``,
``phys state: 5: LinkUp``, ``rate: 200 Gb/sec (4X HDR)`` and ``link_layer``: no adapter model, so
its ports are not compared for rate with peers (the model decides who is a peer).

None of these tools knows the adapter's PCIe link or error counters: those facts are NotAvailable
("not in ibstat text"). Each fact read names its source: the file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gputopo.model.nic import NicPort, phys_state, port_state, rate_gbps
from gputopo.model.values import NotAvailable
from gputopo.text_input import CappedList

_BANNER = re.compile(r"^=+\|\s*([\w.-]+)\s*\|=+$")
_CA = re.compile(r"^CA\s+'([^']+)'\s*$")
_PORT = re.compile(r"^Port\s+(\d+)\s*:\s*$")
_KV = re.compile(r"^([A-Za-z][A-Za-z0-9 _/.-]*?)\s*:\s*(.*?)\s*$")
_HCA_ID = re.compile(r"^hca_id:\s*(\S+)")
_IBSTATUS = re.compile(r"^Infiniband device '([^']+)' port (\d+) status:\s*$")
_DEV_PORT = re.compile(r"^port:\s*(\d+)\s*$")
_WIDTH = re.compile(r"^(\d+)X\b")
#: A command line in the saved text that names the device asked for: ``ibstat mlx5_3 [port]``,
#: ``ibv_devinfo -d mlx5_3`` / ``--ib-dev=mlx5_3``, ``ibstatus mlx5_3`` (after a shell prompt or not).
_ASKED = re.compile(r"^(?:\S*[$#>]\s*)?(?:sudo\s+)?(?:\S*/)?(?:(?P<tool>ibstat|ibstatus)(?:\s+-\S+)*\s+(?P<dev>[A-Za-z]\w*)"
                    r"|ibv_devinfo\b.*?(?:-d\s*|--ib-dev[=\s]+)(?P<dev2>[A-Za-z]\w*))")
_SPEED = re.compile(r"^(\d+(?:\.\d+)?)\s*Gbps")
#: Facts neither ibstat nor ibv_devinfo prints.
_NOT_IN_TEXT = ("pcie_gen_current", "pcie_gen_max", "pcie_width_current", "pcie_width_max", "pci_bus_id", "netdev")


@dataclass
class IbstatRead:
    """What the text held: its ports, which form it was, and what could not be read."""

    source: str
    form: str | None = None  # "ibstat" | "ibv_devinfo"
    ports: list[NicPort] = field(default_factory=list)
    problems: list[str] = field(default_factory=lambda: CappedList(200))
    notes: list[str] = field(default_factory=lambda: CappedList(50))
    adapters: int = 0
    adapter_names: list[str] = field(default_factory=list)
    hostname: str | None = None  # from a "==========| node1 |==========" banner (pdsh/clush style)
    #: Devices a command line in the text asked for by name: (line, device).
    asked: list[tuple[int, str]] = field(default_factory=list)

    def port(self, device: str, number: int = 1) -> NicPort | None:
        return next((p for p in self.ports if p.device == device and p.port == number), None)


def _new_port(device: str, number: int, ca: dict[str, Any], source: str, why: str) -> NicPort:
    p = NicPort(device=device, port=number)
    for key in _NOT_IN_TEXT:
        setattr(p, key, NotAvailable(why))
    for key, v in ca.items():
        setattr(p, key, v)
        p.sources[key] = source
    return p


def _set(p: NicPort, key: str, value: Any, source: str) -> None:
    setattr(p, key, value)
    p.sources[key] = source


def _devinfo_state(text: str) -> Any:
    """``PORT_ACTIVE (4)`` -> "Active" (the number is the IB state)."""
    m = re.search(r"\((\d+)\)", text)
    return port_state(m.group(1) if m else text.replace("PORT_", ""))


def _devinfo_phys(text: str) -> Any:
    m = re.search(r"\((\d+)\)", text)
    return phys_state(m.group(1) if m else text.replace("_", ""))


class _Reader:
    def __init__(self, read: IbstatRead):
        self.read = read
        self.device: str | None = None
        self.ca: dict[str, Any] = {}
        self.port: NicPort | None = None
        self.width: int | None = None
        self.speed: float | None = None

    def _close_port(self) -> None:
        p = self.port
        if p is not None and self.read.form == "ibv_devinfo":
            if self.width is not None and self.speed is not None:
                _set(p, "rate_gbps", round(self.width * self.speed, 3), self.read.source)
            elif not isinstance(p.rate_gbps, float):
                p.rate_gbps = NotAvailable("ibv_devinfo without -v prints no active_width / active_speed")
            if isinstance(p.phys_state, NotAvailable) and "phys_state" not in p.sources:
                p.phys_state = NotAvailable("ibv_devinfo without -v prints no phys_state")
        self.port, self.width, self.speed = None, None, None

    def _new_adapter(self, form: str, device: str) -> None:
        """An adapter's header line (ibstat's ``CA '...'``, ibv_devinfo's ``hca_id:``)."""
        self._close_port()
        self.read.form = self.read.form or form
        self.device, self.ca = device, {}
        self.read.adapters += 1
        self.read.adapter_names.append(device)

    def feed(self, lineno: int, raw: str) -> None:
        s = raw.strip()
        if not s:
            return
        src, rd = self.read.source, self.read
        m = _ASKED.match(s)
        if m:
            rd.asked.append((lineno, m.group("dev") or m.group("dev2")))
            return
        m = _CA.match(s)
        if m:
            self._new_adapter("ibstat", m.group(1))
            return
        m = _IBSTATUS.match(s)
        if m:
            self._close_port()
            rd.form = rd.form or "ibstatus"
            if m.group(1) not in rd.adapter_names:
                rd.adapters += 1
                rd.adapter_names.append(m.group(1))
            self.device, self.ca = m.group(1), {"ca_type": NotAvailable("not in ibstatus text"),
                                                "firmware": NotAvailable("not in ibstatus text")}
            self.port = _new_port(self.device, int(m.group(2)), {}, rd.source, "not in ibstatus text")
            for key in ("ca_type", "firmware", "board_id"):
                setattr(self.port, key, NotAvailable("not in ibstatus text"))
            rd.ports.append(self.port)
            return
        m = _HCA_ID.match(s)
        if m:
            self._new_adapter("ibv_devinfo", m.group(1))
            return
        m = _BANNER.match(s)
        if m:
            if rd.hostname is not None and rd.hostname != m.group(1):
                rd.problems.append(f"line {lineno}: a second host ({m.group(1)}) after {rd.hostname}: its "
                                   "ports are read as the same node's")
            rd.hostname = rd.hostname or m.group(1)
            return
        if self.device is None:
            if s.startswith(("$", "#")) or "ibstat" in s or "ibv_devinfo" in s:
                return
            rd.notes.append(f"line {lineno}: before any adapter, left out: {s[:80]!r}")
            return
        why = f"not in {rd.form or 'ibstat'} text"
        m = _PORT.match(s) if rd.form == "ibstat" else _DEV_PORT.match(s) if rd.form == "ibv_devinfo" else None
        if m:
            self._close_port()
            self.port = _new_port(self.device, int(m.group(1)), self.ca, src, why)
            rd.ports.append(self.port)
            return
        m = _KV.match(s)
        if not m:
            rd.notes.append(f"line {lineno}: not a {rd.form} line, left out: {s[:80]!r}")
            return
        key, val = m.group(1).strip(), m.group(2).strip()
        if rd.form == "ibstat":
            self._ibstat(lineno, key, val)
        elif rd.form == "ibstatus":
            self._ibstatus(key, val)
        else:
            self._devinfo(lineno, key, val)

    def _adapter_fact(self, key: str, value: Any) -> None:
        self.ca[key] = value
        if self.port is not None:  # a fact after the port lines (not printed so, but harmless)
            _set(self.port, key, value, self.read.source)

    def _ibstat(self, lineno: int, key: str, val: str) -> None:
        src, p = self.read.source, self.port
        if self.port is None:
            if key == "CA type":
                self._adapter_fact("ca_type", val)
            elif key == "Firmware version":
                self._adapter_fact("firmware", val)
            return
        assert p is not None
        if key == "State":
            _set(p, "state", port_state(val), src)
        elif key == "Physical state":
            _set(p, "phys_state", phys_state(val), src)
        elif key == "Rate":
            _set(p, "rate_gbps", rate_gbps(val), src)
        elif key == "Link layer":
            _set(p, "link_layer", _link_layer(val), src)

    def _ibstatus(self, key: str, val: str) -> None:
        """``ibstatus`` (infiniband-diags' script over sysfs): ``state: 4: ACTIVE``, ``phys state:
        5: LinkUp``, ``rate: 200 Gb/sec (4X HDR)``, ``link_layer: InfiniBand``."""
        src, p = self.read.source, self.port
        if p is None:
            return
        if key == "state":
            _set(p, "state", port_state(val), src)
        elif key == "phys state":
            _set(p, "phys_state", phys_state(val), src)
        elif key == "rate":
            _set(p, "rate_gbps", rate_gbps(val), src)
        elif key == "link_layer":
            _set(p, "link_layer", _link_layer(val), src)

    def _devinfo(self, lineno: int, key: str, val: str) -> None:
        src, p = self.read.source, self.port
        if p is None:
            if key == "vendor_part_id" and val.isdigit():
                self._adapter_fact("ca_type", f"MT{val}")
            elif key == "fw_ver":
                self._adapter_fact("firmware", val)
            elif key == "board_id":
                self._adapter_fact("board_id", val)
            return
        if key == "state":
            _set(p, "state", _devinfo_state(val), src)
        elif key == "phys_state":
            _set(p, "phys_state", _devinfo_phys(val), src)
        elif key == "link_layer":
            _set(p, "link_layer", _link_layer(val), src)
        elif key == "active_width":
            w = _WIDTH.match(val)
            self.width = int(w.group(1)) if w else None
        elif key == "active_speed":
            sp = _SPEED.match(val)
            self.speed = float(sp.group(1)) if sp else None
            if sp is None:
                self.read.problems.append(f"line {lineno}: active_speed {val!r} not read: the port's rate is "
                                          "not known")

    def finish(self) -> None:
        self._close_port()


def _link_layer(val: str) -> Any:
    v = val.strip().lower()
    if v == "infiniband":
        return "InfiniBand"
    if v == "ethernet":
        return "Ethernet"
    return NotAvailable(f"unrecognised link layer {val!r}")


def parse_ibstat_lines(lines: Iterable[tuple[int, str]], source: str) -> IbstatRead:
    read = IbstatRead(source=source)
    r = _Reader(read)
    for lineno, line in lines:
        r.feed(lineno, line)
    r.finish()
    for lineno, device in read.asked:
        if device not in read.adapter_names and read.adapter_names:
            read.problems.append(f"line {lineno}: the command asked for {device}, but the text prints "
                                 f"{', '.join(dict.fromkeys(read.adapter_names))}: {device}'s ports are not in this "
                                 "text (another command's output, or the device has another name here)")
    with_ports = {p.device for p in read.ports}
    for name in read.adapter_names:
        if name not in with_ports:
            read.problems.append(f"{name}: no port lines (the text may be cut here): its ports are not known")
    for p in read.ports:
        missing = [what for key, what in (("state", "state"), ("phys_state", "physical state"), ("rate_gbps", "rate"))
                   if key not in p.sources and not (read.form == "ibv_devinfo" and key != "state")]
        if missing:
            read.problems.append(f"{p.name}: no {', no '.join(missing)} line (the text may be cut)")
    return read
