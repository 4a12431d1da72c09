"""`gputopo import perftest FILE`: an ``ib_write_bw`` / ``ib_read_bw`` / ``ib_send_bw`` output
(perftest_parse.py), or its ``--out_json`` report (perftest_json.py; told apart by content: a file
whose first non-blank line starts with ``{``), as a run folder, judged by
report/perftest_findings.py.

perftest measures one NIC port against a peer, not a GPU pair: ``measurements.jsonl`` stays empty
and what was read goes to ``imported.json`` (``tool: "perftest"``): the header, every result row
with its unit as printed and as Gb/s, the failures, and the port it ran on with that port's rate
where it is known. perftest does not print the rate; it comes from ``--ibstat`` (saved
``ibstat`` / ``ibv_devinfo`` text of the node) or ``--topo`` (a `gputopo scan --json` of the node
with its NIC ports), matched by the device perftest names (``Device : mlx5_0``) and the port it
used: perftest prints no port, so it is the one its error names (``Port number 2 state is
Down``) or the command line's ``-i`` where the paste shows the command (none there: perftest's
default, 1); otherwise port 1 is assumed, and where the device has several ports the finding says
"port not printed: assumed 1". Without --ibstat / --topo, the figure is stated and not judged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gputopo.errors import InputFileError
from gputopo.model import HostInfo, NotAvailable, Topology, is_value
from gputopo.model.nic import NicPort
from gputopo.text_input import TextSource, display_name, open_lines

from .contract import Imported, Importer, Option
from .perftest_json import looks_like_perftest_json, parse_perftest_json
from .perftest_parse import PerftestOutput, parse_perftest_runs

#: The most of an --out_json report read (perftest writes about 1 KiB).
MAX_JSON_BYTES = 1 << 20


def read_perftest(path: str) -> list[PerftestOutput]:
    """Every perftest run the file holds (one per test: a loop over devices pasted together is
    several); InputFileError when there is none."""
    src = TextSource(path)
    lines = open_lines(path, src)
    buffered: list[tuple[int, str]] = []
    first = None
    for lineno, line in lines:
        buffered.append((lineno, line))
        if line.strip():
            first = line
            break
    if first is not None and looks_like_perftest_json(first):
        parts, size = [ln for _, ln in buffered], 0
        for _, line in lines:
            size += len(line)
            if size > MAX_JSON_BYTES:
                raise InputFileError(src.name, f"JSON over {MAX_JSON_BYTES >> 20} MiB: not perftest's --out_json "
                                               "report (about 1 KiB)")
            parts.append(line)
        out = parse_perftest_json("\n".join(parts), src.name)
        if out.latency_test:
            raise InputFileError(src.name, f"a perftest latency test's --out_json report ({out.title}): only the "
                                           "bandwidth tests (ib_write_bw, ib_read_bw, ib_send_bw) are imported")
        src.tell(out)
        return [out]
    runs = parse_perftest_runs(_chain(buffered, lines), src.name)
    out = runs[0]
    if len(runs) == 1 and not out.rows and not out.failures and out.title is None:
        raise InputFileError(src.name, "not perftest output: no 'BW Test' title, no '#bytes #iterations BW peak' "
                                       "result table and no perftest error line (ib_write_bw, ib_read_bw, "
                                       "ib_send_bw print them)")
    runs = [r for r in runs if not (r.latency_test and not r.rows and not r.failures)]
    if not runs:
        raise InputFileError(src.name, f"a perftest latency test ({out.title}): only the bandwidth tests "
                                       "(ib_write_bw, ib_read_bw, ib_send_bw) are imported")
    src.tell(runs[-1])  # bytes left unread are the end of the file: the last run's
    return runs


def _chain(first, rest):
    yield from first
    yield from rest


def ports_of_topology(topo: Topology | None) -> list[NicPort]:
    """The NIC ports a `gputopo scan --json` topology holds (none in `nvidia-smi topo -m` text)."""
    if topo is None:
        return []
    return [p for nic in topo.nics for p in (getattr(nic, "ports", None) or []) if isinstance(p, NicPort)]


def port_facts(out: PerftestOutput, ports: list[NicPort], where: str | None) -> dict[str, Any]:
    """The port perftest ran on, with its rate and state, or why its rate is not known."""
    device = out.device
    if where is None:
        return {"rate_gbps": None, "why": "port rate unknown: perftest does not print it; give --ibstat (saved "
                                          "`ibstat` of the node) or --topo (`gputopo scan --json` of the node)"}
    if not device:
        return {"rate_gbps": None, "why": f"port rate unknown: the output names no device ('Device : mlx5_0' "
                                          f"is in perftest's header), so no port of {where} can be matched"}
    number, port_from, assumed = out.port_used()
    same = [p for p in ports if p.device == device]
    if not same:
        known = ", ".join(sorted({p.device for p in ports})[:12]) or "none"
        return {"device": device, "rate_gbps": None,
                "why": f"port rate unknown: {where} has no port of {device} (its devices: {known})"}
    port = next((p for p in same if p.port == number), None)
    if port is None:
        have = ", ".join(str(p.port) for p in same)
        return {"device": device, "port": number, "port_from": port_from, "port_assumed": assumed,
                "rate_gbps": None, "why": f"port rate unknown: {where} has no port {number} of {device} "
                                          f"(its ports: {have}; perftest's port: {port_from})"}
    if assumed and len(same) == 1:  # an assumed port 1 is certain when the device has no other
        assumed, port_from = False, f"port not printed; {device} has one port ({port.port}) in {where}"
    facts: dict[str, Any] = {"device": device, "port": port.port, "name": port.name, "source": where,
                             "port_from": port_from, "port_assumed": assumed,
                             **{k: (getattr(port, k) if is_value(getattr(port, k)) else None)
                                for k in ("state", "phys_state", "link_layer", "ca_type")}}
    rate = port.rate_gbps
    if is_value(rate) and isinstance(rate, (int, float)):
        facts["rate_gbps"] = float(rate)
    else:
        facts["rate_gbps"] = None
        facts["why"] = f"port rate unknown: {where} has no rate for {port.name}" + (
            f" ({rate.reason})" if isinstance(rate, NotAvailable) else "")
    return facts


def gpu_path(out: PerftestOutput, topo: Topology | None) -> dict[str, Any] | None:
    """With --use_cuda and a topology: the class between the GPU perftest picked and its NIC, the
    GPU found by the PCIe address perftest lists for it (``CUDA device 0: PCIe address is 17:00``)
    against the topology's bus ids (CUDA's numbering is not NVML's, so never by index)."""
    if not out.use_cuda or topo is None:
        return None
    nic = next((n for n in topo.nics if is_value(n.device) and str(n.device) == out.device), None)
    if nic is None:
        return {"why": f"the topology has no NIC {out.device or '(device not printed)'}"}
    addr = out.cuda_devices.get(out.gpu_index) if out.gpu_index is not None else None
    if addr is None:
        return {"nic": nic.label, "why": "perftest printed no PCIe address for the GPU it picked ('CUDA device N: "
                                         "PCIe address is BB:DD'), so its GPU in the topology is not known"}
    gpu = next((g for g in topo.gpus if is_value(g.pci_bus_id)
                and str(g.pci_bus_id).lower().split(":", 1)[-1].startswith(addr)), None)
    if gpu is None:
        return {"nic": nic.label, "pci": addr, "why": f"no GPU at {addr} in the topology (its bus ids: "
                                                     f"{'yes' if any(is_value(g.pci_bus_id) for g in topo.gpus) else 'none'})"}
    cls = nic.gpu_classes.get(gpu.nvml_index)
    return {"cuda_device": out.gpu_index, "pci": addr, "gpu": gpu.nvml_index, "nic": nic.label,
            "device": out.device, "link_class": str(cls) if cls is not None else None}


