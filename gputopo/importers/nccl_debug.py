"""`gputopo import nccl-debug LOG...`: which transport NCCL used per GPU pair in a user's own job,
read from its NCCL_DEBUG=INFO output (probe/nccl_log.py), shown as a table, and attached to a run
folder (``--into RUN_DIR``) so that run's report says what NCCL did on each pair: e.g. that DDP
survived a broken PCIe peer path because NCCL used SHM on that pair.

GPUs of the log are matched to the run's GPUs by PCI bus id (from Init lines, or the brackets of
older NCCL), else by NVML index (NCCL's ``nvmlDev``: the same numbering as gputopo's on the same
machine); how each was matched is recorded. The run folder's ``imported.json`` gains its
entry (``tool: "nccl-debug"``, importers/run.py); a second import into the same run is refused. Without a run,
``--topo`` (the machine's `gputopo scan --json` or `nvidia-smi topo -m` text) matches the same
way and names each pair's link class.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from gputopo import SCHEMA_VERSION
from gputopo.errors import InputFileError, UsageError
from gputopo.model import Topology, is_value
from gputopo.model.topology import class_of
from gputopo.model.bus_id import from_nccl, try_bus_key
from gputopo.model.flagged_lines import flagged_line, nccl_warn_text
from gputopo.model.nccl_paths import path_name, path_said, version_tuple
from gputopo.probe.nccl_log import HOST_UNKNOWN, Endpoint, NcclDebugLog, parse_nccl_debug_files, transport_summary
from gputopo.runfolder.layout import NCCL_DEBUG_TOOL

from .contract import Imported, Importer


def read_logs(paths: Sequence) -> NcclDebugLog:
    """Parse the logs; InputFileError for an unreadable file or one without NCCL INFO lines."""
    if not paths:
        raise UsageError("no NCCL log given")
    from gputopo.inputs import is_fifo, user_file_problem

    for p in paths:
        problem = user_file_problem(p, fifo_ok=True)  # a pipe is read (within GPUTOPO_INPUT_WAIT)
        if problem:
            raise InputFileError(p, f"cannot read the NCCL log: {problem}")
        if not is_fifo(p) and Path(p).stat().st_size == 0:
            raise InputFileError(p, "empty file: expected an NCCL_DEBUG=INFO log")
    try:
        log = parse_nccl_debug_files(paths)
    except OSError as e:
        raise InputFileError(getattr(e, "filename", None) or paths[0], e.strerror or str(e)) from None
    if log.lines == 0:
        raise InputFileError(paths[0], "no 'NCCL INFO' or 'NCCL WARN' lines: run the job with NCCL_DEBUG=INFO "
                                       "(and NCCL_DEBUG_SUBSYS=INIT,GRAPH,ENV)")
    return log


def _base_host(host: str) -> str:
    """A log machine label without its ``#k`` (one host name on several machines) and domain."""
    return host.split("#", 1)[0].split(".", 1)[0].lower()


def run_host(topo: Optional[Topology]) -> Optional[str]:
    if topo is None or not is_value(topo.host.hostname):
        return None
    return str(topo.host.hostname)


def log_hosts(log: NcclDebugLog) -> List[str]:
    """The machines the log's lines were printed on (channel ends, warning or failing processes,
    network lines); lines without the ``host:pid:tid`` prefix name none."""
    known = {ep.host for c in log.channels for ep in (c.src, c.dst) if ep.host_known}
    known |= {h for h, _pid in log.processes if h != HOST_UNKNOWN and (log.processes[(h, _pid)]["warnings"]
                                                                      or log.processes[(h, _pid)]["trace"])}
    known |= {h for h in set(log.net_devices) | set(log.networks) | set(log.no_ib_device) if h != HOST_UNKNOWN}
    return sorted(known)


