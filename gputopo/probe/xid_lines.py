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
from typing import Any

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
#: NVIDIA driver lines that are no Xid but say something report/kernel_log_findings.py judges:
#: (kind, pattern). ``bus`` (a GPU's or an NVSwitch's), ``module``, ``symbol``, ``sxid``, ``n`` are
#: kept when the pattern has them.
_DRIVER_LINES = (
    ("rm-init-failed", re.compile(r"NVRM: GPU (?:at )?(?:PCI:)?(?P<bus>" + _BUS + r"):? RmInitAdapter failed")),
    ("probe-failed", re.compile(r"NVRM: The NVIDIA probe routine failed for (?P<n>\d+) device")),
    ("reset-required", re.compile(r"NVRM: .*\bNV_ERR_RESET_REQUIRED\b")),
    ("ecc-uncorrectable", re.compile(r"NVRM: .*(?:\buncorrectable\b.*\bECC\b|\bECC\b.*\buncorrectable\b)",
                                     re.IGNORECASE)),
    ("crash-dump", re.compile(r"NVRM: A GPU crash dump has been created")),
    ("peermem-load-failed", re.compile(r"(?P<module>nvidia_peermem|nvidia-peermem|nv_peer_mem): (?:Unknown symbol|"
                                       r"disagrees about version of symbol) (?P<symbol>\w+)")),
    ("peermem-load-failed", re.compile(r"could not insert '(?P<module>nvidia_peermem|nv_peer_mem)'")),
    ("peermem-invalid-context", re.compile(r"(?P<module>nvidia-peermem|nvidia_peermem) nv_get_p2p_free_callback:\d+ "
                                           r"ERROR detected invalid context")),
    ("nvswitch-sxid-fatal", re.compile(r"(?P<device>nvidia-nvswitch\d*): SXid \((?:PCI:)?(?P<bus>" + _BUS +
                                       r")\): (?P<sxid>\d+), Fatal\b")),
    ("nvswitch-sxid-nonfatal", re.compile(r"(?P<device>nvidia-nvswitch\d*): SXid \((?:PCI:)?(?P<bus>" + _BUS +
                                          r")\): (?P<sxid>\d+), Non-?fatal\b", re.IGNORECASE)),
)
#: Lines that carry on a message read on the line before (a SXid's Severity / Data lines, the crash
#: dump notice's and RmInitAdapter's second lines): read with it, not counted again.
_CARRIES_ON = re.compile(r"nvidia-nvswitch\d*: SXid \(|NVRM: nvidia-bug-report\.sh as root|NVRM: the NVIDIA kernel "
                         r"module is unloaded|NVRM: GPU \S+ rm_init_adapter failed")
#: A line of NVIDIA's kernel modules: read; said (counted) when no rule above judges it.
#: ("nvidia:", "nvidia 0000:3b:00.0: ...", "nvidia-modeset:", "nvidia_uvm:", "nvidia-nvlink:", "nvidia-nvswitch1:").
_NVIDIA_LINE = re.compile(r"NVRM:|\bnvidia[-_]peermem\b|\bnv_peer_mem\b|"
                          r"\bnvidia(?:[-_][a-z]+\d*)?(?::|\s+[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:)")
#: How many of the lines gputopo reads but does not judge are kept as examples (the rest counted).
OTHER_EXAMPLES = 3
#: NVIDIA driver lines every healthy boot prints (the module loading, a GPU's PCI function
#: enabled, the kernel taint a proprietary module sets): counted as routine, not quoted as lines
#: no rule judges (every scan of a healthy machine would otherwise list them).
_ROUTINE = re.compile(
    r"\bnvidia\s+[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]: (?:enabling device|vgaarb: )"
    r"|\bnvidia(?:[-_]\w+)?: (?:loading out-of-tree module taints kernel|module license .* taints kernel"
    r"|module verification failed|module uses symbols .* from proprietary module)"
    r"|nvidia-nvlink: Nvlink Core is being initialized|nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver"
    r"|nvidia-uvm: Loaded the UVM driver|\[nvidia-drm\].*Loading driver|Initialized nvidia-drm")
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
    #: NVIDIA driver lines that are no Xid, by (kind, bus or module): kind, bus, module, count,
    #: first/last line number and stamp, the first line's text (report/kernel_log_findings.py).
    driver_lines: dict[tuple[str, str], dict] = field(default_factory=dict)
    #: NVIDIA driver lines read but judged by no rule: how many, and the first few (line, text).
    other_nvidia_lines: int = 0
    #: NVIDIA driver lines every healthy boot prints (_ROUTINE): counted only.
    routine_nvidia_lines: int = 0
    other_examples: list[tuple[int, str]] = field(default_factory=list)
    #: Read only this host's lines (journal/syslog lines name their host; others are kept).
    only_host: str | None = None
    _pending: tuple[DeviceKey, str, int, str] | None = None  # (bus, stamp, line no, text so far)
    _fallen_only: set[DeviceKey] = field(default_factory=set)
    _last: tuple[int, str, bool] = (0, "", False)  # the last line read (number, text, dated): a paste cut mid-line

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
    read._last = (lineno, text, dated)
    if dated or nvrm:
        read.kernel_lines += 1
    if _driver_line(read, text, stamp, lineno) or not _NVIDIA_LINE.search(text):
        return
    if not nvrm:
        _other(read, text, lineno)
        return
    read.nvrm_lines += 1
    carried = read._pending is not None and _continue_pending(read, text, lineno)
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
            return
    if not carried:
        _other(read, text, lineno)


