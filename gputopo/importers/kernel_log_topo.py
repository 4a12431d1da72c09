"""`gputopo import kernel-log LOG --topo FILE`: the log's Xid events put on the GPUs of the machine's
own topology, so the folder's GPUs carry their real NVML indices, models and link classes (a
pair's class, `place`, `diff` against a bench run of the same machine) instead of the log's
bus-order numbering.

A kernel log names GPUs only by PCI bus id, so the topology must have every GPU's bus id
(`gputopo scan --json` output; saved `nvidia-smi topo -m` text has none: refused, one line),
and every bus id the log names must be one of its GPUs (else it is another machine: refused).
Only the Xid events come from the log: every other health field says "not in a kernel log", so
nothing the log did not say is judged as if it had.
"""

from __future__ import annotations

import dataclasses

from gputopo.errors import UsageError
from gputopo.model import NotAvailable, Topology, is_value
from gputopo.model.bus_id import device_text, parse_device
from gputopo.model.health import GpuHealth
from gputopo.probe.xid_lines import KernelLogRead


def _host(name: str) -> str:
    return name.split(".", 1)[0].lower()


def topology_with_log(read: KernelLogRead, topo: Topology, topo_file: str, log_name: str,
                      source: str) -> Topology:
    """``topo`` with each GPU's health holding only the log's Xid events for its bus id."""
    by_bus = {}
    for g in topo.gpus:
        addr = parse_device(str(g.pci_bus_id)) if is_value(g.pci_bus_id) else None
        key = addr.device_key if addr is not None else None
        if key is None:
            raise UsageError(f"{topo_file}: GPU {g.nvml_index} has no PCI bus id (saved `nvidia-smi topo -m` "
                             "text names none), and a kernel log names GPUs only by bus id: give "
                             "`gputopo scan --json` output of the machine, or import without --topo")
        by_bus[key] = g
    hostname = str(topo.host.hostname) if is_value(topo.host.hostname) else None
    hosts = [read.only_host] if read.only_host else read.hosts
    if hostname and hosts and not any(_host(h) == _host(hostname) for h in hosts):
        raise UsageError(f"{log_name}: its lines are of host(s) {', '.join(hosts)}, but {topo_file} is host "
                         f"{hostname}: give the topology of the machine the log is from")
    for key in read.buses:
        named = by_bus.get(key)
        if named is None:
            raise UsageError(f"{topo_file}: has no GPU at {device_text(key)}, which {log_name} names: it "
                             "describes another machine; give the topology of the machine the log is from")
        uuid = read.uuids.get(key)
        if uuid and is_value(named.uuid) and str(named.uuid).lower() != uuid.lower():
            raise UsageError(f"{topo_file}: GPU {named.nvml_index} at {device_text(key)} is {named.uuid}, but {log_name} "
                             f"has {uuid} there: it describes another machine")
    gpus = []
    for key, g in by_bus.items():
        health = GpuHealth(**{name: NotAvailable("not in a kernel log") for name in GpuHealth.__dataclass_fields__})
        health.xid_events = list(read.events.get(key, []))
        gpus.append(dataclasses.replace(g, health=health))
    host = dataclasses.replace(topo.host)
    if read.driver_versions:  # the one loaded last is the one the later lines come from
        host.driver_version = read.driver_versions[-1]
    host.kernel_log = f"saved kernel log {source} ({', '.join(read.forms) or 'NVRM lines'})"
    host.kernel_log_facts = None  # a scan's own log (scan --kernel-log): this log's kernel_log.json replaces it
    # Not KERNEL_LOG_NUMBERED: these GPUs carry the machine's own NVML indices.
    return dataclasses.replace(topo, gpus=sorted(gpus, key=lambda g: g.nvml_index), host=host,
                               source=f"kernel-log on {topo.source}")