def refuse_other_host(log: NcclDebugLog, paths: Sequence, topo: Optional[Topology], into) -> None:
    """--into a run of another machine: its GPUs would be matched to another machine's bus ids."""
    mine = run_host(topo)
    hosts = log_hosts(log)
    if mine is None or not hosts or any(_base_host(h) == _base_host(mine) for h in hosts):
        return
    where = ", ".join(str(p) for p in paths)
    raise UsageError(f"{where}: the log's host(s) {', '.join(hosts)} are not host {mine} of "
                     f"{'run ' if Path(str(into)).is_dir() else ''}{into}: import the log of a job that "
                     "ran on that machine")


def _match(ep: Endpoint, topo: Optional[Topology]) -> Dict[str, Any]:
    """The run GPU an endpoint is, and how it was told (bus id / NVML index), or why not."""
    if topo is None:
        return {"gpu": None, "matched_by": "no run given"}
    mine = run_host(topo)
    if not ep.host_known and ep.host != HOST_UNKNOWN:  # a peer whose host the log does not show
        return {"gpu": None, "matched_by": "on a host this log does not show"}
    if mine is not None and ep.host_known and _base_host(ep.host) != _base_host(mine):
        return {"gpu": None, "matched_by": f"host {ep.host} is not the run's host {mine}"}
    if mine is not None and "#" in ep.host:
        return {"gpu": None, "matched_by": f"host name {mine} is on several machines in the log"}
    if ep.bus_id and any(is_value(g.pci_bus_id) for g in topo.gpus):  # (`nvidia-smi topo -m` text has none)
        for g in topo.gpus:
            if is_value(g.pci_bus_id) and try_bus_key(g.pci_bus_id) == try_bus_key(ep.bus_id):
                return {"gpu": g.nvml_index, "matched_by": "bus id"}
        return {"gpu": None, "matched_by": f"bus id {ep.bus_id} is none of the run's GPUs"}
    if ep.nvml_dev is None:
        return {"gpu": None, "matched_by": "the log names no bus id or NVML index for this GPU"}
    if ep.nvml_dev in topo.indices:
        return {"gpu": ep.nvml_dev, "matched_by": "NVML index (log without bus ids)"}
    return {"gpu": None, "matched_by": f"NVML index {ep.nvml_dev} is none of the run's GPUs"}


def pair_records(log: NcclDebugLog, topo: Optional[Topology] = None) -> List[Dict[str, Any]]:
    """One record per pair of GPUs the log connects: endpoints, transport summary, run GPUs."""
    out = []
    for (a, b), lines in log.pairs().items():
        rec = {"endpoints": [a.label(), b.label()], **transport_summary(lines, "imported")}
        ma, mb = _match(a, topo), _match(b, topo)
        if ma["gpu"] is not None and mb["gpu"] is not None and ma["gpu"] != mb["gpu"]:
            rec["gpus"] = sorted([ma["gpu"], mb["gpu"]])
            lc = _link_class(topo, rec["gpus"])
            if lc:
                rec["link_class"] = lc
        rec["matched_by"] = sorted({ma["matched_by"], mb["matched_by"]})
        out.append(rec)
    return out


def _link_class(topo: Optional[Topology], gpus: List[int]) -> Optional[str]:
    """The pair's link class in the topology the GPUs were matched to (None where it has none)."""
    lc = class_of(topo, gpus) if topo is not None else None
    return str(lc) if lc is not None else None


