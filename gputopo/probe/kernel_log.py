"""Xid events from the kernel log: what the NVIDIA driver said went wrong with a GPU.

The driver logs ``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.`` (bus id
without the function; older drivers leave out ``PCI:``). The log is read with ``dmesg``, else
``journalctl -k -b`` (readable by members of adm/systemd-journal where dmesg is restricted by
``kernel.dmesg_restrict``). Both run through the host reader's ``run`` with its 2 s timeout, so a
scan never hangs on them; when neither can be read the answer is NotAvailable naming both reasons.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Tuple, Union

from gputopo.model.health import XidEvent
from gputopo.model.values import NotAvailable
from gputopo.probe.host import Runner, _call, default_run

#: The commands tried, in order.
KERNEL_LOG_COMMANDS: Tuple[Tuple[str, ...], ...] = (
    ("dmesg",),
    ("journalctl", "-k", "-b", "--no-pager", "-q", "-o", "short"),
)

_XID_RE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.[0-7])?\):"
    r"\s*(?P<xid>\d+)\s*,?\s*(?P<text>.*)$")
_STAMP_RE = re.compile(r"^\s*(\[\s*[\d.]+\]|[A-Z][a-z]{2}\s+\d+\s+[\d:]+|\d{4}-\d\d-\d\dT[\d:.+-]+)")

BusKey = Tuple[int, int, int]  # (domain, bus, device): what an Xid line names


def xid_bus_key(bus_id: str) -> Optional[BusKey]:
    """(domain, bus, device) of "0000:3b:00", "00000000:3B:00.0" or "0000:3b:00.0"; None otherwise."""
    parts = re.split(r"[:.]", str(bus_id).strip())
    if len(parts) not in (3, 4):
        return None
    try:
        return int(parts[0], 16), int(parts[1], 16), int(parts[2], 16)
    except ValueError:
        return None


def parse_xid_lines(text: str) -> Dict[BusKey, List[XidEvent]]:
    """Every Xid line of a kernel log text, by the GPU bus it names, in log order."""
    out: Dict[BusKey, List[XidEvent]] = {}
    for line in text.splitlines():
        if "Xid" not in line:
            continue
        m = _XID_RE.search(line)
        if not m:
            continue
        key = xid_bus_key(m.group("bus"))
        if key is None:
            continue
        stamp = _STAMP_RE.match(line)
        out.setdefault(key, []).append(XidEvent(
            xid=int(m.group("xid")), text=m.group("text").strip(),
            timestamp=stamp.group(1).strip() if stamp else ""))
    return out


def read_kernel_log(run: Runner = default_run) -> Tuple[Union[str, NotAvailable], str]:
    """(log text or NotAvailable(why), the command that gave it). Never raises."""
    why = []
    for argv in KERNEL_LOG_COMMANDS:
        rc, out, err = _call(run, list(argv))
        if rc == 0 and out.strip():
            return out, " ".join(argv)
        reason = (err or "").strip().splitlines()[-1:] or [f"exit status {rc}, no output"]
        why.append(f"{argv[0]}: {reason[0]}")
    return NotAvailable("kernel log not readable (" + "; ".join(why) + ")"), ""


def read_xid_events(gpu_bus_ids: Sequence[str], run: Runner = default_run):
    """Xid events per GPU bus id given (NVML form), or NotAvailable(why) for the whole machine.

    Returns ``(events, source, unmatched)``: ``events`` maps each bus id to its list (empty when
    the log holds none for it), ``source`` the command read, ``unmatched`` the Xid lines naming a
    bus that is none of these GPUs (a GPU the driver no longer lists, e.g. after Xid 79).
    """
    text, source = read_kernel_log(run)
    if isinstance(text, NotAvailable):
        return text, source, {}
    by_bus = parse_xid_lines(text)
    events = {}
    for bus_id in gpu_bus_ids:
        key = xid_bus_key(bus_id)
        events[bus_id] = by_bus.pop(key, []) if key is not None else []
    unmatched = {f"{d:04x}:{b:02x}:{dev:02x}": evs for (d, b, dev), evs in by_bus.items()}
    return events, source, unmatched
