"""Findings from an imported NCCL_DEBUG=INFO log (`gputopo import nccl-debug`): what the job really
did on its network, judged from the facts the importer read (importers/nccl_debug.py):

- ``nccl-init-failed`` (error): a process whose NCCL init failed: it warned (``NCCL WARN``) and
  NCCL's error path (``file.cc:line -> code``) reached ``init.cc`` / ``group.cc``, or went on
  with no ``Init COMPLETE`` after it; quoted with the failing call and the ranks.
- ``nccl-comm-failed`` (error): the same, but the error path ran in NCCL's progress thread
  (``proxy.cc:... -> 6 [Progress Thread]``): NCCL failed after init, while moving data (an RDMA
  completion error's status is said in words).
- ``nccl-gdr-off`` (warning): connections over an RDMA network (IB/RoCE, a plugin) without
  GPUDirect RDMA (``NET/IB/0`` and not ``NET/IB/0/GDRDMA``), or HCAs NCCL said ``GPU Direct RDMA
  Disabled for HCA`` on a host that used that network. The cause is said where the log or the
  topology tells it: the HCA cannot register GPU memory (NCCL's own line), or the GPU-NIC path is
  farther than NCCL_NET_GDR_LEVEL (with ``--topo``). Sockets never use GPUDirect RDMA: NCCL's
  ``NET/Socket : GPU Direct RDMA Disabled`` lines are no finding.
- ``nccl-socket-fallback``: traffic over ``NET/Socket`` on a host where NCCL looked for IB and
  found none (``NET/IB : No device found``): a warning where IB was expected (NCCL_IB_* set,
  another host of the job used IB, or the topology has RDMA NICs), else info.
- ``nccl-far-nic`` (warning, with a topology): a rank whose NET connections used a NIC farther
  from its GPU than the node's nearest NIC NCCL listed (PXN proxies excepted).
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional

from gputopo.model import Finding, Topology
from gputopo.model.finding import gpu_ranges
from gputopo.model.flagged_lines import TOOL_LINES, nccl_warn_text, normalized, quoted
from gputopo.model.efa_platforms import SOURCE as EFA_SOURCE
from gputopo.model.efa_platforms import instance_type, offers_gdr
from gputopo.model.ibv_wc_status import completion_error, status_words
from gputopo.model.linkclass import LinkClass
from gputopo.model.nccl_paths import unread_why

#: ncclResult_t codes in words (src/include/nccl.h, ncclGetErrorString).
_RESULTS = {1: "unhandled cuda error", 2: "unhandled system error", 3: "internal error", 4: "invalid argument",
            5: "invalid usage", 6: "remote process exited or there was a network error", 7: "operation in progress"}
#: Why a NET plugin reported no GPU-memory support is not in the log (the plugin decides).
PLUGIN_GDR_UNKNOWN = ("not known from this log: the plugin decides (a NIC or instance type without GPUDirect RDMA, "
                      "or its kernel side missing); the instance type or a scan of the node tells")
#: NCCL_NET_GDR_LEVEL's default: PXB (src/graph/paths.cc ncclTopoCheckGdr, NCCL 2.12 to 2.30).
DEFAULT_GDR_LEVEL = "PXB"
_LEVELS = {"LOC": 0, "PIX": 1, "PXB": 2, "PHB": 4, "SYS": 6, "NODE": 5}  # paths.h PATH_* order, NVML words
_CLASS_LEVEL = {"PIX": 1, "PXB": 2, "PHB": 4, "NODE": 5, "SYS": 6}
#: What a few WARNs mean, and what to do (NCCL's issues; src/misc/nvmlwrap.cc).
_KNOWN_WARNS = [
    (re.compile(r"nvmlDeviceGetHandleByPciBusId\(\) failed"),
     "NCCL asked NVML for a GPU by its PCI bus id and NVML in this process does not see that GPU: typically "
     "ranks on one host that see different GPUs (containers or CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES "
     "per rank), or a GPU that left the bus",
     ["give every rank of a host the same visible GPUs (one container per node, or the same device list)",
      "check that `nvidia-smi` in the job's container lists every GPU the job uses; `dmesg` for Xid 79"]),
    (re.compile(r"peer access is not supported between these two devices"),
     "NCCL chose a peer-to-peer (P2P) connection between two GPUs of one host and CUDA refused it (CUDA error 217, "
     "cudaErrorPeerAccessUnsupported): these GPUs cannot reach each other's memory directly (GeForce cards, "
     "GPUs in a VM, or an IOMMU/ACS setting that blocks peer DMA)",
     ["set NCCL_P2P_DISABLE=1: NCCL then copies through host memory (SHM) between these GPUs",
      "run `gputopo scan` (or p2pBandwidthLatencyTest) to see which GPU pairs have peer access"]),
    # src/misc/ibvwrap.cc: "Call to ibv_create_cq failed with error %s" (strerror(errno)), and the same
    # for ibv_reg_mr (ibv_reg_mr_iova2, ibv_reg_dmabuf_mr) and ibv_create_qp
    (re.compile(r"Call to ibv_(?:create_cq|reg_mr|reg_mr_iova2|reg_dmabuf_mr|create_qp)\w* failed with error "
                r"Cannot allocate memory"),
     "a verbs call that allocates NIC resources failed with ENOMEM: usually the process's locked-memory limit "
     "(`ulimit -l`, RLIMIT_MEMLOCK) is too low for the memory NCCL registers with the NIC (containers and "
     "Slurm often start with 64 KiB), or the NIC's queue pairs or completion queues are exhausted (many ranks "
     "or communicators on one NIC)",
     ["raise the locked-memory limit to unlimited for the job (`ulimit -l unlimited`; docker `--ulimit "
      "memlock=-1:-1`; Slurm PropagateResourceLimits / the slurmd unit's LimitMEMLOCK=infinity)",
      "check `ulimit -l` inside the job's container; with many communicators, fewer NCCL channels "
      "(NCCL_MAX_NCHANNELS) or NCCL_IB_QPS_PER_CONNECTION=1 use fewer queue pairs"]),
    (re.compile(r"Call to ibv_open_device failed"),
     "NCCL found an RDMA device but could not open it: usually a container that lists the device (sysfs) "
     "without its character devices (/dev/infiniband/uverbs*) or without the permission to open them",
     ["give the container the RDMA devices (docker `--device=/dev/infiniband` or `--privileged`; on "
      "Kubernetes an RDMA device plugin resource for the pod)",
      "check `ls -l /dev/infiniband` and `ibv_devinfo` inside the job's container"]),
]


def _rank_text(ranks: List[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + gpu_ranges(ranks) if ranks else "ranks not in the log"


def _failed(proc: Dict[str, Any]) -> bool:
    codes = [t for t in proc.get("trace") or [] if t.get("code")]
    if not codes:
        return False
    reached_init = any(re.match(r"(?:.*/)?(?:init|group)\.cc:", str(t.get("source"))) for t in codes)
    # an error path through NCCL's progress thread is a failure while moving data, after Init COMPLETE
    in_progress = any(t.get("thread") == "Progress Thread" for t in codes)
    return reached_init or in_progress or (bool(proc.get("warnings")) and not proc.get("init_complete"))


def completion_cause(wc: Dict[str, Any]) -> str:
    """An RDMA completion error of NCCL's, in words: its ibv_wc_status and what it usually means."""
    meaning = wc.get("meaning") or "not a status gputopo's table explains; verbs.h names it"
    return (f"the RDMA completion failed with {status_words(int(wc['status']))}: {meaning} (vendor error "
            f"{wc.get('vendor_err')}, the NIC's own code; read in NCCL's {wc.get('form')} form)")


