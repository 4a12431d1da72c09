"""Xid events from the kernel log: what the NVIDIA driver said went wrong with a GPU.

The driver logs ``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.`` (bus id
without the function; older drivers leave out ``PCI:``). The log is read with ``dmesg``, else
``journalctl -k -b`` (readable by members of adm/systemd-journal where dmesg is restricted by
``kernel.dmesg_restrict``). Both run through the host reader's ``run`` with its 2 s timeout, so a
scan never hangs on them; when neither can be read the answer is NotAvailable naming both reasons.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

from gputopo.model.bus_id import device_text, parse_device
from gputopo.model.values import NotAvailable
from gputopo.probe.host import Runner, call_runner, default_run
from gputopo.probe.xid_lines import KernelLogRead, read_kernel_log_lines

__all__ = ["KERNEL_LOG_COMMANDS", "SAVED_LOG", "read_kernel_log", "read_xid_events"]

#: The commands tried, in order.
KERNEL_LOG_COMMANDS: Tuple[Tuple[str, ...], ...] = (
    ("dmesg",),
    ("journalctl", "-k", "-b", "--no-pager", "-q", "-o", "short"),
)
#: How a saved log's source begins (``scan --kernel-log FILE``: "saved kernel log FILE").
SAVED_LOG = "saved kernel log "


def read_kernel_log(run: Runner = default_run) -> Tuple[Union[str, NotAvailable], str]:
    """(log text or NotAvailable(why), the command that gave it). Never raises."""
    why = []
    for argv in KERNEL_LOG_COMMANDS:
        rc, out, err = call_runner(run, list(argv))
        if rc == 0 and out.strip():
            return out, " ".join(argv)
        reason = (err or "").strip().splitlines()[-1:] or [f"exit status {rc}, no output"]
        why.append(f"{argv[0]}: {reason[0]}")
    return NotAvailable("kernel log not readable (" + "; ".join(why) + ")"), ""


def read_xid_events(gpu_bus_ids: Sequence[str], run: Runner = default_run,
                    saved: Optional[Tuple[KernelLogRead, str]] = None):
    """Xid events per GPU bus id given (NVML form), or NotAvailable(why) for the whole machine.

    ``saved``: (what xid_lines read from a kernel log saved earlier, where from) (``scan
    --kernel-log FILE``), read instead of the live one. Either log goes through the one reader,
    xid_lines.py, that `import kernel-log` uses.

    Returns ``(events, source, unmatched, read)``: ``events`` maps each bus id to its list (empty
    when the log holds none for it), ``source`` the command read, ``unmatched`` the Xid lines naming
    a bus that is none of these GPUs (a GPU the driver no longer lists, e.g. after Xid 79), ``read``
    everything the reader took from the log (driver lines, lines it could not read) or None.
    """
    if saved is not None:
        read, source = saved
    else:
        text, source = read_kernel_log(run)
        if isinstance(text, NotAvailable):
            return text, source, {}, None
        read = read_kernel_log_lines(text.splitlines())
    by_bus = dict(read.events)
    events = {}
    for bus_id in gpu_bus_ids:
        addr = parse_device(bus_id)
        key = addr.device_key if addr is not None else None
        events[bus_id] = by_bus.pop(key, []) if key is not None else []
    unmatched = {device_text(key): evs for key, evs in by_bus.items()}
    return events, source, unmatched, read
