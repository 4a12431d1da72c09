"""`gputopo import ibstat FILE`: saved ``ibstat`` / ``ibv_devinfo`` text (ibstat_parse.py) as a
run folder whose topology holds the node's NIC ports, judged like a scan's NIC ports.

The text names no GPU, so the folder's topology has none: one NIC per adapter (``label`` and
``device`` its name, ``mlx5_0``), each with its ports' facts (gputopo.model.nic.NicPort). What
the text held and what could not be read goes to ``imported.json`` (``tool:
"ibstat"``). An empty file, a binary one, or text with no ``CA '...'`` / ``hca_id:`` line is
refused with one line (exit 2).

The findings are the scan's own (report/network_checks.py, through the report's topology
checks): a port not Active (``nic-port-down``: ``Disabled`` info, may be deliberate; ``Polling``
warning, a cable or peer problem), an Active port below the rate of its peers of the same
adapter model and link layer (``nic-rate``). An adapter whose port lines are missing (a cut
paste) is ``incomplete-data``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gputopo.errors import InputFileError
from gputopo.model import HostInfo, Nic, NotAvailable, Topology
from gputopo.text_input import TextSource, display_name, open_lines

from .contract import Imported, Importer, one_file
from .ibstat_parse import IbstatRead, parse_ibstat_lines


def read_ibstat(path: str) -> IbstatRead:
    src = TextSource(path)
    read = parse_ibstat_lines(open_lines(path, src), src.name)
    if read.form is None:
        raise InputFileError(src.name, "not ibstat or ibv_devinfo output: no \"CA 'mlx5_0'\" (ibstat), "
                                       "'hca_id: mlx5_0' (ibv_devinfo) or \"Infiniband device 'mlx5_0' port 1 "
                                       "status:\" (ibstatus) line")
    if not read.ports:
        raise InputFileError(src.name, f"{read.form} text with {read.adapters} adapter(s) and no port: no "
                                       "'Port 1:' (ibstat) or 'port: 1' (ibv_devinfo) line")
    src.tell(read)
    return read


def ibstat_document(read: IbstatRead, path: str) -> dict[str, Any]:
    return {"tool": "ibstat", "form": read.form, "file": Path(display_name(path)).name, "path": read.source,
            "adapters": read.adapters, "ports": [p.to_json() for p in read.ports], "failures": [],
            "problems": list(read.problems), "notes": list(read.notes)}


def topology_of(read: IbstatRead, hostname: str | None = None) -> Topology:
    """No GPU; one NIC per adapter carrying its ports (Nic.ports)."""
    hostname = hostname or read.hostname
    nics: dict[str, Any] = {}
    for p in read.ports:
        nic = nics.get(p.device)
        if nic is None:
            nic = nics[p.device] = Nic(label=p.device, device=p.device,
                                       pci_bus_id=NotAvailable(f"not in {read.form} text"),
                                       numa_node=NotAvailable(f"not in {read.form} text"))
        nic.ports.append(p)
    host = HostInfo(hostname=hostname or NotAvailable(f"not printed by {read.form}"))
    return Topology(gpus=[], pairs=[], host=host, source=read.form or "ibstat", simulated=False,
                    machine=hostname or "ibstat", nics=list(nics.values()))


def parse_ibstat(paths, topology: Topology | None = None) -> Imported:
    """Read the text into a run folder's topology holding the node's NIC ports (no GPU)."""
    path = one_file(paths)
    read = read_ibstat(path)
    return Imported(topology=topology_of(read), measurements=[], imports=[ibstat_document(read, path)],
                    not_read=list(read.problems), source=read.form or "ibstat", fabric="none",
                    options={"imported_from": [display_name(path)]}, parsed=read)


IMPORTER = Importer(
    name="ibstat", parse=parse_ibstat, many=False, topo=False,
    help="""Read saved `ibstat` or `ibv_devinfo` (-v for the rate) text of a node (`-` reads stdin)
    into a run folder holding its RDMA NIC ports, judged as `gputopo scan` judges them: a port
    not Active (Disabled: may be deliberate; Polling: cable or peer), an Active port below the
    rate of its peers of the same adapter model and link layer (nic-port-down, nic-rate).

    \b
    Examples:
      ibstat > ibstat.txt; gputopo import ibstat ibstat.txt
      ssh node7 ibv_devinfo -v | gputopo import ibstat -
    """,
)