def _driver_line(read: KernelLogRead, text: str, stamp: str, lineno: int) -> bool:
    """Keep a non-Xid NVIDIA driver line a rule of _DRIVER_LINES names (True), or one that carries
    on such a message (True, not counted again); False for any other line."""
    if "NVRM: Xid" in text:
        return False
    for kind, pattern in _DRIVER_LINES:
        m = pattern.search(text)
        if m is None:
            continue
        got = m.groupdict()
        bus = got.get("bus")
        addr = from_xid(bus) if bus else None
        bus_text = addr.lspci if addr is not None else (bus or "")
        key = (kind, bus_text or got.get("module") or got.get("device") or "")
        entry = read.driver_lines.get(key)
        if entry is None:
            entry = read.driver_lines[key] = {
                "kind": kind, "bus": bus_text or None, "count": 0, "first_line": lineno, "first_timestamp": stamp,
                "text": text[:240]}
            for name in ("module", "device", "n"):
                if got.get(name):
                    entry[name] = got[name]
        entry["count"] += 1
        entry["last_line"], entry["last_timestamp"] = lineno, stamp
        for name, many in (("symbol", "symbols"), ("sxid", "sxids")):
            if got.get(name) and got[name] not in entry.setdefault(many, []) and len(entry[many]) < 20:
                entry[many].append(got[name])
        if "NVRM:" in text:
            read.nvrm_lines += 1
        return True
    if _CARRIES_ON.search(text):
        if "NVRM:" in text:
            read.nvrm_lines += 1
        return True
    return False


def _other(read: KernelLogRead, text: str, lineno: int) -> None:
    """An NVIDIA driver line gputopo reads but does not judge: counted, the first few kept (a
    routine line of a healthy boot only counted)."""
    if _ROUTINE.search(text):
        read.routine_nvidia_lines += 1
        return
    read.other_nvidia_lines += 1
    if len(read.other_examples) < OTHER_EXAMPLES:
        m = _NVIDIA_LINE.search(text)  # from the driver's own words on (a journal line's host and date left out)
        read.other_examples.append((lineno, text[m.start() if m else 0:][:160]))


def _continue_pending(read: KernelLogRead, text: str, lineno: int) -> bool:
    """Add ``text`` to the "The NVIDIA GPU <bus>" sentence being read; True when it is part of it."""
    assert read._pending is not None
    key, stamp, start, so_far = read._pending
    so_far = f"{so_far} {text.split('NVRM:', 1)[-1].strip()}"
    if "fallen off the bus" in so_far:
        read._pending = None
        _fallen(read, device_text(key), stamp, start, so_far)
        return True
    if lineno - start >= _CONTINUATION_LINES:
        read._pending = None
        return False
    read._pending = (key, stamp, start, so_far)
    return True


def _fallen(read: KernelLogRead, bus: str, stamp: str, lineno: int, words: str) -> None:
    key = _device(bus)
    if key is None:
        read.problems.append(f"line {lineno}: 'fallen off the bus' for an unreadable bus id {bus!r}")
        return
    read.add(key, XidEvent(xid=79, text=f"{FALLEN_TEXT}: {words}", timestamp=stamp))
    read._fallen_only.add(key)


def finish_read(read: KernelLogRead) -> KernelLogRead:
    """Count a no-number "fallen off the bus" once when the same bus also has its Xid 79 line."""
    for key in read._fallen_only:
        evs = read.events.get(key, [])
        if any(e.xid == 79 and not e.text.startswith(FALLEN_TEXT) for e in evs):
            read.events[key] = [e for e in evs if not e.text.startswith(FALLEN_TEXT)]
    read._fallen_only = set()
    read._pending = None
    lineno, text, dated = read._last  # a paste cut inside its last line's "NVRM:" ("... kernel: N")
    message = text.rsplit("kernel:", 1)[-1].strip()
    if (dated or "kernel:" in text) and message and len(message) < len("NVRM:") and "NVRM:".startswith(message):
        cut = f"kernel: {message}" if "kernel:" in text else message
        read.problems.append(f"line {lineno}: the log ends mid-line ({cut!r}): what followed is not read")
    return read


def read_kernel_log_lines(lines: Iterable[str], only_host: str | None = None) -> KernelLogRead:
    """Every GPU fault line of a kernel log given line by line (a file object streams)."""
    read = KernelLogRead(only_host=only_host)
    for lineno, raw in enumerate(lines, start=1):
        read_line(read, raw, lineno)
    return finish_read(read)


def kernel_log_document(read: KernelLogRead, file: str) -> dict[str, Any]:
    """What ``read`` holds beyond the Xid events, as facts report/kernel_log_findings.py judges: the
    same document for `import kernel-log` (kernel_log.json) and `scan` (the topology's
    ``host.kernel_log_facts``). ``file``: where the log came from (a file name or the command)."""
    return {"file": file, "forms": read.forms, "hosts": read.hosts, "lines": read.lines,
            "kernel_lines": read.kernel_lines, "nvrm_lines": read.nvrm_lines,
            "xid_events": sum(len(v) for v in read.events.values()),
            "driver_versions": read.driver_versions,
            "gpus": [device_text(k) for k in read.buses], "problems": list(read.problems),
            # NVIDIA driver lines that are no Xid (report/kernel_log_findings.py judges them), and
            # how many were read but are judged by no rule, with the first few.
            "driver_lines": list(read.driver_lines.values()),
            "other_nvidia_lines": {"count": read.other_nvidia_lines,
                                   "examples": [{"line": n, "text": t} for n, t in read.other_examples]},
            "routine_nvidia_lines": read.routine_nvidia_lines}