def net_connections(log: NcclDebugLog, topo: Optional[Topology] = None) -> List[Dict[str, Any]]:
    """What each rank's NET lines say of its own side: the network, the NIC (``NET/IB/<n>``'s n,
    named from that host's ``NET/IB : Using`` list), GPUDirect RDMA (``/GDRDMA``) and the proxy rank
    (PXN), one record per (host, rank, GPU, NIC, GDR) with its line count; ``gpu_index`` is the GPU of
    ``topo`` the rank's GPU is (matched as pairs are), where one is given."""
    out: Dict[tuple, Dict[str, Any]] = {}
    for c in log.channels:
        net = c.net
        if net is None:
            continue
        ep = c.printer
        devices = log.net_devices.get(ep.host.split("#", 1)[0], {}).get(net["net"]) or []
        name = next((d["device"] for d in devices if d["index"] == net["dev"]), None)
        key = (ep.host, c.printer_rank, ep.label(), net["net"], net["dev"], net["gdr"], net["proxy_rank"])
        rec = out.get(key)
        if rec is None:
            rec = out[key] = {"host": ep.host, "rank": c.printer_rank, "gpu": ep.label(), "bus_id": ep.bus_id,
                              "nvml_dev": ep.nvml_dev, "net": net["net"], "dev": net["dev"], "device": name,
                              "gdr": net["gdr"], "proxy_rank": net["proxy_rank"], "lines": 0}
            if topo is not None:
                rec["gpu_index"] = _match(ep, topo)["gpu"]
        rec["lines"] += 1
        peer = c.src if c.direction == "receive" else c.dst
        peer_host = peer.host.split("#", 1)[0] if peer.host_known else None
        hosts = rec.setdefault("peer_hosts", [])
        if peer_host is not None and peer_host not in hosts:
            hosts.append(peer_host)
        if peer_host is None:
            rec["peers_host_unknown"] = rec.get("peers_host_unknown", 0) + 1
    return sorted(out.values(), key=lambda r: (r["host"], r["rank"] if r["rank"] is not None else -1, r["dev"]))


def _gdr_gpu_said(token: str, rec: Dict[str, Any], version) -> Dict[str, Any]:
    """What a per-GPU line's ``GPU <token>`` is in the NCCL version that printed it
    (model/nccl_paths.py): a CUDA device (2.3), ``cudaDev[nvmlDev]`` (2.4), a PCI bus id (2.5 to
    2.23, 2.29), a rank (2.24 to 2.28); as printed where the version is not known."""
    if rec["form"] == "2.29":
        addr = from_nccl(token)
        return {"bus_id": addr.lspci if addr else None, "rank": rec.get("rank"), "label": f"rank {rec.get('rank')}"
                + (f" ({addr.lspci})" if addr else "")}
    if version is None and not re.search(r"[a-fA-F]", token):
        return {"label": f"GPU {token}"}  # a bus id or a rank: the log states no single NCCL version
    if version is None:  # hex letters: a bus id (NCCL 2.5 to 2.23), whatever the version
        addr = from_nccl(token)
        return {"bus_id": addr.lspci if addr else None, "label": addr.lspci if addr else f"GPU {token}"}
    if "[" in token:
        cuda, nvml = token.rstrip("]").split("[")
        return {"cuda_dev": int(cuda), "nvml_dev": int(nvml), "label": f"CUDA device {cuda} (NVML {nvml})"}
    if version < (2, 4, 0):
        return {"cuda_dev": int(token), "label": f"CUDA device {token}"}
    if version >= (2, 24, 0):
        return {"rank": int(token), "label": f"rank {token}"}
    addr = from_nccl(token)
    return {"bus_id": addr.lspci if addr else None, "label": addr.lspci if addr else f"GPU {token}"}


def gdr_gpu_records(log: NcclDebugLog) -> List[Dict[str, Any]]:
    """NCCL's per-GPU GPUDirect RDMA lines, each GPU, HCA and path said in the words of the NCCL
    version the log states (model/nccl_paths.py), else as printed."""
    versions = [v for v in log.versions if version_tuple(v)]
    one = {version_tuple(v) for v in versions}
    version = next(iter(one)) if len(one) == 1 else None
    out = []
    for rec in log.gdr_gpus.values():
        r = dict(rec)
        r.update(_gdr_gpu_said(rec["gpu"], rec, version))
        hca = rec["hca"]
        if rec["form"] == "2.29" or (version is not None and (2, 4, 0) <= version < (2, 21, 0) and hca.isdigit()):
            r["hca_index"] = int(hca)
        elif version is not None and version >= (2, 21, 0) and re.fullmatch(r"[0-9a-fA-F]+", hca):
            r["hca_index"] = int(hca, 16) & ((1 << 56) - 1)  # NCCL_TOPO_ID(systemId, dev): the dev
        if r.get("hca_index") is not None:
            names = {d["index"]: d["device"] for ds in (log.net_devices.get(rec["host"]) or {}).values() for d in ds}
            r["hca_name"] = r.get("hca_name") or names.get(r["hca_index"])
        if rec["distance"] is not None:
            r["path"] = path_name(versions, rec["distance"]) if rec["form"] != "2.29" or versions else None
            r["path_said"] = path_said(versions, rec["distance"])
            r["level_path"] = path_name(versions, rec["level"]) if rec["level"] is not None and rec["level"] >= 0 else None
            r["level_said"] = path_said(versions, rec["level"]) if rec["level"] is not None and rec["level"] >= 0 \
                else str(rec["level"])
        out.append(r)
    return sorted(out, key=lambda r: (r["host"], r["gdr"], str(r["gpu"]), str(r["hca"])))