def _during_communication(proc: Dict[str, Any]) -> bool:
    """Whether a failed process failed after init, while moving data: its error path ran in NCCL's
    progress thread (proxy.cc's progress loop), not in init or the proxy's connection service."""
    return (any(t.get("thread") == "Progress Thread" for t in proc.get("trace") or [])
            and not any(re.match(r"(?:.*/)?(?:init|group)\.cc:", str(t.get("source"))) for t in proc.get("trace") or []))


def init_failure_findings(doc: Dict[str, Any]) -> List[Finding]:
    """One ``nccl-init-failed`` per failing call (the first WARN of each failed process), with
    every host and rank that failed on it."""
    groups: Dict[str, Dict[str, Any]] = {}
    for proc in doc.get("processes") or []:
        if not _failed(proc):
            continue
        warn = (proc.get("warnings") or [{}])[0]
        call = str(warn.get("message") or "no NCCL WARN line before it")
        g = groups.setdefault(call, {"procs": [], "source": warn.get("source"), "codes": set(), "path": [],
                                     "comm": True})
        g["comm"] = g["comm"] and _during_communication(proc)
        g["procs"].append(proc)
        for t in proc.get("trace") or []:
            if t.get("code"):
                g["codes"].add(int(t["code"]))
                if t.get("source") not in g["path"]:
                    g["path"].append(t.get("source"))
    out = []
    for call, g in groups.items():
        hosts = sorted({p["host"] for p in g["procs"]})
        ranks = sorted({r for p in g["procs"] for r in p.get("ranks") or []})
        where = ", ".join(f"{h}: {_rank_text(sorted({r for p in g['procs'] if p['host'] == h for r in p.get('ranks') or []}))}"
                          + (f" (pid {', '.join(str(p['pid']) for p in g['procs'] if p['host'] == h and p['pid'] >= 0)})"
                             if not any(p.get("ranks") for p in g["procs"] if p["host"] == h) else "")
                          for h in hosts)
        codes = " / ".join(f"{c} ({_RESULTS.get(c, 'unknown code')})" for c in sorted(g["codes"]))
        cause, remedies = None, ["read the NCCL WARN line above: it names the call that failed",
                                 "rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,ENV,NET for the lines before it"]
        for pattern, why, todo in _KNOWN_WARNS:
            if pattern.search(call):
                cause, remedies = why, todo
        split = _ranks_disagree(doc, g["procs"])
        if split and not g["comm"]:
            cause, remedies = split, [
                "give every rank the same communicator id (one ncclGetUniqueId, broadcast to all ranks of the job) "
                "and have all ranks create their communicators in the same order",
                "check the job's launch: every rank in the same job (the same MASTER_ADDR/MASTER_PORT or store), "
                "the same world size"]
        kind, what = "nccl-init-failed", "NCCL init failed"
        if g["comm"]:
            kind, what = "nccl-comm-failed", "NCCL failed after init, while moving data (its progress thread),"
            remedies = ["read the NCCL WARN line above: it names what failed",
                        "test the network path between the hosts with perftest (ib_write_bw) in both directions, "
                        "and check the NIC ports (ibstat) and the switch's counters"]
            wc = completion_error(call)
            if wc is not None:
                cause = completion_cause(wc)
        src = f" ({g['source']})" if g.get("source") else ""
        # The framework's "NCCL error ...: unhandled system error" is this WARN's failure, said by the caller
        said = [line for line in doc.get("error_lines") or []
                if any(_RESULTS.get(c, "\0") in line.lower() for c in g["codes"])]
        chain = (f"; the `{said[0][:160]}` the framework printed is this failure, and this WARN its cause"
                 if said else "")
        out.append(Finding(
            kind, "error",
            f"{what} on {len(g['procs'])} process(es), {where}: `{call}`{src}, then NCCL returned {codes} "
            f"through {', '.join(g['path'][:4])}{' ...' if len(g['path']) > 4 else ''}{chain}",
            evidence={"call": call, "source": g.get("source"), "hosts": hosts, "ranks": ranks,
                      "codes": sorted(g["codes"]), "error_path": g["path"],
                      "processes": [{"host": p["host"], "pid": p["pid"], "ranks": p.get("ranks") or [],
                                     "init_complete": bool(p.get("init_complete"))} for p in g["procs"]],
                      "framework_lines": (doc.get("error_lines") or [])[:3], "files": doc.get("files"),
                      TOOL_LINES: quoted(nccl_warn_text(w.get("source"), w.get("message"))
                                         for p in g["procs"] for w in p.get("warnings") or [])},
            cause=cause, remedies=remedies))
    return out


