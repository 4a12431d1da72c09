"""Read the NVIDIA driver's GPU-fault lines out of kernel log text, in any form users save it.

Forms read (each with or without launcher prefixes / ANSI codes, probe-independent):

- ``dmesg``: ``[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.``
- ``dmesg -T`` / ``--ctime``: ``[Wed Jul 31 23:14:18 2024] NVRM: Xid ...``; ``dmesg --time-format iso``
- journalctl / syslog: ``Feb 14 05:03:41 host kernel: NVRM: Xid ...`` (also ``-o short-iso``,
  ``short-precise``, ``short-monotonic``), and lines pasted from them as ``kernel: NVRM: ...``
- drivers before ~2014 without ``PCI:``: ``NVRM: Xid (0000:01:00): 13, ...``
- ``..., caused by previous Xid 149`` (the earlier Xid that made this one): kept as ``caused_by``
- "fallen off the bus" printed WITHOUT an Xid number: ``NVRM: GPU 0000:01:00.0: GPU has fallen off
  the bus.`` (one line) and, on drivers 570+, three lines ``NVRM: The NVIDIA GPU 0000:b3:00.0`` /
  ``NVRM: (PCI ID: 10de:26b5) installed in this system has`` / ``NVRM: fallen off the bus and is not
  responding to commands.``: read as Xid 79 (the same fault), unless the log also has that
  bus's Xid 79 line (then it is the same event, counted once).
- ``NVRM: GPU at PCI:0000:00:05: GPU-efbd...``: a GPU the driver names (its UUID), Xid or not;
  ``NVRM: loading NVIDIA UNIX ... Kernel Module  570.158.01``: the driver version.

A line that names ``NVRM: Xid`` but cannot be read (cut, garbled), and a line that is only
``...`` / ``…`` / ``[...]`` (lines left out where the log was pasted), is kept as a problem with
its line number, never dropped silently. The reader is fed one line at a time, so a file of any
size is read in bounded memory.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from gputopo.line_prefixes import strip_launcher_prefix
from gputopo.model.bus_id import DeviceKey, device_text, from_xid
from gputopo.model.health import XidEvent
from gputopo.text_input import elision_problem

_BUS = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"
_XID_RE = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<bus>" + _BUS + r")\):\s*(?P<xid>\d+)\s*,?\s*(?P<text>.*)$")
_CAUSED_BY = re.compile(r"caused by previous Xid (\d+)")
_FALLEN_ONE_LINE = re.compile(r"NVRM: GPU (?:at )?(?:PCI:)?(?P<bus>" + _BUS + r"):? (?:GPU )?has fallen off the bus")
_THE_GPU = re.compile(r"NVRM: The NVIDIA GPU (?:at )?(?:PCI:)?(?P<bus>" + _BUS + r")\b")
_GPU_AT = re.compile(r"NVRM: GPU at (?:PCI:)?(?P<bus>" + _BUS + r"):\s*(?P<uuid>GPU-[0-9a-fA-F-]+)")
_DRIVER = re.compile(r"NVRM: loading NVIDIA UNIX .*?Kernel Module(?: for \S+)?\s+(?P<v>\d+\.\d+(?:\.\d+)?)")
_DAYS = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_MONTHS = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
#: The log's own time stamp and, for journal/syslog lines, the host: (stamp, host).
_STAMPS = (
    ("journal", re.compile(r"^(?P<stamp>\[\s*\d+\.\d+\]) (?P<host>\S+) kernel:")),
    ("dmesg", re.compile(r"^(?P<stamp>\[\s*\d+\.\d+\])")),
    ("dmesg -T", re.compile(r"^(?P<stamp>\[" + _DAYS + r" " + _MONTHS + r"\s+\d+ \d\d:\d\d:\d\d \d{4}\])")),
    ("journal", re.compile(r"^(?P<stamp>" + _MONTHS + r"\s+\d+ \d\d:\d\d:\d\d(?:\.\d+)?) (?:(?P<host>\S+) )?kernel:")),
    ("journal", re.compile(r"^(?P<stamp>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d[\d.,:+-]*Z?) (?:(?P<host>\S+) )?kernel:")),
    ("dmesg iso", re.compile(r"^(?P<stamp>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[\d.,:+-]*)\s")),
    ("syslog", re.compile(r"^(?P<stamp>" + _MONTHS + r"\s+\d+ \d\d:\d\d:\d\d)\s")),
    ("kernel:", re.compile(r"^(?P<stamp>)kernel:")),
)
#: After a "The NVIDIA GPU <bus>" line, how many lines may hold the rest of its sentence.
_CONTINUATION_LINES = 4
FALLEN_TEXT = "GPU has fallen off the bus (printed without an Xid number; read as Xid 79)"
#: What a '...' line of a pasted log leaves unknown (text_input.elision_problem).
ELIDED = "the kernel log lines left out there are not read (an Xid among them is not judged)"


def _device(bus: str) -> DeviceKey | None:
    """(domain, bus, device) the driver names ("0000:3b:00", "0000:b3:00.0"); None if unreadable."""
    addr = from_xid(bus)
    return addr.device_key if addr is not None else None


@dataclass
class KernelLogRead:
    """What a kernel log says about the GPUs, per bus, and what could not be read."""

    events: dict[DeviceKey, list[XidEvent]] = field(default_factory=dict)
    uuids: dict[DeviceKey, str] = field(default_factory=dict)  # from "NVRM: GPU at PCI:..." lines
    hosts: list[str] = field(default_factory=list)  # journal/syslog host names, in order seen
    forms: list[str] = field(default_factory=list)  # "dmesg", "dmesg -T", "journal", ...
    lines: int = 0
    kernel_lines: int = 0  # lines with a kernel-log time stamp / "kernel:" or an NVRM message
    nvrm_lines: int = 0
    problems: list[str] = field(default_factory=list)
    driver_versions: list[str] = field(default_factory=list)  # "NVRM: loading NVIDIA UNIX ... 570.158.01"
    #: Read only this host's lines (journal/syslog lines name their host; others are kept).
    only_host: str | None = None
    _pending: tuple[DeviceKey, str, int, str] | None = None  # (bus, stamp, line no, text so far)
    _fallen_only: set[DeviceKey] = field(default_factory=set)

    @property
    def buses(self) -> list[DeviceKey]:
        return sorted(set(self.events) | set(self.uuids))

    def add(self, bus: DeviceKey, event: XidEvent) -> None:
        self.events.setdefault(bus, []).append(event)


def _stamp(line: str, read: KernelLogRead) -> tuple[str, str, bool, str | None]:
    """(time stamp, the text after the stamp/host, whether the line has a kernel-log form, host)."""
    for form, pattern in _STAMPS:
        m = pattern.match(line)
        if m:
            if form not in read.forms:
                read.forms.append(form)
            host = m.groupdict().get("host")
            if host and host not in read.hosts:
                read.hosts.append(host)
            rest = line[m.end():]
            if form != "kernel:" and rest.lstrip().startswith("kernel:"):
                rest = rest.lstrip()[len("kernel:"):]
            return m.group("stamp").strip(), rest.strip(), True, host
    return "", line.strip(), False, None


def read_line(read: KernelLogRead, raw: str, lineno: int) -> None:
    """Feed one line of the log to ``read``."""
    read.lines += 1
    line = strip_launcher_prefix(raw.rstrip("\r\n")).strip()
    line = line.removeprefix("> ")
    elided = elision_problem(line, lineno, ELIDED)
    if elided:  # lines left out where the log was pasted: an Xid among them is not read
        read.problems.append(elided)
        return
    stamp, text, dated, host = _stamp(line, read)
    if read.only_host is not None and host is not None and host != read.only_host:
        return  # another machine's line of a log that holds several (--host picks one)
    nvrm = "NVRM:" in text
    if dated or nvrm:
        read.kernel_lines += 1
    if not nvrm:
        return
    read.nvrm_lines += 1
    if read._pending is not None:
        _continue_pending(read, text, lineno)
    if "NVRM: Xid" in text:  # an event line; other NVRM lines may name an Xid in passing
        m = _XID_RE.search(text)
        key = _device(m.group("bus")) if m else None
        if m is None or key is None:
            read.problems.append(f"line {lineno}: an Xid line that could not be read (cut or garbled): "
                                 f"{text[:120]!r}")
            return
        rest = m.group("text").strip()
        cause = _CAUSED_BY.search(rest)
        read.add(key, XidEvent(xid=int(m.group("xid")), text=rest, timestamp=stamp,
                               caused_by=int(cause.group(1)) if cause else None))
        return
    m = _FALLEN_ONE_LINE.search(text)
    if m:
        _fallen(read, m.group("bus"), stamp, lineno, text[m.start():])
        return
    m = _THE_GPU.search(text)
    if m:
        tail = text[m.end():]
        if "fallen off the bus" in tail:
            _fallen(read, m.group("bus"), stamp, lineno, text[m.start():])
        else:
            key = _device(m.group("bus"))
            if key is not None:
                read._pending = (key, stamp, lineno, text[m.start():])
        return
    m = _DRIVER.search(text)
    if m:
        if m.group("v") not in read.driver_versions:
            read.driver_versions.append(m.group("v"))
        return
    m = _GPU_AT.search(text)
    if m:
        key = _device(m.group("bus"))
        if key is not None:
            read.uuids[key] = m.group("uuid")


def _continue_pending(read: KernelLogRead, text: str, lineno: int) -> None:
    assert read._pending is not None
    key, stamp, start, so_far = read._pending
    so_far = f"{so_far} {text.split('NVRM:', 1)[-1].strip()}"
    if "fallen off the bus" in so_far:
        read._pending = None
        _fallen(read, device_text(key), stamp, start, so_far)
    elif lineno - start >= _CONTINUATION_LINES:
        read._pending = None
    else:
        read._pending = (key, stamp, start, so_far)


def _fallen(read: KernelLogRead, bus: str, stamp: str, lineno: int, words: str) -> None:
    key = _device(bus)
    if key is None:
        read.problems.append(f"line {lineno}: 'fallen off the bus' for an unreadable bus id {bus!r}")
        return
    read.add(key, XidEvent(xid=79, text=f"{FALLEN_TEXT}: {words}", timestamp=stamp))
    read._fallen_only.add(key)


def finish(read: KernelLogRead) -> KernelLogRead:
    """Count a no-number "fallen off the bus" once when the same bus also has its Xid 79 line."""
    for key in read._fallen_only:
        evs = read.events.get(key, [])
        if any(e.xid == 79 and not e.text.startswith(FALLEN_TEXT) for e in evs):
            read.events[key] = [e for e in evs if not e.text.startswith(FALLEN_TEXT)]
    read._fallen_only = set()
    read._pending = None
    return read


def read_kernel_log_lines(lines: Iterable[str], only_host: str | None = None) -> KernelLogRead:
    """Every GPU fault line of a kernel log given line by line (a file object streams)."""
    read = KernelLogRead(only_host=only_host)
    for lineno, raw in enumerate(lines, start=1):
        read_line(read, raw, lineno)
    return finish(read)


def parse_xid_lines(text: str) -> dict[DeviceKey, list[XidEvent]]:
    """Every Xid event of a kernel log text, by the GPU bus it names, in log order."""
    return read_kernel_log_lines(text.splitlines()).events
