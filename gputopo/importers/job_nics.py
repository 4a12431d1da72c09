"""`--nics [HOST=]FILE` of `gputopo import nccl-tests`: the RDMA NICs of each host of a multi-node job.

A job across hosts sends its traffic between them through the hosts' NICs, so its figure is
judged against what they carry (report/network_floor.py). Each option gives one host's saved
``ibstat`` / ``ibv_devinfo`` text or ``gputopo scan --json`` output; ``HOST=`` names the host as
the log's ``# Rank N ... on HOST`` lines do, and a FILE without it stands for every host of the
job (nodes of one kind). The NICs read are added to the import's topology with their host
(``Nic.host``), labelled ``HOST:DEVICE``.
"""

from __future__ import annotations

import copy
from typing import Dict, List, Mapping, Optional, Sequence

from gputopo.errors import InputFileError, UsageError
from gputopo.model import Nic
from gputopo.model.nic import NicPort
from gputopo.text_input import display_name

#: How --help says the option.
NICS_HELP = ("A host's RDMA NICs for a job across hosts: HOST=FILE (the host as the log's '# Rank N ... on HOST' "
             "lines name it) or FILE (every host of the job alike); FILE is saved `ibstat` / `ibv_devinfo` text or "
             "`gputopo scan --json` output. Repeat it per host. The job's figure is then judged against what the "
             "NICs it used carry; without it a job across hosts is not judged.")


def _read_nics(path: str) -> List[Nic]:
    """The NICs (with their ports) of one file: scan JSON or ibstat / ibv_devinfo text."""
    from gputopo.inputs import MAX_DESCRIPTION_BYTES, read_user_bytes

    head = read_user_bytes(path, "NIC description", MAX_DESCRIPTION_BYTES)
    if head.lstrip()[:1] == b"{":
        from .user_inputs import load_topo_file

        topo = load_topo_file(path)
        if topo.simulated:
            raise InputFileError(path, "a scan of a SIMULATED machine (--sim) describes no real host's NICs")
        nics = topo.nics
        if not any(n.ports for n in nics):
            raise InputFileError(path, "a gputopo scan with no NIC port read: `gputopo scan --json` on a host "
                                       "whose RDMA ports it could read (or give its `ibstat` text)")
        return nics
    from .ibstat_import import read_ibstat, topology_of

    return topology_of(read_ibstat(path)).nics


def job_nics(specs: Sequence[str], hosts: Sequence[str],
             used: Optional[Mapping[str, Sequence[str]]] = None) -> List[Nic]:
    """The NICs of ``specs`` (``[HOST=]FILE``) for a job on ``hosts``, each with its host set.

    Refused (UsageError, exit 2): a host the job did not run on, a host given twice, a FILE
    without a host beside named ones, named hosts that leave some of the job's hosts without
    NICs, and any --nics on a job whose hosts the log does not name. ``used``: host -> the ports
    NCCL said it used ("mlx5_0:1"), where the log holds NCCL's INFO lines: only those are counted
    on that host (the job's NICs, not every NIC of the host)."""
    if not specs:
        return []
    if len(hosts) < 2:
        raise UsageError("--nics: the log names " + (f"one host ({hosts[0]})" if hosts else "no host")
                         + "; --nics describes the hosts of a job across hosts ('# Rank N ... on HOST' lines "
                           "naming two or more)")
    by_host: Dict[str, List[Nic]] = {}
    files: Dict[int, str] = {}
    alike: List[Nic] = []
    for spec in specs:
        host, sep, path = spec.partition("=")
        if not sep:
            host, path = "", spec
        if not path:
            raise UsageError(f"--nics {spec}: no file after '='; the syntax is HOST=FILE or FILE")
        nics = _read_nics(path)
        for n in nics:
            files[id(n)] = display_name(path)
        if not host:
            if alike:
                raise UsageError("--nics: two files without a host; name each as HOST=FILE")
            alike = nics
            continue
        if host not in hosts:
            raise UsageError(f"--nics {spec}: {host} is not a host of this job ({', '.join(hosts)})")
        if host in by_host:
            raise UsageError(f"--nics: {host} given twice")
        by_host[host] = nics
    if alike and by_host:
        raise UsageError("--nics: give either one FILE for every host or HOST=FILE for each, not both")
    if by_host and len(by_host) < len(hosts):
        missing = [h for h in hosts if h not in by_host]
        raise UsageError(f"--nics: no NICs given for {', '.join(missing)}; name every host of the job as "
                         "HOST=FILE (or give one FILE for all)")
    out: List[Nic] = []
    for host in hosts:
        for n in by_host.get(host) or alike:
            nic = copy.deepcopy(n)
            nic.host = host
            nic.label = f"{host}:{n.device if isinstance(n.device, str) else n.label}"
            nic.gpu_classes, nic.nic_classes = {}, {}  # another topology's GPU numbers mean nothing here
            named = set((used or {}).get(host) or [])
            if named:
                nic.ports = [p for p in nic.ports if p.name in named]
            for p in nic.ports:
                p.sources["job_nics"] = files[id(n)] + ("; used per the log's NET/IB line" if named else "")
            if nic.ports:
                out.append(nic)
    return out


#: Where the NICs of a job judged by its own NCCL lines were read (said in the judged basis).
FROM_NCCL_LINES = "the output's NCCL INFO lines (the ports NCCL's 'NET/IB : Using' line names"


def nccl_line_nics(hosts: Sequence[str], used: Mapping[str, Sequence[str]], index: Mapping[str, Mapping[int, str]],
                   rates: Mapping[str, Mapping[str, float]], net_bw: Mapping[str, Mapping[int, float]]) -> List[Nic]:
    """Without --nics: the NICs of a job across hosts as its own NCCL INFO lines name them, where
    every host of the job names the ports it used (``NET/IB : Using``; NCCL lists only ACTIVE
    ports: src/transport/net_ib.cc skips the others) and each one's rate (NCCL >= 2.27's
    ``speed=`` in Mb/s, or the topology dump's ``+ NET[GB/s] - NET/<index>``). Only the ports
    NCCL used are counted, not every NIC of the host; [] where any host lacks any of it (the
    job then stays not judged)."""
    if len(hosts) < 2 or any(not used.get(h) for h in hosts):
        return []
    out: List[Nic] = []
    for host in hosts:
        by_name = dict(rates.get(host) or {})
        for i, name in (index.get(host) or {}).items():
            bw = (net_bw.get(host) or {}).get(i)
            if name not in by_name and bw is not None:
                by_name[name] = bw * 8
        if any(p not in by_name for p in used[host]):
            return []
        how = "speed=" if rates.get(host) else "topology dump NET[GB/s]"
        for port in used[host]:
            dev, _, num = port.rpartition(":")
            p = NicPort(device=dev, port=int(num), state="Active", rate_gbps=by_name[port],
                        sources={"job_nics": f"{FROM_NCCL_LINES}, its rate from NCCL's {how})",
                                 "state": "NCCL lists only ACTIVE ports"})
            out.append(Nic(label=f"{host}:{dev}", device=dev, ports=[p], host=host))
    return out