def _where_said(procs: List[Dict[str, Any]]) -> str:
    """``gpu34 (rank 0), gpu36 (rank 2)``: each host and the ranks of its processes."""
    hosts = sorted({p["host"] for p in procs})
    return ", ".join(f"{h} ({_rank_text(sorted({r for p in procs if p['host'] == h for r in p.get('ranks') or []}))})"
                     for h in hosts)


def _ranks_disagree(doc: Dict[str, Any], procs: List[Dict[str, Any]]) -> Optional[str]:
    """Where the failed processes initialised communicators of one size under different commIds,
    none of which the log shows whole: the job's ranks disagree on the communicator (the
    application), said in words; None otherwise."""
    mine = {(p["host"], p["pid"]) for p in procs}
    comms = [c for c in doc.get("communicators") or []
             if any(tuple(x) in mine for x in c.get("pids") or []) and c.get("nranks")]
    by_size: Dict[int, List[dict]] = {}
    for c in comms:
        by_size.setdefault(int(c["nranks"]), []).append(c)
    for size, cs in sorted(by_size.items()):
        if len(cs) > 1 and all(len(c["ranks"]) < size for c in cs):
            parts = "; ".join(f"commId {c['comm_id']} on {_rank_text(c['ranks'])} ({', '.join(c['hosts']) or 'host unknown'})"
                              for c in cs)
            return (f"the job's ranks disagree on the communicator: they initialised {len(cs)} different communicators "
                    f"of {size} ranks ({parts}), none of which the log shows whole, so each rank waited for peers that "
                    "had joined another: the application gave its ranks different unique ids (or created "
                    "communicators in a different order), not a network fault")
    return None


def known_warn_findings(doc: Dict[str, Any], made: List[Finding]) -> List[Finding]:
    """A WARN whose meaning is known (the table above) on a process whose NCCL did not fail (the
    failed ones are said by ``nccl-init-failed`` / ``nccl-comm-failed``): one ``nccl-known-warn``
    (warning) per meaning, naming the hosts and ranks, with what it usually means."""
    taken = {t for f in made for t in (f.evidence or {}).get(TOOL_LINES) or []}
    groups: Dict[int, Dict[str, Any]] = {}
    for proc in doc.get("processes") or []:
        for w in proc.get("warnings") or []:
            text = nccl_warn_text(w.get("source"), w.get("message"))
            if text in taken:
                continue
            for k, (pattern, _why, _todo) in enumerate(_KNOWN_WARNS):
                if pattern.search(str(w.get("message") or "")):
                    g = groups.setdefault(k, {"procs": [], "lines": []})
                    if proc not in g["procs"]:
                        g["procs"].append(proc)
                    g["lines"].append(text)
    out = []
    for k, g in sorted(groups.items()):
        _pattern, why, todo = _KNOWN_WARNS[k]
        out.append(Finding(
            "nccl-known-warn", "warning",
            f"NCCL warned `{g['lines'][0]}` on {_where_said(g['procs'])}"
            + (f" ({len(g['lines'])} lines)" if len(g["lines"]) > 1 else "") + "; NCCL went on after it (no failed init "
            "in the log)",
            evidence={"hosts": sorted({p["host"] for p in g["procs"]}),
                      "ranks": sorted({r for p in g["procs"] for r in p.get("ranks") or []}),
                      TOOL_LINES: quoted(g["lines"])},
            cause=why, remedies=todo))
    return out


#: NCCL's and its SHARP plugin's words when CollNet (SHARP) could not be set up (src/transport.cc
#: "Cannot initialize CollNet, using point-to-point network instead"; the plugin's "SHARP coll init error").
_COLLNET_WARN = re.compile(r"Cannot initialize CollNet|SHARP coll init error|CollNet.*(?:failed|error)", re.I)