def perftest_document(out: PerftestOutput, ports: list[NicPort], where: str | None,
                      topo: Topology | None = None) -> dict[str, Any]:
    doc = {**out.summary(), "port": port_facts(out, ports, where)}
    path = gpu_path(out, topo)
    if path is not None:
        doc["gpu_path"] = path
    return doc


def _empty_topology(out: PerftestOutput) -> Topology:
    host = HostInfo(hostname=out.hostname or NotAvailable("not printed by perftest"))
    return Topology(gpus=[], pairs=[], host=host, source="perftest", simulated=False,
                    machine=out.hostname or "perftest")


def parse_perftest(paths: list[str], topology: Topology | None = None, *, topology_file: str | None = None,
                   ibstat_file: str | None = None) -> Imported:
    """Read each output and find its port's rate (--ibstat, else --topo): what the run folder gets."""
    from .user_inputs import refuse_duplicates

    refuse_duplicates([Path(p) for p in paths if p != "-"], "the perftest output")
    outputs = [run for p in paths for run in read_perftest(p)]
    ports: list[NicPort] = []
    where: str | None = None
    if ibstat_file:  # the saved text of the node's ports wins over a topology's
        from .ibstat_import import read_ibstat

        ports, where = read_ibstat(ibstat_file).ports, f"ibstat text {Path(display_name(ibstat_file)).name}"
    elif topology is not None:
        ports, where = ports_of_topology(topology), f"topology {Path(display_name(topology_file or '--topo')).name}"
    docs = [perftest_document(o, ports, where, topology) for o in outputs]
    if where is not None and not ports and topology is not None and not ibstat_file:
        for d in docs:
            d["port"] = {"rate_gbps": None, "device": d.get("device"),
                         "why": f"port rate unknown: {where} holds no NIC port (`nvidia-smi topo -m` text has "
                                "none; a `gputopo scan --json` of the node has them)"}
    topo = topology or _empty_topology(outputs[0])
    options: dict[str, Any] = {"imported_from": list(paths), "topology_file": topology_file,
                               "ibstat_file": ibstat_file}
    return Imported(topology=topo, measurements=[], imports=docs,
                    not_read=[p for d in docs for p in d.get("problems") or []], source="perftest", fabric="none",
                    options=options, parsed=outputs)