def network_facts(log: NcclDebugLog, topo: Optional[Topology] = None) -> Dict[str, Any]:
    """The job's network as its log tells it, per host: the NICs NCCL listed, "No device found" for
    IB, the network each communicator used ("Using network IB"), external plugins loaded, NCCL's
    "GPU Direct RDMA Enabled|Disabled for HCA" lines, and each rank's NET connections."""
    hosts = sorted(set(log.net_devices) | set(log.no_ib_device) | set(log.networks) | set(log.plugins_loaded)
                   | set(log.no_ibverbs) | {h for h, _n, _i in log.gdr_hcas} | set(log.efa)
                   | {r["host"] for r in log.gdr_gpus.values()})
    return {"hosts": {h: {"devices": log.net_devices.get(h, {}), "no_ib_device": h in log.no_ib_device,
                          "no_ibverbs": h in log.no_ibverbs,
                          "networks_used": log.networks.get(h, []), "plugins_loaded": log.plugins_loaded.get(h, []),
                          **({"efa": log.efa[h]} if h in log.efa else {})}
                      for h in hosts},
            "gdr_gpus": gdr_gpu_records(log),
            "gdr_hcas": sorted(log.gdr_hcas.values(), key=lambda r: (r["host"], r["net"], r["index"])),
            "connections": net_connections(log, topo)}


def process_facts(log: NcclDebugLog) -> List[Dict[str, Any]]:
    """Processes that warned or returned an error (NCCL WARN lines, ``file.cc:N -> code``), with
    the ranks their Init lines named and whether they logged ``Init COMPLETE``."""
    return [dict(p, ranks=sorted(p["ranks"])) for _k, p in sorted(log.processes.items(), key=lambda kv: (kv[0][0], kv[0][1]))
            if p["warnings"] or p["trace"]]


def flagged_lines(log: NcclDebugLog) -> List[Dict[str, Any]]:
    """Every ``NCCL WARN`` line of the log, in log order, with its host, the ranks of its process
    and its CUDA device (the ``[N]`` of the prefix), and the SHARP library's warning and error
    lines: the report says each one no rule explains."""
    out = []
    for (host, pid), proc in log.processes.items():
        for w in proc["warnings"]:
            out.append(flagged_line(nccl_warn_text(w.get("source"), w.get("message")), tool="NCCL", where=w.get("where") or None,
                                    host=None if host == HOST_UNKNOWN else host, ranks=proc.get("ranks"),
                                    gpu=w.get("cuda_dev"), pid=pid if pid >= 0 else None))
    for rec in log.library_lines:  # the SHARP library's own lines, printed into the job's log
        ranks = next((p.get("ranks") for (h, pid), p in log.processes.items()
                      if h == rec["host"] and pid == rec["pid"]), None)
        out.append(flagged_line(rec["text"], tool=rec["tool"], where=rec["where"] or None, host=rec["host"],
                                ranks=ranks, pid=rec["pid"]))

    def order(rec: Dict[str, Any]):
        file, _, line = str(rec.get("where") or "").rpartition(":")
        return (file, int(line) if line.isdigit() else 0)
    return sorted(out, key=order)