def collnet_findings(doc: Dict[str, Any]) -> List[Finding]:
    """CollNet (SHARP in-network reductions) asked for with NCCL_COLLNET_ENABLE and not set up:
    one ``nccl-collnet-failed`` (warning) naming the hosts and ranks, quoting NCCL's WARNs and the
    SHARP library's own error lines, which it claims; the job fell back to point-to-point."""
    enabled = str((doc.get("settings") or {}).get("NCCL_COLLNET_ENABLE", "")).strip()
    procs, lines = [], []
    for proc in doc.get("processes") or []:
        for w in proc.get("warnings") or []:
            if _COLLNET_WARN.search(str(w.get("message") or "")):
                lines.append(nccl_warn_text(w.get("source"), w.get("message")))
                if proc not in procs:
                    procs.append(proc)
    if not procs:
        return []
    sharp = [normalized(r["text"]) for r in doc.get("flagged_lines") or [] if r.get("tool") == "SHARP"]
    sharp_hosts = sorted({str(r.get("host")) for r in doc.get("flagged_lines") or [] if r.get("tool") == "SHARP"})
    fell_back = any("point-to-point" in t for t in lines)
    asked = f"NCCL_COLLNET_ENABLE={enabled} was set" if enabled else "the log does not show NCCL_COLLNET_ENABLE"
    return [Finding(
        "nccl-collnet-failed", "warning",
        f"CollNet (SHARP in-network reduction) could not be set up on {_where_said(procs)}: `{lines[0]}`"
        + (" and the SHARP library's own errors on " + ", ".join(sharp_hosts) if sharp else "")
        + f"; {asked}" + (", and NCCL fell back to point-to-point network connections" if fell_back else ""),
        evidence={"hosts": sorted({p["host"] for p in procs}),
                  "ranks": sorted({r for p in procs for r in p.get("ranks") or []}),
                  "collnet_enable": enabled or None, "sharp_lines": sharp[:10], TOOL_LINES: quoted(lines + sharp)},
        cause=("the SHARP job could not be created: the SHARP aggregation manager (sharp_am, on the subnet manager "
               "node) refused it or is not running, or its resources (trees, OSTs) are used up"
               + (f" (SHARP said: `{sharp[-1]}`)" if sharp else "")),
        remedies=["check that sharp_am runs and that SHARP is enabled on the switches (`sharp_hello`, or "
                  "`ibdiagnet --sharp`)", "run the job without NCCL_COLLNET_ENABLE (the same point-to-point "
                  "network NCCL fell back to), or ask the fabric's administrators for SHARP resources"])]


def _gdr_level(settings: Dict[str, str]) -> Optional[str]:
    v = str(settings.get("NCCL_NET_GDR_LEVEL") or settings.get("NCCL_IB_GDR_LEVEL") or "").strip().upper()
    return v or None


def _nic_class(topo: Optional[Topology], gpu: Optional[int], device: Optional[str]) -> Optional[LinkClass]:
    if topo is None or gpu is None or not device:
        return None
    for nic in getattr(topo, "nics", None) or []:
        names = {str(getattr(nic, "device", "")), str(getattr(nic, "label", ""))}
        if device in names:
            return (getattr(nic, "gpu_classes", None) or {}).get(gpu)
    return None


def _gdr_gpu_line(doc: Dict[str, Any], host: str, dev: Optional[int], gpu_ids: Optional[dict]) -> Optional[dict]:
    """NCCL's per-GPU "GPU Direct RDMA Disabled for GPU g / HCA n (distance D > L)" line of this
    host, HCA and GPU (by bus id or rank), where the log holds one."""
    ids = gpu_ids or {}
    for r in (doc.get("network") or {}).get("gdr_gpus") or []:
        if r["host"] != host or r["gdr"] or r.get("distance") is None or r.get("hca_index") != dev:
            continue
        if (ids.get("bus_id") and r.get("bus_id") == ids["bus_id"]) or \
                (ids.get("rank") is not None and r.get("rank") == ids["rank"] and r.get("bus_id") is None):
            return r
    return None


def _gdr_distance_words(doc: Dict[str, Any], r: dict) -> str:
    """A per-GPU line as a cause: the GPU-NIC path against the level NCCL uses GPUDirect RDMA up to."""
    level = _gdr_level(doc.get("settings") or {})
    told = f" (NCCL_NET_GDR_LEVEL={level} set)" if level else " (NCCL's default level)"
    hca = f"HCA {r.get('hca_index', r['hca'])}" + (f" '{r['hca_name']}'" if r.get("hca_name") else "")
    return (f"NCCL's own line 'GPU Direct RDMA Disabled for {r['label']} / {hca} (distance {r['distance']} "
            f"{r.get('op') or '>'} {r['level']})': the path from that GPU to the NIC is {r['path_said']}, farther "
            f"than {r['level_said']}{told}, the level up to which NCCL uses GPUDirect RDMA"
            + ("; NCCL measured it from the PXN GPU that proxies this one" if r.get("pxn") else ""))


def efa_platform(doc: Dict[str, Any], host: str, net: str) -> Optional[Dict[str, Any]]:
    """What the log shows of AWS's EFA on this host, for a connection over ``net``: the plugin
    (Libfabric / aws-ofi-nccl), its version line, EFA devices (rdmap*), the instance type; None
    where the log shows no EFA."""
    facts = ((doc.get("network") or {}).get("hosts") or {}).get(host) or {}
    efa = facts.get("efa") or {}
    plugins = [p for p in facts.get("plugins_loaded") or [] if "aws-ofi-nccl" in p]
    ofi_net = bool(re.search(r"libfabric|ofi", net, re.I))
    if not (ofi_net or efa.get("provider") == "efa" or efa.get("devices") or plugins):
        return None
    itype = instance_type(efa.get("instance_type"))
    shown = [w for w in ([f"NET/{net}"] if ofi_net else []) + plugins
             + ([f"EFA devices {', '.join(efa['devices'][:4])}"] if efa.get("devices") else [])
             + (["provider efa"] if efa.get("provider") == "efa" else [])]
    return {"instance_type": itype, "gdr": offers_gdr(itype), "shown": shown,
            "platform_line": efa.get("instance_type")}