IMPORTER = Importer(
    name="perftest", parse=parse_perftest,
    help="""Read linux-rdma/perftest bandwidth output (ib_write_bw, ib_read_bw, ib_send_bw; with or
    without --use_cuda; `-` reads stdin), or its --out_json file, into a run folder. BW in MB/sec
    (before perftest 24.07), MiB/sec (since; both 2^20 bytes/s) or Gb/sec (--report_gbits) is kept
    as printed and as Gb/s. The largest message size's average is judged against the rate of the
    port it ran on (perftest's error or the command line's -i; else port 1, said as assumed) from
    --ibstat or --topo; without either it is stated, not judged. A failed run (memory
    registration, completion errors, the peer not reached, the port down) is a finding saying what
    it usually means.

    \b
    Examples:
      ib_write_bw -d mlx5_0 -s 1M --report_gbits peer > bw.txt 2>&1
      ibstat > ibstat.txt; gputopo import perftest bw.txt --ibstat ibstat.txt
      ib_write_bw -d mlx5_0 --out_json --out_json_file=bw.json peer; gputopo import perftest bw.json
    """,
    options=(Option("--ibstat", "ibstat_file", "Saved `ibstat` (or `ibv_devinfo -v`) text of the node: the rate of the "
                    "port perftest ran on, which its output does not print, so the bandwidth can be judged.",
                    kind="file"),),
    topo_help="`gputopo scan --json` of the node, with its NIC ports: the port's rate (as --ibstat).",
)