def communicators(log: NcclDebugLog) -> List[Dict[str, Any]]:
    """Each communicator the Init lines name (by commId, NCCL >= 2.13 or so): its size and the
    ranks and hosts the log shows initialising it."""
    out = []
    for comm, members in log.comm_ranks.items():
        if not comm.startswith("0x"):
            continue  # an old NCCL's Init line names no commId: "nranks N" is no communicator
        out.append({"comm_id": comm, "nranks": log._comm_sizes.get(comm), "ranks": sorted(members),
                    "hosts": sorted({m.host for m in members.values() if m.host != HOST_UNKNOWN}),
                    "pids": sorted({(m.host, m.pid) for m in members.values()})})
    return sorted(out, key=lambda c: c["comm_id"])


def debug_document(log: NcclDebugLog, paths: Sequence, topo: Optional[Topology]) -> Dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "files": [str(p) for p in paths], "nccl_versions": log.versions,
            "settings": log.settings, "info_lines": log.lines, "channel_lines": len(log.channels),
            "no_prefix_lines": log.no_prefix_lines, "ray_folded_lines": log.ray_folded,
            **({"ray_nodes": {ip or "(driver's node)": hs for ip, hs in log.ray_nodes.items()},
                "ray_peer_hosts": log.ray_peer_hosts} if log.ray_nodes else {}),
            "hosts": log_hosts(log), "problems": list(log.problems), "pairs": pair_records(log, topo),
            "network": network_facts(log, topo), "processes": process_facts(log),
            "error_lines": list(log.error_lines), "error_line_count": log.error_line_count,
            "flagged_lines": flagged_lines(log),
            "communicators": [{k: v for k, v in c.items() if k != "pids"} | {"pids": [list(p) for p in c["pids"]]}
                              for c in communicators(log)]}


def parse_nccl_debug_import(paths: Sequence, topology: Optional[Topology] = None, *,
                     topology_file: Optional[str] = None, into=None) -> Imported:
    """Parse the logs; with ``topology`` (--topo, or the topology of the run folder ``into`` that
    run_import attaches the document to) match the pairs to its GPUs and link classes. Writes
    nothing. UsageError / InputFileError on bad input, and where no pair of the log is a pair of
    the topology's GPUs (another machine)."""
    log = read_logs(paths)
    if topology is None:
        doc = debug_document(log, paths, None)
    else:
        where = into if into is not None else (topology_file or "--topo")
        refuse_other_host(log, paths, topology, where)
        doc = debug_document(log, paths, topology)
        if doc["pairs"] and not any("gpus" in r for r in doc["pairs"]):
            raise UsageError(f"none of the {len(doc['pairs'])} GPU pair(s) in the log is a pair of GPUs of "
                             f"{where} (matched by bus id, else NVML index): is it the same machine?")
    return Imported(topology=topology, measurements=[], imports=[{"tool": NCCL_DEBUG_TOOL, **doc}],
                    not_read=list(doc.get("problems") or []), source="nccl-debug", fabric="none",
                    options={"imported_from": [str(p) for p in paths]}, parsed=log)


IMPORTER = Importer(
    name="nccl-debug", parse=parse_nccl_debug_import, stdin=False, makes_folder=False, metavar="LOG",
    into_help=("A run folder of this machine: attach NCCL's transport per pair to it and re-render "
               "its report (the pair table's 'NCCL via' column and the DP-vs-DDP story)."),
    json_help="Print the pairs as JSON.",
    help="""Read NCCL_DEBUG=INFO output of your own job (one file per rank or the whole job log,
    e.g. from NCCL_DEBUG_FILE=nccl.%h.%p.log) and say which transport NCCL used per GPU pair:
    P2P (IPC, CUMEM, direct pointer), SHM (host memory) or NET (IB, Socket).

    \b
    Examples:
      NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,ENV torchrun ... 2> job.log
      gputopo import nccl-debug job.log
      gputopo import nccl-debug job.log --into reports/gpu-node-07-20260101-120000
      gputopo import nccl-debug job.log --topo topo.txt    # pairs named by GPU and link class

    --topo (without --into) matches the log's GPUs to the machine's, by bus id (a `gputopo scan
    --json` topology has them), else by NVML index.
    """,
)


def document_json(doc: Dict[str, Any]) -> str:
    return json.dumps(doc, indent=2)