def _efa_cause(efa: Dict[str, Any]) -> str:
    shown = "; ".join(efa["shown"]) or "the aws-ofi-nccl plugin's lines"
    if efa["instance_type"] is None:
        return (f"the job ran on AWS EFA ({shown}): whether it has GPUDirect RDMA depends on the instance type, "
                "not known from this log (aws-ofi-nccl prints it as 'Running on <type> platform' at NCCL_DEBUG=INFO)")
    if efa["gdr"] is False:
        return (f"the job ran on AWS EFA ({shown}) on {efa['instance_type']}, an instance type without GPUDirect RDMA "
                f"over EFA ({EFA_SOURCE}): staging through host memory is what this platform does, not a fault")
    if efa["gdr"] is True:
        return (f"the job ran on AWS EFA ({shown}) on {efa['instance_type']}, an instance type that offers GPUDirect RDMA "
                f"over EFA ({EFA_SOURCE}): the plugin did not use it; why is not in this log (the plugin's and "
                "Libfabric's versions, FI_EFA_USE_DEVICE_RDMA, or the EFA installer inside the container)")
    return (f"the job ran on AWS EFA ({shown}) on {efa['instance_type']}, an instance type not in {EFA_SOURCE}: "
            "whether it offers GPUDirect RDMA over EFA is not known to gputopo")


def _gdr_cause(doc: Dict[str, Any], host: str, net: str, device: Optional[str], dev: Optional[int],
               topo: Optional[Topology], gpu: Optional[int], gpu_ids: Optional[dict] = None) -> Optional[str]:
    """Why GPUDirect RDMA was off, where the log or the topology tells it; None where neither does."""
    per_gpu = _gdr_gpu_line(doc, host, dev, gpu_ids)
    if per_gpu is not None:
        return _gdr_distance_words(doc, per_gpu)
    hcas = (doc.get("network") or {}).get("gdr_hcas") or []
    off = [h for h in hcas if h["host"] == host and h["net"] == net and not h["gdr"]
           and (h["index"] == dev or (device and h["device"] == device))]
    if off and net == "IB":
        return (f"NCCL's own line 'GPU Direct RDMA Disabled for HCA {off[0]['index']} '{off[0]['device']}'': the "
                "HCA's driver cannot register GPU memory (NCCL finds neither a peer-memory module - it looks for "
                "/sys/kernel/mm/memory_peers/nv_mem/version, .../nv_mem_nc/version and "
                "/sys/module/nvidia_peermem/version - nor DMA-BUF support for it)")
    if off:
        # A NET plugin (AWS Libfabric, IBext, ...) says itself whether it takes GPU memory: NCCL's
        # peer-memory check is its own IB transport's, so the log does not tell why.
        return (f"NCCL's own line 'GPU Direct RDMA Disabled for HCA {off[0]['index']} '{off[0]['device']}'': the "
                f"NET/{net} plugin reports no GPU-memory support on this NIC; why is {PLUGIN_GDR_UNKNOWN}")
    cls = _nic_class(topo, gpu, device)
    level = _gdr_level(doc.get("settings") or {}) or DEFAULT_GDR_LEVEL
    if cls is not None and str(cls) in _CLASS_LEVEL and level in _LEVELS and _CLASS_LEVEL[str(cls)] > _LEVELS[level]:
        told = "NCCL_NET_GDR_LEVEL=" + level if _gdr_level(doc.get("settings") or {}) else f"NCCL's default level {level}"
        return (f"the path from GPU {gpu} to {device} is {cls}, farther than {told}: NCCL uses GPUDirect RDMA only "
                "up to that distance")
    return None


