"""`gputopo import kernel-log FILE`: a saved kernel log (dmesg, dmesg -T, journalctl, syslog) as
a run folder whose GPUs carry the Xid events the log holds for them, so `report`, `check`,
`diff` and `place` judge them as they judge a scan's (report/health_checks.py makes the findings).

The log names GPUs only by PCI bus id: each bus id it names becomes one GPU of the folder,
numbered in bus order (NVML's own order on one machine, but a GPU the log never names is not
counted, so the numbers are the log's, said in the GPU's name); with ``--topo`` (a `gputopo scan
--json` of the machine) the events go onto that topology's GPUs instead (kernel_log_topo.py). Lines that name an Xid but
cannot be read, and '...' lines where a paste left lines out, are kept per line in the folder's ``imported.json`` entry (``tool: "kernel-log"``)
and reported as ``incomplete-data``. NVIDIA driver lines that are no Xid (RmInitAdapter failed, an
NVSwitch SXid, nvidia-peermem failing to load, ...) are kept there too (``driver_lines``) and judged
by report/kernel_log_findings.py; the driver lines no rule judges are counted (``other_nvidia_lines``)
and said, never dropped.
A file with no kernel-log line at all (another tool's output), an empty or a binary file is
refused with one line (exit 2).
"""

from __future__ import annotations

from typing import Any

from gputopo.errors import InputFileError, UsageError
from gputopo.model import Gpu, HostInfo, NotAvailable, Topology
from gputopo.model.bus_id import PciAddress, device_text
from gputopo.model.health import KERNEL_LOG_NUMBERED, GpuHealth
from gputopo.probe import xid_lines
from gputopo.probe.xid_lines import KernelLogRead, finish_read, read_line
from gputopo.runfolder.layout import KERNEL_LOG_TOOL
from gputopo.text_input import display_name, text_lines

from .contract import Imported, Importer, Option, one_file


def read_kernel_log_file(path: str, host: str | None = None, several_hosts_ok: bool = False) -> KernelLogRead:
    """Stream ``path`` (``-``: stdin) through the Xid reader; InputFileError when it is no kernel log,
    UsageError when it holds several hosts' lines and ``host`` does not pick one (their GPUs share
    bus ids: one machine's Xids would be put on another's GPU)."""
    read = KernelLogRead(only_host=host)
    with text_lines(path, "a kernel log (dmesg, journalctl -k, syslog)") as lines:
        for lineno, line in enumerate(lines, start=1):
            read_line(read, line, lineno)
    finish_read(read)
    name = display_name(path)
    if read.lines == 0:
        raise InputFileError(name, "empty file: expected a kernel log (dmesg, journalctl -k, syslog)")
    if host is not None and host not in read.hosts:
        raise UsageError(f"{name}: no line of host {host!r} (hosts in the log: {', '.join(read.hosts) or 'none named'})")
    if read.kernel_lines == 0:
        raise InputFileError(name, f"no kernel log line in its {read.lines} line(s) (no dmesg time stamp, "
                                   "no 'kernel:' and no 'NVRM:'): not a kernel log; save one with "
                                   "`dmesg -T > kern.log` or `journalctl -k > kern.log`")
    if host is None and len(read.hosts) > 1 and not several_hosts_ok:
        shown = ", ".join(read.hosts[:6]) + (f" and {len(read.hosts) - 6} more" if len(read.hosts) > 6 else "")
        raise UsageError(f"{name}: lines of {len(read.hosts)} hosts ({shown}): their GPUs would share bus ids; "
                         "pick one with --host NAME")
    return read


def topology_from_read(read: KernelLogRead, source: str) -> Topology:
    """One GPU per bus id the log names, in bus order, with its Xid events as its health."""
    gpus = []
    for k, key in enumerate(read.buses):
        bus = device_text(key)
        health = GpuHealth(**{name: NotAvailable("not in a kernel log") for name in GpuHealth.__dataclass_fields__})
        health.xid_events = list(read.events.get(key, []))
        gpus.append(Gpu(nvml_index=k, name=f"GPU at {bus} (numbered by the kernel log's bus ids)",
                        uuid=read.uuids.get(key, NotAvailable("not in the kernel log")),
                        pci_bus_id=PciAddress(*key, 0).nvml, health=health))
    hosts = [read.only_host] if read.only_host else read.hosts
    hostname = hosts[0] if hosts else "kernel-log"
    host = HostInfo(hostname=hostname if hosts else NotAvailable("the log names no host"))
    if read.driver_versions:  # the one loaded last is the one the later lines come from
        host.driver_version = read.driver_versions[-1]
    host.kernel_log = f"saved kernel log {source} ({', '.join(read.forms) or 'NVRM lines'})"
    return Topology(gpus=gpus, pairs=[], host=host, source=KERNEL_LOG_NUMBERED, simulated=False, machine=hostname)


def parse_kernel_log(paths, topology: Topology | None = None, *, host: str | None = None,
                     topology_file: str | None = None) -> Imported:
    """Read the log into what the run folder gets (importers/contract.py; InputFileError /
    UsageError on bad input). With ``topology`` (--topo) the Xid events go onto its GPUs,
    matched by bus id (kernel_log_topo.py)."""
    path = one_file(paths)
    read = read_kernel_log_file(path, host)
    if topology is not None:
        from .kernel_log_topo import topology_with_log

        topo = topology_with_log(read, topology, topology_file or "--topo", display_name(path),
                                 display_name(path))
    else:
        topo = topology_from_read(read, display_name(path))
    options: dict[str, Any] = {"imported_from": [display_name(path)]}
    if topology_file:
        options["topology_file"] = topology_file
    document = xid_lines.kernel_log_document(read, display_name(path))
    return Imported(topology=topo, measurements=[], imports=[{"tool": KERNEL_LOG_TOOL, **document}],
                    not_read=list(read.problems), source="kernel-log", fabric="none", options=options, parsed=read)


IMPORTER = Importer(
    name="kernel-log", parse=parse_kernel_log, many=False, metavar="LOG",
    help="""Read a saved kernel log (dmesg, dmesg -T, journalctl -k, syslog; - for stdin) into a run
    folder whose GPUs carry the Xid events the log names per PCI bus id, judged like a scan's.

    \b
    Examples:
      sudo dmesg -T > kern.log && gputopo import kernel-log kern.log
      journalctl -k -b -1 | gputopo import kernel-log -
      gputopo import kernel-log kern.log --topo scan.json   # onto the machine's own GPU numbers

    The log names GPUs by PCI bus id only, so --topo must have every GPU's bus id (`gputopo scan
    --json` output, not `nvidia-smi topo -m` text).
    """,
    options=(Option("--host", "host", "Read only this host's lines of a journal/syslog that holds several hosts.",
                    metavar="NAME"),),
)
