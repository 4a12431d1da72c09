"""Likely causes and remedies, tied to the host facts on a pair's path.

A measured symptom (wrong bits, NaN, a slow peer path) means different things on different
paths: across the CPU interconnect with the IOMMU translating DMA it is the classic broken PCIe
peer-to-peer path; on NVLink it is a link or GPU fault; on the staged path it is the GPU or its
own PCIe link. These functions read the topology's host facts (IOMMU mode, ACS redirect bridges
above the pair's GPUs, NVML's P2P status) and phrase the cause and what to try.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from gputopo.model import Topology, is_value
from gputopo.model.bus_id import short_bus_id

#: Where the traffic of each PCIe class goes (for messages).
PATH_WORDS = {
    "PIX": "through one PCIe switch",
    "PXB": "through several PCIe switches",
    "PHB": "through the CPU's PCIe host bridge",
    "NODE": "between PCIe host bridges inside one CPU socket",
    "SYS": "across the CPU interconnect between sockets",
}

REMEDY_NCCL_P2P = "set NCCL_P2P_DISABLE=1 (NCCL then stages through host memory)"
REMEDY_DDP = "train with DistributedDataParallel instead of nn.DataParallel (DataParallel uses raw peer copies)"
REMEDY_IOMMU = "boot with iommu=pt (IOMMU passthrough), or turn the IOMMU off for DMA translation"
REMEDY_ACS = "disable PCIe ACS request/completion redirect on the bridges between the GPUs (setpci, or BIOS 'ACS' off)"
REMEDY_AVOID = "keep nn.DataParallel on GPU pairs that passed (e.g. NVLink pairs) via CUDA_VISIBLE_DEVICES"
REMEDY_GPU_HEALTH = "check `dmesg` for Xid errors and `nvidia-smi -q -d ECC`; run `dcgmi diag -r 3`"
REMEDY_NVLINK = "check `nvidia-smi nvlink -s` / `-e` (error counters); reseat the bridge or service the baseboard"


@dataclass
class PathFacts:
    """Host facts that bear on one pair's (or group's) peer-to-peer path."""

    gpus: List[int]
    link_class: Optional[str]
    iommu_mode: Optional[str] = None  # "translated" | "passthrough" | "off" | None (not read)
    acs_bridges: List[str] = field(default_factory=list)  # redirecting bridges above these GPUs
    acs_known: bool = False
    p2p_not_ok: Dict[str, str] = field(default_factory=dict)  # cap -> status where not OK
    #: The route NCCL (DDP) takes on this path, "p2p" | "host", and why (gputopo.bench.routes).
    nccl_route: Optional[str] = None
    nccl_reason: Optional[str] = None

    @property
    def is_nvlink(self) -> bool:
        return bool(self.link_class and self.link_class.startswith("NV"))

    @property
    def iommu_translated(self) -> bool:
        return self.iommu_mode == "translated"

    def evidence(self) -> Dict:
        """The host facts as evidence fields (only those known)."""
        ev: Dict = {}
        if self.iommu_mode:
            ev["iommu_mode"] = self.iommu_mode
        if self.acs_known:
            ev["acs_redirect_bridges"] = list(self.acs_bridges)
        if self.p2p_not_ok:
            ev["nvml_p2p_status"] = dict(self.p2p_not_ok)
        if self.nccl_route:
            ev["nccl_route"] = self.nccl_route
            ev["nccl_route_reason"] = self.nccl_reason
        return ev


def path_facts(topo: Optional[Topology], gpus: Sequence[int], link_class: Optional[str]) -> PathFacts:
    facts = PathFacts(gpus=list(gpus), link_class=link_class)
    if topo is None:
        return facts
    h = topo.host
    if is_value(h.iommu_mode):
        facts.iommu_mode = str(h.iommu_mode)
    bus_ids = set()
    for g in gpus:
        try:
            b = topo.gpu(g).pci_bus_id
        except KeyError:
            continue
        if is_value(b):
            bus_ids.add(short_bus_id(b))
    if isinstance(h.acs, list):
        facts.acs_known = True
        by_gpu = _redirecting_bridges(h.acs)
        facts.acs_bridges = sorted({bdf for b in bus_ids for bdf in by_gpu.get(b, ())})
    if len(gpus) == 2:
        try:
            pair = topo.pair(gpus[0], gpus[1])
            facts.p2p_not_ok = {c: s for c, s in pair.p2p.items()
                                if c in ("read", "write") and is_value(s) and s != "OK"}
        except KeyError:
            pass
    if link_class:
        _nccl_facts(facts, h.cpu_vendor, len(gpus))
    return facts


#: The NCCL_* / TORCH_NCCL_* settings of the run being analysed (its run.json ``nccl_env``), set
#: by :func:`run_nccl_settings` around an analysis: a remedy must describe the route NCCL took
#: in that run, not the one the reader's shell would give. None: not known (a run folder from
#: before they were recorded, or no run at all, as in `place`): this process's environment.
_RUN_NCCL_ENV: ContextVar[Optional[Mapping[str, str]]] = ContextVar("run_nccl_env", default=None)


@contextmanager
def run_nccl_settings(env: Optional[Mapping[str, str]]) -> Iterator[None]:
    """Within the block, NCCL routes are judged under ``env`` (a run's saved NCCL settings)."""
    token = _RUN_NCCL_ENV.set(dict(env) if isinstance(env, Mapping) else None)
    try:
        yield
    finally:
        _RUN_NCCL_ENV.reset(token)


#: (the acs list, its length) -> GPU short bus id -> bdfs of the redirecting bridges above it.
#: Why: placing GPUs on a 256-GPU machine asks for the facts of 32,640 pairs, and walking every
#: bridge of the host per pair took 39 s of a 60 s `gputopo place` (cProfile).
_ACS_INDEX: dict[int, tuple[list, int, dict[str, list[str]]]] = {}


def _redirecting_bridges(acs: list) -> dict[str, list[str]]:
    cached = _ACS_INDEX.get(id(acs))
    if cached is not None and cached[0] is acs and cached[1] == len(acs):
        return cached[2]
    index: dict[str, list[str]] = {}
    for b in acs:
        if b.redirects:
            for x in {short_bus_id(x) for x in b.gpus}:
                index.setdefault(x, []).append(b.bdf)
    _ACS_INDEX.clear()  # one host at a time: never grows
    _ACS_INDEX[id(acs)] = (acs, len(acs), index)
    return index


def _nccl_facts(facts: PathFacts, cpu_vendor, n_gpus: int) -> None:
    """NCCL's route on this path for this host's CPU and the run's NCCL_* settings (saved in
    its run.json; this process's own when the run did not save them)."""
    from gputopo.bench.routes import route_and_reason

    if not facts.link_class:  # (path_facts asks only for a path of a known class)
        return
    facts.nccl_route, facts.nccl_reason = route_and_reason(
        facts.link_class, not facts.p2p_not_ok, env=_RUN_NCCL_ENV.get(), cpu_vendor=cpu_vendor,
        n_gpus=max(2, n_gpus))


def nccl_remedy(f: PathFacts) -> str:
    """The NCCL remedy, saying which route NCCL takes on this path."""
    if f.nccl_route == "host":
        return (f"NCCL (DDP) already avoids this path: {f.nccl_reason}; keep it so (no "
                "NCCL_P2P_LEVEL=SYS; NCCL_P2P_DISABLE=1 forces it everywhere)")
    if f.nccl_route == "p2p":
        return (f"set NCCL_P2P_DISABLE=1: {f.nccl_reason}, so DDP's all-reduce crosses the same "
                "broken path")
    return REMEDY_NCCL_P2P



def _host_suspects(f: PathFacts) -> Tuple[List[str], List[str]]:
    """(suspects named in words, remedies) for a broken PCIe peer path."""
    suspects, remedies = [], []
    if f.iommu_translated:
        suspects.append("the IOMMU translating DMA (iommu: translated)")
        remedies.append(REMEDY_IOMMU)
    if f.acs_bridges:
        suspects.append(f"ACS redirect on bridge(s) {', '.join(f.acs_bridges)}")
        remedies.append(REMEDY_ACS.replace("the bridges between the GPUs", "bridge(s) " + ", ".join(f.acs_bridges)))
    return suspects, remedies


def _unread_host(f: PathFacts) -> str:
    missing = []
    if f.iommu_mode is None:
        missing.append("IOMMU mode")
    if not f.acs_known:
        missing.append("ACS")
    return f" (host {' and '.join(missing)} not read)" if missing else ""


def peer_path_broken(f: PathFacts, symptom: str, classes: Sequence[str] = ()) -> Tuple[str, List[str]]:
    """Cause and remedies when the *peer-to-peer* path of a pair shows ``symptom``.

    ``symptom`` completes "P2P DMA ... is <symptom>", e.g. "corrupted" or "slower than staging".
    ``classes``: the PCIe classes of a group of pairs (a class-fault over NODE and SYS), named
    together; otherwise the path's own class.
    """
    lc = f.link_class
    if f.is_nvlink:
        return (f"peer transfers over NVLink ({lc}) are {symptom}: a faulty NVLink, bridge or GPU",
                [REMEDY_NVLINK, REMEDY_GPU_HEALTH, REMEDY_AVOID])
    where = " and ".join(PATH_WORDS.get(c, "over PCIe") for c in classes) or PATH_WORDS.get(lc or "", "over PCIe")
    label = ", ".join(classes) or lc
    suspects, host_remedies = _host_suspects(f)
    if suspects:
        cause = f"P2P DMA {where} ({label}) is {symptom}; likely " + " and ".join(suspects)
    else:
        cause = (f"P2P DMA {where} ({label or 'PCIe'}) is {symptom}: the platform's PCIe peer-to-peer "
                 "path is broken (root complex / chipset)" + _unread_host(f))
    remedies = host_remedies + [nccl_remedy(f), REMEDY_DDP]
    if not f.iommu_translated:
        remedies.append("check the IOMMU (iommu=pt) and ACS settings of this host")
    return cause, remedies


def staged_path_broken(f: PathFacts) -> Tuple[str, List[str]]:
    """Wrong data on copies through host memory: the GPU or its own PCIe link, not P2P."""
    return ("copies through host memory are corrupted too: a GPU's memory or its PCIe link is faulty, "
            "not only the peer path",
            [REMEDY_GPU_HEALTH, "reseat the GPU; check its PCIe replay counter (gputopo scan)"])


def collective_broken(f: PathFacts) -> Tuple[str, List[str]]:
    """Wrong results from collectives only: the collective library's transport on this path."""
    if not f.gpus:  # an imported nccl-tests log without rank lines: the whole job's figures
        return ("the collective returned wrong results; the log names no GPUs or hosts, so no GPU, pair or "
                "link is blamed", ["rerun and keep the whole output: its '# Using devices' lines name each rank's "
                                   "host and GPU", REMEDY_GPU_HEALTH])
    suspects, host_remedies = _host_suspects(f)
    if not f.link_class:  # e.g. an imported nccl-tests log without --topo: no path to name
        cause = "collectives on these GPUs return wrong results (their link class is unknown)"
    else:
        where = "over NVLink" if f.is_nvlink else PATH_WORDS.get(f.link_class, "over PCIe")
        cause = f"collectives {where} ({f.link_class}) return wrong results"
    if suspects:
        cause += "; suspects: " + " and ".join(suspects)
    return cause, host_remedies + [nccl_remedy(f), REMEDY_GPU_HEALTH]