def gdr_findings(doc: Dict[str, Any], topo: Optional[Topology] = None) -> List[Finding]:
    net = doc.get("network") or {}
    conns = [c for c in net.get("connections") or [] if str(c.get("net")) != "Socket"]
    out: List[Finding] = []
    seen_hcas = set()
    by_nic: Dict[tuple, List[dict]] = {}
    for c in conns:
        if not c.get("gdr"):
            by_nic.setdefault((c["host"], c["net"], c["dev"], c.get("device")), []).append(c)
    for (host, netname, dev, device), cs in sorted(by_nic.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        ranks = sorted({c["rank"] for c in cs if c.get("rank") is not None})
        gpu = next((c.get("gpu_index") for c in cs if c.get("gpu_index") is not None), None)
        ids = next(({"bus_id": c.get("bus_id"), "rank": c.get("rank")} for c in cs), None)
        efa = efa_platform(doc, host.split("#", 1)[0], netname)
        cause = _gdr_cause(doc, host.split("#", 1)[0], netname, device, dev, topo, gpu, ids)
        if efa is not None and (cause is None or PLUGIN_GDR_UNKNOWN in cause):
            cause = _efa_cause(efa)  # the platform's facts before any driver-module cause
        seen_hcas.add((host, netname, dev))
        nic = f"NET/{netname}/{dev}" + (f" ({device})" if device else "")
        platform_said = efa is not None and efa["gdr"] is False
        out.append(Finding(
            "nccl-gdr-off", "info" if platform_said else "warning",
            f"GPUDirect RDMA was not used on {host}, {nic}: {sum(c['lines'] for c in cs)} connection line(s) of "
            f"{_rank_text(ranks)} went without /GDRDMA, so their data was staged through host memory"
            + (f" (what {efa['instance_type']} offers on EFA)" if platform_said and efa else ""),
            evidence={"host": host, "net": netname, "dev": dev, "device": device, "ranks": ranks,
                      "gpus": sorted({c["gpu"] for c in cs}), "lines": sum(c["lines"] for c in cs),
                      "settings": {k: v for k, v in (doc.get("settings") or {}).items() if "GDR" in k},
                      **({"efa": efa} if efa else {})},
            cause=cause or "not told by the log (no 'GPU Direct RDMA Disabled' line for this HCA); give --topo to "
                           "compare the GPU-NIC path with NCCL_NET_GDR_LEVEL",
            remedies=_efa_remedies(efa) if efa is not None and cause and cause.startswith("the job ran on AWS EFA")
            else _gdr_remedies(cause)))
    # HCAs NCCL said cannot do GDR, on a host whose communicators used that network, with no
    # connection line in the log (an excerpt, or the job failed before connecting).
    hosts = net.get("hosts") or {}
    disabled: Dict[tuple, List[dict]] = {}
    for h in net.get("gdr_hcas") or []:
        if h["gdr"] or h["net"] == "Socket" or (h["host"], h["net"], h["index"]) in seen_hcas:
            continue
        used = (hosts.get(h["host"]) or {}).get("networks_used") or []
        if used and h["net"] not in used:
            continue  # listed, but the job used another network
        if any(c["host"] == h["host"] and c["net"] == h["net"] and c["dev"] == h["index"] for c in conns):
            continue  # connections on this HCA are in the log: they say what was used
        disabled.setdefault((h["host"], h["net"]), []).append(h)
    for (host, netname), hs in sorted(disabled.items()):
        names = ", ".join(f"HCA {h['index']} '{h['device']}'" for h in hs)
        cause = _gdr_cause(doc, host, netname, hs[0]["device"], hs[0]["index"], topo, None)
        efa = efa_platform(doc, host, netname)
        if efa is not None:
            cause = _efa_cause(efa)
        platform_said = efa is not None and efa["gdr"] is False
        out.append(Finding(
            "nccl-gdr-off", "info" if platform_said else "warning",
            f"GPUDirect RDMA is disabled for {names} on {host} (NET/{netname}): NCCL said so at init, so traffic "
            "through these NICs is staged through host memory",
            evidence={"host": host, "net": netname, "hcas": hs, "lines": 0,
                      "settings": {k: v for k, v in (doc.get("settings") or {}).items() if "GDR" in k},
                      **({"efa": efa} if efa else {})},
            cause=cause, remedies=_efa_remedies(efa) if efa is not None else _gdr_remedies(cause)))
    return out + _gdr_distance_findings(doc, [f.cause or "" for f in out])


def _gdr_distance_findings(doc: Dict[str, Any], causes: List[str]) -> List[Finding]:
    """NCCL's per-GPU "GPU Direct RDMA Disabled ... (distance D > L)" lines no connection finding
    took as its cause: one info per host (a GPU farther from a NIC than NCCL's level is a design
    fact; whether the job's traffic went that way is said by its connection lines, where shown)."""
    by_host: Dict[str, List[dict]] = {}
    for r in (doc.get("network") or {}).get("gdr_gpus") or []:
        if r["gdr"]:
            continue
        if any(f"Disabled for {r['label']} / HCA {r.get('hca_index', r['hca'])}" in c for c in causes):
            continue
        by_host.setdefault(r["host"], []).append(r)
    out = []
    for host, rs in sorted(by_host.items()):
        def one(r: dict) -> str:
            hca = f"HCA {r.get('hca_index', r['hca'])}" + (f" '{r['hca_name']}'" if r.get("hca_name") else "")
            if r.get("distance") is None:
                return f"{r['label']} / {hca} ({r.get('why') or 'no reason printed'})"
            return (f"{r['label']} / {hca}: path {r['path_said']} > level {r['level_said']}"
                    + (" via its PXN GPU" if r.get("pxn") else ""))
        enabled = [r for r in (doc.get("network") or {}).get("gdr_gpus") or [] if r["host"] == host and r["gdr"]]
        no_module = [r for r in rs if r.get("distance") is None]
        out.append(Finding(
            "nccl-gdr-off", "info",
            f"NCCL decided against GPUDirect RDMA for {len(rs)} GPU/HCA combination(s) on {host}: "
            + "; ".join(one(r) for r in rs[:6]) + (" ..." if len(rs) > 6 else "")
            + (f" ({len(enabled)} other combination(s) Enabled)" if enabled else "")
            + "; which of them the job's traffic used is not in these lines"
            + (f" ({unread_why(doc.get('nccl_versions') or [])})" if any(r.get("distance") is not None and not r.get("path")
                                                                       for r in rs) else ""),
            evidence={"host": host, "lines": sum(r["count"] for r in rs), "gdr_gpus": rs[:32],
                      "settings": {k: v for k, v in (doc.get("settings") or {}).items() if "GDR" in k}},
            cause=("NCCL's IB transport found no peer-memory module (or the GPU does not support it)" if no_module
                   and len(no_module) == len(rs) else
                   "the path from these GPUs to the NIC is farther than the level up to which NCCL uses GPUDirect RDMA "
                   "(NCCL_NET_GDR_LEVEL, or its default): a fact of where the GPUs and NICs sit"),
            remedies=["place the job's GPUs next to their NICs (nvidia-smi topo -m), or raise NCCL_NET_GDR_LEVEL where "
                      "the platform's PCIe handles peer traffic across that path"]))
    return out


def _efa_remedies(efa: Dict[str, Any]) -> List[str]:
    """What to do about no GPUDirect RDMA on EFA: the platform, never a driver module."""
    if efa["gdr"] is False:
        return [f"nothing to fix on {efa['instance_type']}: for GPUDirect RDMA over EFA use an instance type that "
                f"offers it (p4d, p4de, p5, p5e, p5en, p6: {EFA_SOURCE})"]
    if efa["instance_type"] is None:
        return ["find the instance type (the plugin's 'NET/OFI Running on <type> platform' line at NCCL_DEBUG=INFO, "
                "or the instance's metadata): only some EFA instance types offer GPUDirect RDMA"]
    return ["check the aws-ofi-nccl and Libfabric versions of the job's container against AWS's EFA installer, "
            "and that FI_EFA_USE_DEVICE_RDMA is not set to 0"]


def _gdr_remedies(cause: Optional[str]) -> List[str]:
    if cause and PLUGIN_GDR_UNKNOWN in cause:
        return ["check whether this platform does GPUDirect RDMA through this NET plugin at all (the plugin's "
                "documentation; on a cloud, the instance type: not every instance with the NIC has it)",
                "`gputopo scan` of the node: its NICs and the GPUDirect RDMA kernel side (peer-memory module, "
                "dma-buf)"]
    if cause and "register GPU memory" in cause:
        return ["check that nvidia_peermem is loaded where the job runs (`lsmod | grep peermem`, "
                "/sys/module/nvidia_peermem/version inside the container) or that DMA-BUF works (kernel >= 5.12, "
                "open GPU kernel modules)",
                "rerun with NCCL_DEBUG_SUBSYS=INIT,NET and compare with `gputopo scan` of the node"]
    if cause and "farther than" in cause:
        return ["place the job's GPUs next to their NICs, or raise NCCL_NET_GDR_LEVEL if the platform's PCIe "
                "handles peer traffic across that path"]
    return ["rerun with NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH: NCCL says per HCA whether GPU Direct RDMA is enabled",
            "import the log with --topo (gputopo scan --json of the node) to compare each GPU-NIC path"]


def _socket_chosen(settings: Dict[str, str]) -> List[str]:
    """The settings in the log by which the user chose TCP sockets for NCCL's network."""
    out = []
    if str(settings.get("NCCL_IB_DISABLE", "")).strip() == "1":
        out.append("NCCL_IB_DISABLE=1")
    if str(settings.get("NCCL_NET", "")).strip().strip("'\"").lower() == "socket":
        out.append(f"NCCL_NET={settings['NCCL_NET']}")
    if "socket" in str(settings.get("NCCL_NET_PLUGIN", "")).lower():
        out.append(f"NCCL_NET_PLUGIN={settings['NCCL_NET_PLUGIN']}")
    return out


def _crosses_hosts(conn: Dict[str, Any]) -> bool:
    """A NET connection to another host: a peer on another host, or on a host the log does not show
    (NET connects GPUs of one host only where P2P and SHM were turned off)."""
    own = str(conn.get("host") or "").split("#", 1)[0]
    return any(h != own for h in conn.get("peer_hosts") or []) or bool(conn.get("peers_host_unknown"))


def socket_findings(doc: Dict[str, Any], topo: Optional[Topology] = None) -> List[Finding]:
    """NET connections between hosts over TCP sockets (``NET/Socket``): a warning (no RDMA, every
    byte staged through host memory and TCP) with its cause where the log shows one (no IB device
    found, libibverbs missing), or info where the log shows the user chose sockets. A host whose
    communicators chose Socket but connected nothing over it between hosts raises nothing."""
    net = doc.get("network") or {}
    hosts = net.get("hosts") or {}
    conns = net.get("connections") or []
    settings = doc.get("settings") or {}
    chosen = _socket_chosen(settings)
    ib_hosts = sorted(h for h, f in hosts.items() if "IB" in (f.get("networks_used") or []))
    ib_set = sorted(k for k in settings if k.startswith("NCCL_IB_") and k != "NCCL_IB_DISABLE")
    topo_nics = [n for n in (getattr(topo, "nics", None) or []) if str(getattr(n, "device", "")).startswith("mlx")]
    out = []
    for host in sorted({c["host"].split("#", 1)[0] for c in conns if c["net"] == "Socket"}):
        facts = hosts.get(host) or {}
        on_socket = [c for c in conns if c["host"].split("#", 1)[0] == host and c["net"] == "Socket" and _crosses_hosts(c)]
        if not on_socket:
            continue
        why = []
        if ib_set:
            why.append(f"{', '.join(ib_set)} set")
        if str(settings.get("NCCL_IB_DISABLE", "")).strip() == "0":
            why.append("NCCL_IB_DISABLE=0")
        others = [h for h in ib_hosts if h != host]
        if others:
            why.append(f"{', '.join(others)} used IB in the same job")
        if topo_nics:
            why.append(f"the topology lists RDMA NICs ({', '.join(str(n.device) for n in topo_nics[:4])})")
        used = sorted({c["dev"] for c in on_socket})
        listed = (facts.get("devices") or {}).get("Socket") or []
        ifaces = ", ".join(next((f"{d['device']} (NET/Socket/{d['index']})" for d in listed if d["index"] == i),
                                f"NET/Socket/{i} (interface not named in the log)") for i in used)
        ranks = sorted({c["rank"] for c in on_socket if c.get("rank") is not None})
        peers = sorted({h for c in on_socket for h in c.get("peer_hosts") or [] if h != host})
        to = (f"to {', '.join(peers)}" if peers else "to hosts") + \
            (" and hosts not in this log" if peers and any(c.get("peers_host_unknown") for c in on_socket) else
             " not in this log" if not peers else "")
        lines = sum(c["lines"] for c in on_socket)
        head = (f"{host}: {lines} connection line(s) of {_rank_text(ranks)} {to} went over TCP sockets "
                f"on {ifaces}")
        if chosen and not why:
            out.append(Finding(
                "nccl-socket-fallback", "info",
                f"{head}, as the job chose ({', '.join(chosen)}): no RDMA between these hosts",
                evidence={"host": host, "interfaces": ifaces, "ranks": ranks, "peer_hosts": peers, "chosen": chosen,
                          "expected_ib": [], "lines": lines},
                cause=f"chosen by the job's settings: {', '.join(chosen)}",
                remedies=["where the hosts have RDMA NICs, drop the setting to let NCCL use them"]))
            continue
        if facts.get("no_ibverbs"):
            cause = ("NCCL could not load libibverbs on this host ('Failed to open libibverbs.so'): rdma-core is not "
                     "installed where the job runs (its container), so no RDMA device could be used")
        elif facts.get("no_ib_device"):
            cause = ("NCCL found no InfiniBand/RoCE device on this host ('NET/IB : No device found'): none visible "
                     "to the job (not given to its container, driver or rdma-core missing, or NCCL_IB_HCA naming no "
                     "existing device)" + ("" if why else "; whether the host has an RDMA NIC at all is not known "
                                                         "from this log"))
        else:
            cause = ("not known from this log: it shows no failed RDMA device and no setting that chose sockets; "
                     "NCCL_DEBUG_SUBSYS=INIT,NET shows how NCCL picked its network")
        out.append(Finding(
            "nccl-socket-fallback", "warning",
            f"{head}: no RDMA between these hosts, every byte staged through host memory and TCP"
            + (f"; IB was expected: {'; '.join(why)}" if why else "")
            + (f" (the job set {', '.join(chosen)})" if chosen else ""),
            evidence={"host": host, "interfaces": ifaces, "ranks": ranks, "peer_hosts": peers, "chosen": chosen,
                      "expected_ib": why, "lines": lines},
            cause=cause,
            remedies=["check `ibv_devinfo` inside the job's container; on Kubernetes the RDMA device plugin must "
                      "give the pod its HCAs", "compare with a `gputopo scan` of the node (its NICs)"] if why else
                     ["`gputopo scan` of the node (or `ibv_devinfo` on it) says whether it has RDMA NICs; without "
                      "them TCP sockets are what NCCL can use between hosts, and this is the platform, not a fault",
                      "where the node has RDMA NICs: check that the job's container sees them (and has rdma-core)"]))
    return out


def far_nic_findings(doc: Dict[str, Any], topo: Optional[Topology]) -> List[Finding]:
    """With a topology: a rank's NIC farther from its GPU than the nearest NIC NCCL listed on the node."""
    if topo is None or not getattr(topo, "nics", None):
        return []
    net = doc.get("network") or {}
    out = []
    done = set()
    for c in net.get("connections") or []:
        gpu, device = c.get("gpu_index"), c.get("device")
        if gpu is None or not device or c.get("proxy_rank") is not None or (c["rank"], device) in done:
            continue
        done.add((c["rank"], device))
        used = _nic_class(topo, gpu, device)
        listed = {d["device"] for d in ((net.get("hosts") or {}).get(c["host"].split("#", 1)[0]) or {})
                  .get("devices", {}).get(c["net"]) or []}
        options = [(cls, str(n.device)) for n in topo.nics
                   for cls in [(getattr(n, "gpu_classes", None) or {}).get(gpu)]
                   if cls is not None and (not listed or str(getattr(n, "device", "")) in listed)]
        if used is None or not options:
            continue
        best_cls, best = min(options, key=lambda o: o[0].rank)
        if used.rank > best_cls.rank:
            out.append(Finding(
                "nccl-far-nic", "warning",
                f"rank {c['rank']} on {c['host']} (GPU {gpu}) used {device} ({used} to its GPU) although {best} is "
                f"{best_cls} to it: its network traffic crosses more of the PCIe/CPU fabric than it needs to",
                gpus=[gpu], evidence={"host": c["host"], "rank": c["rank"], "device": device, "class": str(used),
                                      "nearest": best, "nearest_class": str(best_cls), "lines": c["lines"]},
                cause="which is not known from this log: NCCL picked another NIC (NCCL_IB_HCA order, "
                      "NCCL_CROSS_NIC, rail planning), or the topology NCCL saw differs from the node's; NCCL's "
                      "TOPO lines (NCCL_DEBUG_SUBSYS=GRAPH) tell",
                remedies=["check NCCL_IB_HCA and NCCL_CROSS_NIC", "compare NCCL's TOPO lines "
                          "(NCCL_DEBUG_SUBSYS=GRAPH) with `gputopo scan` of the node"]))
    return out


def nccl_debug_findings(doc: Dict[str, Any], topo: Optional[Topology] = None) -> List[Finding]:
    """Every finding of an imported NCCL_DEBUG log (``nccl_debug.json`` or `--json`'s document)."""
    if not doc:
        return []
    failed = init_failure_findings(doc)
    return failed + known_warn_findings(doc, failed) + collnet_findings(doc) + gdr_findings(doc, topo) + \
        socket_findings(doc, topo) + far_nic_findings(doc, topo)


def verdict(doc: Dict[str, Any], findings: List[Finding]) -> str:
    """broken (an error finding), degraded (a warning), ok (channel lines read and judged, nothing
    found), not-measured (no connection in the log). Lines that could not be read are coverage, not
    a fault: said (info), never what makes a log degraded."""
    sev = {f.severity for f in findings}
    if "error" in sev:
        return "broken"
    if "warning" in sev:
        return "degraded"
    return "ok" if doc.get("channel_lines") else "not-measured"


def problem_findings(doc: Dict[str, Any]) -> List[Finding]:
    """The lines of the log that could not be read, as the run folder's report says them
    (``incomplete-data``, as report/data_findings.py does for ``--into``)."""
    return [Finding("incomplete-data", "info", f"imported NCCL_DEBUG log: {p}", evidence={"files": doc.get("files")},
                    remedies=["re-import the complete NCCL_DEBUG=INFO log"])
            for p in doc.get("problems") or []]
