"""Problems the scan alone can see, as findings: lost GPUs, NVLinks down, an NVSwitch GPU not
registered with its NVLink fabric, PCIe links running narrower than they can, error counters,
P2P not allowed where the class suggests it should be, and the host settings (IOMMU translating
DMA, ACS redirect) known to corrupt PCIe peer copies.

These are suspicions from static facts; the benchmarks confirm or clear them with data.
"""

from __future__ import annotations

import statistics
from typing import Any, Dict, List, Optional, Tuple

from gputopo.model import Finding, Topology, is_value
from gputopo.model.fabric import GpuFabric
from gputopo.model.finding import gpu_ranges
from gputopo.model.bus_id import short_bus_id
from gputopo.model.peer_access import board_wired, peer_to_peer_off_by_design
from gputopo.report.health_checks import health_findings
from gputopo.report.network_checks import network_findings
from gputopo.report.why.causes import (REMEDY_ACS, REMEDY_DDP, REMEDY_GPU_HEALTH, REMEDY_IOMMU,
                                   REMEDY_NCCL_P2P, REMEDY_NVLINK)

#: What to try when PCIe peer-to-peer DMA is suspected or shown to be broken.
P2P_REMEDIES = [REMEDY_NCCL_P2P, REMEDY_DDP, REMEDY_IOMMU, REMEDY_ACS]


def topology_findings(topo: Topology, staged_gpus: Optional[set] = None) -> List[Finding]:
    """All scan-visible problems of ``topo``, in a stable order; ``staged_gpus``: GPUs a job's
    NCCL log shows staging network traffic through host memory (network_checks.staged_gpus)."""
    out: List[Finding] = []
    out += _lost(topo)
    out += _nvlinks_down(topo)
    out += _fabric(topo)
    out += _fabric_health(topo)
    out += _pcie_downgraded(topo)
    out += _link_errors(topo)
    out += _p2p_status(topo)
    out += _iommu(topo)
    out += _acs(topo)
    out += network_findings(topo, staged_gpus=staged_gpus)
    out += health_findings(topo)  # ECC, remapped rows, Xids, thermal: health_checks.py
    return out


def _lost(topo):
    return [
        Finding("gpu-lost", "error", f"GPU {g.nvml_index} is lost to NVML ({g.lost.error}); "
                "it was left out of the scan", gpus=[g.nvml_index], evidence={"error": g.lost.error},
                cause="the GPU fell off the bus or its driver state is broken (see dmesg for Xid errors)",
                remedies=[REMEDY_GPU_HEALTH, "reset the GPU (nvidia-smi -r) or reboot"])
        for g in topo.gpus if g.lost is not None
    ]


def _remote_known(lk) -> bool:
    """Whether NVML named the link's far end (an all-zero address is no far end)."""
    rid = lk.remote_bus_id
    return is_value(rid) and isinstance(rid, str) and rid.strip("0:.") != ""


def _nvlinks_down(topo):
    """NVLinks that were meant to be up and are not.

    NVML lists every NVLink port of a GPU that has them, bridged or not: a PCIe card with no
    bridge fitted (one H100 PCIe, an A100 PCIe box bridged in pairs) reports all its links
    inactive with no far end, and that is healthy. So an inactive link is *down* only when it
    was meant to be up: on an NVSwitch system (any GPU's link goes to a switch), or when NVML
    names its far end; and a GPU is short of links when it has fewer active than its peers of
    the same model and board (same NVML name) have; an SXM module's links are all wired by its
    baseboard (board_wired). A GPU whose links are all inactive and that
    no other GPU links to has no NVLink connected: one info line, which fails nothing.

    A GPU alone on its machine (one GPU read, none lost) has no NVLink peer to lose, whatever its
    model and whatever else NVML says: the usual one-GPU cloud VM of an H100/H200 SXM lists its
    18 links inactive with no far end. At most one info line (_alone), never a warning or error.
    """
    if len(topo.gpus) == 1:
        return _alone(topo.gpus[0])
    live = [g for g in topo.gpus if g.lost is None]
    switched = any(str(lk.remote_type) == "SWITCH" for g in live for lk in g.nvlinks)
    remotes = {short_bus_id(lk.remote_bus_id) for g in live for lk in g.nvlinks if _remote_known(lk)}
    linked_to = {g.nvml_index for g in live if is_value(g.pci_bus_id) and short_bus_id(g.pci_bus_id) in remotes}
    unconnected = {g.nvml_index for g in live if g.nvlinks and not g.active_nvlinks() and not switched
                   and not board_wired(g.name) and g.nvml_index not in linked_to
                   and not any(_remote_known(lk) for lk in g.nvlinks)}
    out = []
    for g in live:
        if g.nvml_index in unconnected:
            what = ("the only GPU, with no peer to link to" if len(live) == 1 else
                    "no GPU links to it: its peer traffic goes over PCIe; if an NVLink bridge is fitted, "
                    "it is not working")
            out.append(Finding(
                "nvlink-not-connected", "info",
                f"GPU {g.nvml_index}: no NVLink connected ({len(g.nvlinks)} NVLink ports, none active; {what})",
                gpus=[g.nvml_index], evidence={"ports": len(g.nvlinks), "active": 0}))
            continue
        if not g.nvlinks:  # no NVLink ports listed: nothing to judge
            continue
        active = len(g.active_nvlinks())
        wired = switched or board_wired(g.name)
        down = [lk.link for lk in g.nvlinks if lk.active is False and (wired or _remote_known(lk))]
        peers = [len(x.active_nvlinks()) for x in live if x.nvml_index != g.nvml_index
                 and x.nvml_index not in unconnected and is_value(x.name) and x.name == g.name]
        typical = statistics.median(peers) if peers else 0
        short = bool(typical and active < typical)
        if not down and not short:
            continue
        msg = f"GPU {g.nvml_index}: {active} NVLinks active"
        if down:
            msg += f", {len(down)} down (links {gpu_ranges(down)})"
        if short:
            msg += f"; its peers of the same model have {typical:g}"
        out.append(Finding(
            "nvlink-down", "error" if active == 0 else "warning",
            msg + ": its peer traffic falls back to PCIe or to fewer links, at a fraction of the speed",
            gpus=[g.nvml_index], evidence={"active": active, "down": down, "peers_median": typical},
            cause="NVLink training failed, a bridge/cable/baseboard fault, or fabric manager not running",
            remedies=[REMEDY_NVLINK, "on NVSwitch systems: check that nvidia-fabricmanager is running"],
        ))
    return out


def _alone(g) -> List[Finding]:
    """The NVLinks of the machine's only GPU: an info line where it lists ports, nothing else."""
    if g.lost is not None or not g.nvlinks:
        return []
    active = len(g.active_nvlinks())
    if active == 0:
        return [Finding(
            "nvlink-not-connected", "info",
            f"GPU {g.nvml_index}: no NVLink connected ({len(g.nvlinks)} NVLink ports, none active; "
            "the only GPU, with no peer to link to)",
            gpus=[g.nvml_index], evidence={"ports": len(g.nvlinks), "active": 0, "gpus": 1})]
    if active == len(g.nvlinks):
        return []
    return [Finding(
        "nvlink-not-connected", "info",
        f"GPU {g.nvml_index}: {active} of {len(g.nvlinks)} NVLink ports active; it is the only GPU, "
        "so no peer traffic uses them",
        gpus=[g.nvml_index], evidence={"ports": len(g.nvlinks), "active": active, "gpus": 1})]


def _fabric(topo):
    """NVSwitch GPUs that NVML says are not (or not successfully) registered with the NVLink
    fabric. A GPU takes part in a fabric when NVML reports a fabric state for it at all (a GPU in
    none answers NOT_SUPPORTED, read as n/a); it is judged only where it is one of several GPUs
    and an NVSwitch GPU by other evidence too (a link to a switch, or a baseboard-wired SXM
    module). Anything else with a state short of completed/success is said as info. GPUs in the
    same state make one finding."""
    live = [g for g in topo.gpus if g.lost is None]
    switched = any(str(lk.remote_type) == "SWITCH" for g in live for lk in g.nvlinks)
    groups: Dict[Tuple[str, str], List[int]] = {}
    evidence: Dict[Tuple[str, str], Dict[str, Any]] = {}
    for g in live:
        f = g.fabric
        if not isinstance(f, GpuFabric) or f.ready:
            continue
        judged = len(topo.gpus) > 1 and (switched or board_wired(g.name))
        if f.failed:
            severity, what = "error", f"NVLink fabric registration failed ({f.status})"
        elif f.state == "not-started":
            severity, what = "error", "NVLink fabric registration has not started (fabric state not-started)"
        elif f.state == "in-progress":
            severity, what = "warning", ("NVLink fabric registration still in progress (so it stays "
                                         "while the fabric manager is not running or still starting: "
                                         "scan again in a minute)")
        else:  # a state this gputopo does not know: no clear evidence
            severity, what = "info", f"NVML reports the NVLink fabric state as {f.text()}"
        if not judged:
            severity = "info"
            what += ("; the only GPU, with no NVLink peer" if len(topo.gpus) == 1 else
                     "; no NVSwitch is seen, so nothing is judged from it")
        elif severity != "info":
            what += ": no NVLink peer traffic until the fabric manager registers the GPU"
        groups.setdefault((severity, what), []).append(g.nvml_index)
        evidence.setdefault((severity, what), {"state": f.state, "status": str(f.status) if is_value(f.status)
                                               else None})
    out = []
    for (severity, what), gpus in groups.items():
        alarm = severity != "info"
        out.append(Finding(
            "nvlink-fabric", severity, f"GPU{'s' if len(gpus) > 1 else ''} {gpu_ranges(gpus)}: {what}",
            gpus=gpus, evidence=dict(evidence[(severity, what)], gpus=gpus),
            cause=("the fabric manager (nvidia-fabricmanager) is not running, failed, or does not match "
                   "the driver version" if alarm else None),
            remedies=(["check `systemctl status nvidia-fabricmanager` and its log; its version must "
                       "match the driver's", "`nvidia-smi -q | grep -A 3 Fabric` shows each GPU's state"]
                      if alarm else [])))
    return out


#: The fabric health conditions NVML reports (model/fabric.py HEALTH_FIELDS) that are findings:
#: field -> (severity, NVIDIA's meaning, nvml.h's words for the TRUE value). NVIDIA's DCGM fails
#: its NVLink health watch on each of them (github.com/NVIDIA/DCGM modules/health/DcgmHealthWatch.cpp,
#: "Fabric Health: Route Unhealthy", "Bandwidth Degraded", "Route Recovery", "Access Timeout
#: Recovery", "Incorrect Configuration"); here an unhealthy route or a wrong configuration is an
#: error (traffic over the fabric can fail), a degraded bandwidth or a recovery in progress a
#: warning (the GPU works, its NVLink traffic is slower or briefly held).
FABRIC_HEALTH = {
    "route_unhealthy": ("error", "NVML reports the GPU's NVLink fabric route unhealthy (nvml.h: "
                        "ROUTE_UNHEALTHY_TRUE, \"Route is unhealthy\")"),
    "degraded_bw": ("warning", "NVML reports the GPU's NVLink fabric bandwidth degraded (nvml.h: "
                    "DEGRADED_BW_TRUE, \"Bandwidth degraded\"): NVLink peer traffic runs below the fabric's rate"),
    "route_recovery": ("warning", "NVML reports an NVLink fabric route recovery in progress (nvml.h: "
                       "ROUTE_RECOVERY_TRUE, \"Route Recovery in progress\")"),
    "access_timeout_recovery": ("warning", "NVML reports an NVLink fabric access timeout recovery in "
                                "progress (nvml.h: ACCESS_TIMEOUT_RECOVERY_TRUE, \"Access Timeout "
                                "Recovery in progress\")"),
}


def _fabric_health(topo):
    """What NVML's fabric health mask says (nvmlGpuFabricInfo_v2 healthMask), one finding per
    condition and GPU group. A mask whose fields are all NOT_SUPPORTED is no health: the scan's
    fabric line says it is not known (GpuFabric.health_text), and nothing here is made of it.

    The mask is read only once the GPU's registration has completed (the scan's fabric line
    shows it only then too): before that the registration itself is the finding (_fabric). A GPU
    alone on its machine has no NVLink peer, so no traffic of its uses the fabric: whatever the
    mask says is one info line per GPU (_alone_health), never a warning or error. A GPU passed
    alone into a VM from a shared NVSwitch system can report its bandwidth degraded and its
    NVLinks insufficient, and is healthy."""
    alone = len(topo.gpus) == 1
    groups: Dict[Tuple[str, str], List[int]] = {}
    evidence: Dict[Tuple[str, str], Dict[str, Any]] = {}
    out = []
    for g in topo.gpus:
        f = g.fabric
        if g.lost is not None or not isinstance(f, GpuFabric) or f.health is None or not f.completed:
            continue
        h = f.health
        found = [(sev, what) for k, (sev, what) in FABRIC_HEALTH.items() if h[k] == "true"]
        wrong = h["incorrect_configuration"]
        if wrong not in ("none", "not-supported"):
            found.append(("error", f"NVML reports the GPU's NVLink fabric configuration incorrect ({wrong}; "
                                   "nvml.h: INCORRECT_CONFIGURATION)"))
        if alone:
            out += _alone_health(g, f) if found else []
            continue
        for key in found:
            groups.setdefault(key, []).append(g.nvml_index)
            ev = evidence.setdefault(key, {"health_masks": {}, "health": {}})
            ev["health_masks"][str(g.nvml_index)] = f.health_mask
            ev["health"][str(g.nvml_index)] = h
    for (severity, what), gpus in groups.items():
        out.append(Finding(
            "nvlink-fabric", severity, f"GPU{'s' if len(gpus) > 1 else ''} {gpu_ranges(gpus)}: {what}",
            gpus=gpus, evidence=dict(evidence[(severity, what)], gpus=gpus),
            cause="an NVLink or NVSwitch fault on the GPU's fabric path (a link, a switch port or tray, the "
                  "fabric manager's routing)",
            remedies=["`nvidia-smi -q | grep -A 12 Fabric` shows the GPU's fabric health; check the fabric "
                      "manager's log and `nvidia-smi nvlink -s`", REMEDY_NVLINK]))
    return out


def _alone_health(g, f: GpuFabric) -> List[Finding]:
    """The fabric health conditions of the machine's only GPU: one info line saying what NVML
    reported (in GpuFabric.health_text's words, the mask in hex) and why nothing is judged."""
    return [Finding(
        "nvlink-fabric", "info",
        f"GPU {g.nvml_index}: NVML reports its NVLink fabric {f.health_text()} (health mask "
        f"{int(f.health_mask):#x}); it is the only GPU, so no peer traffic uses NVLink and nothing "
        "is judged from it",
        gpus=[g.nvml_index],
        evidence={"health_masks": {str(g.nvml_index): f.health_mask}, "health": {str(g.nvml_index): f.health},
                  "gpus": [g.nvml_index], "judged": False})]


def _pcie_downgraded(topo):
    """A GPU's PCIe link narrower than its maximum. NVIDIA documents both current values as idle
    readings (nvidia-smi --help-query-gpu, docs.nvidia.com/deploy/nvidia-smi/, pcie.link.gen.gpucurrent
    and pcie.link.width.current:
    "These may be reduced when the GPU is not in use"): a generation below max is never judged;
    a narrow width is, because a riser or slot fault reads the same at idle and must not pass as
    ok. Read at the link's top generation it is a link trained narrow; read while the link idles
    below it, the message says the reading is not proof yet and how to confirm it under load."""
    out = []
    for g in topo.gpus:
        p = g.pcie
        if g.lost is not None or not (is_value(p.width_current) and is_value(p.width_max)):
            continue
        if p.width_current < p.width_max:
            gen_known = is_value(p.gen_current) and is_value(p.gen_max)
            top = gen_known and p.gen_current >= p.gen_max
            share = f"{p.width_current / p.width_max:.0%}"
            if not top:
                when = (f"read while the link idles at Gen{p.gen_current} of Gen{p.gen_max}" if gen_known
                        else "read with no generation NVML could give")
                what = (f"PCIe link x{p.width_current} of x{p.width_max}, {when}: NVIDIA says the current width, like the "
                        "generation, may be reduced when the GPU is not in use, so this reading is not yet "
                        f"proof; if it stays narrow under load, host and staged transfers get {share} of "
                        "the bandwidth")
                remedies = ["read the link under load (`nvidia-smi -q -d PCI` while a job runs, or `gputopo "
                            "bench`'s host copies); if it stays narrow, reseat the GPU or riser and check the "
                            "slot's wiring in the board manual"]
            else:
                what = (f"PCIe link x{p.width_current} of x{p.width_max}: host and staged transfers get "
                        f"{share} of the bandwidth")
                remedies = ["reseat the GPU or riser; check the slot's wiring in the board manual"]
            out.append(Finding(
                "pcie-downgraded", "warning", f"GPU {g.nvml_index}: {what}",
                gpus=[g.nvml_index],
                evidence={"width_current": p.width_current, "width_max": p.width_max,
                          "gen_current": p.gen_current, "gen_max": p.gen_max, "at_top_generation": top},
                cause="the link trained at reduced width: riser, slot, or a bad lane",
                remedies=remedies,
            ))
    return out


#: Thresholds for the link error counters, from NVIDIA's DCGM (github.com/NVIDIA/DCGM):
#: - nvvs/plugin_src/pcie/Pcie.cpp: the diag's PCIe test fails a GPU with more than
#:   ``max_pcie_replays`` = 80 PCIe replays (nvvs/include/PluginStrings.h: "Maximum PCIe replays
#:   allowed per device while the plugin runs").
#: - modules/health/DcgmHealthWatch.cpp (MonitorNVLink, MonitorPcie) with
#:   common/DcgmGPUHardwareLimits.h: the health watches judge the *growth* of a counter within a
#:   window (one minute by default): NVLink replay or recovery growth >= 1 (DCGM_LIMIT_MAX_NVLINK_ERROR)
#:   fails, CRC flit/data growth warns and fails at 100/s (DCGM_LIMIT_MAX_NVLINK_CRC_ERROR, "RM has
#:   informed us that CRC errors only matter at rates of 100+ per second"), PCIe replays warn above
#:   a rate of ceil(1e-12 BER x lane rate x 60 s x lanes) per minute (GetExpectedPcieReplayRate).
#: NVML's counters count since the driver loaded, so one scan gives a count and no time span: no
#: rate can be judged from it. A PCIe count above the diag's per-test limit is a warning; smaller
#: counts, and NVLink counts (DCGM judges those by growth only), are said as info and mark no pair:
#: growth between two scans is judged by `counter-growth` (history_findings.py). The other tools
#: people run agree: GoogleCloudPlatform/cluster-health-scanner runs DCGM's diag (dcgmi diag) for
#: its GPU check, and leptonai/gpud exports the NVLink counters as metrics with no threshold.
PCIE_REPLAY_LIMIT = 80


def _link_errors(topo):
    out = []
    for g in topo.gpus:
        if g.lost is not None:
            continue
        nvlink = {}
        for lk in g.nvlinks:
            for name, value in lk.errors.items():
                if is_value(value) and value > 0:
                    nvlink[f"nvlink{lk.link}.{name}"] = value
        replay = g.pcie.replay_counter if is_value(g.pcie.replay_counter) and g.pcie.replay_counter > 0 else 0
        if replay > PCIE_REPLAY_LIMIT:
            out.append(Finding(
                "link-errors", "warning",
                f"GPU {g.nvml_index}: {replay:,} PCIe replays since the driver loaded, more than the "
                f"{PCIE_REPLAY_LIMIT} NVIDIA's DCGM diagnostic allows during its own PCIe test: "
                "retries cost bandwidth and can precede link failure",
                gpus=[g.nvml_index], evidence={"pcie.replay": replay, "limit": PCIE_REPLAY_LIMIT,
                                               "counted_since": "driver load"},
                cause="signal integrity problems on the PCIe link (riser, slot, retimer)",
                remedies=["watch whether the count grows under load (`gputopo scan` again, `gputopo history`; "
                          "DCGM's PCIe health watch warns above 16 replays a minute on a Gen4 x16 link, 31 on Gen5 x16)",
                          "reseat the GPU or riser"],
            ))
        small = dict(nvlink)
        if replay and replay <= PCIE_REPLAY_LIMIT:
            small["pcie.replay"] = replay
        if small:
            out.append(Finding(
                "link-errors", "info",
                f"GPU {g.nvml_index}: link error counters since the driver loaded ({_top(small)}): a count "
                "with no time span is no rate, and a few over weeks is normal on a healthy link; "
                "NVIDIA's DCGM judges these counters by their growth, so a later scan says whether they grow",
                gpus=[g.nvml_index], evidence=dict(small, counted_since="driver load"),
                cause="retried link transfers; a link at fault shows them growing between scans",
                remedies=["scan again after a load (`gputopo scan`, `gputopo history` shows counter-growth)"],
            ))
    return out


def _p2p_status(topo):
    """NVLink and single-switch PCIe pairs should allow P2P read and write, except between cards
    whose maker leaves peer-to-peer over PCIe out by design (GeForce: model/peer_access.py's
    peer_to_peer_off_by_design), which is said as info."""

    names = {g.nvml_index: g.name for g in topo.gpus}
    out = []
    for p in topo.pairs:
        bad = {cap: p.p2p.get(cap) for cap in ("read", "write")
               if is_value(p.p2p.get(cap)) and p.p2p.get(cap) != "OK"}
        if not bad:
            continue
        i, j = p.gpus
        by_design = not p.link_class.is_nvlink and all(peer_to_peer_off_by_design(names.get(g)) for g in (i, j))
        expected = (p.link_class.is_nvlink or p.link_class.kind in ("PIX", "PXB")) and not by_design
        if by_design:
            why = (f"; {names[i]}: NVIDIA gives GeForce cards no peer-to-peer over PCIe, by design, so copies "
                   "between them are staged through host memory (slower, but correct)")
        elif expected:
            why = "; a link of this class normally allows it"
        else:
            why = "; copies between them are staged through host memory"
        out.append(Finding(
            "p2p-unsupported", "warning" if expected else "info",
            f"GPUs {i},{j} ({p.link_class}): NVML reports P2P "
            + ", ".join(f"{c} {s}" for c, s in bad.items()) + why,
            gpus=[i, j], link_class=str(p.link_class), evidence=dict(bad, by_design=by_design) if by_design else bad,
            cause=("NVIDIA disables peer-to-peer between GeForce cards by design" if by_design else
                   "P2P disabled by the platform (chipset/topology) or by a driver regkey"),
        ))
    return out


def _pcie_pairs(topo):
    return [list(p.gpus) for p in topo.pairs if not p.link_class.is_nvlink]


def _no_pcie_pair(topo) -> bool:
    """One GPU, or GPUs whose every pair (all of them read) is joined by NVLink."""
    return len(topo.gpus) < 2 or (bool(topo.pairs) and not _pcie_pairs(topo))


def _no_pcie_pair_text(topo, acs: bool = False) -> str:
    """What IOMMU translation or ACS redirect means where no GPU pair talks over PCIe."""
    if len(topo.gpus) < 2:
        if acs:
            return ("with one GPU there are no GPU peer-to-peer requests to redirect; its host<->GPU "
                    "copies are not redirected")
        return ("with one GPU there are no GPU peer-to-peer copies; its host<->GPU copies are "
                "translated as on any IOMMU host (`gputopo bench` checks them bit for bit)")
    return ("no GPU pair reaches another over PCIe now (every pair is joined by NVLink), so no peer "
            "copy is at risk; a pair whose NVLinks go down falls back to PCIe peer-to-peer, which "
            "this setting can corrupt")


def _iommu(topo):
    h = topo.host
    if h.iommu_mode != "translated":
        return []
    pcie = _pcie_pairs(topo)
    if _no_pcie_pair(topo):  # nothing peer-to-peer over PCIe now: say what is true, as info
        return [Finding(
            "iommu", "info", "the IOMMU translates DMA: " + _no_pcie_pair_text(topo),
            evidence={"iommu_mode": h.iommu_mode, "evidence": list(h.iommu_evidence), "pcie_pairs": []},
            cause="IOMMU in DMA-translation mode remaps peer DMA addresses")]
    return [Finding(
        "iommu", "warning",
        "the IOMMU translates DMA: PCIe peer-to-peer copies between GPUs can be silently corrupted "
        f"or fail ({len(pcie)} GPU pair(s) reach each other over PCIe); this is the known cause of "
        "nn.DataParallel losses going NaN while DDP trains fine",
        evidence={"iommu_mode": h.iommu_mode, "evidence": list(h.iommu_evidence), "pcie_pairs": pcie},
        cause="IOMMU in DMA-translation mode remaps peer DMA addresses",
        remedies=P2P_REMEDIES,
    )]


def _acs(topo):
    """One finding for all bridges with ACS redirect on a GPU's path (they share one cause)."""
    h = topo.host
    if not isinstance(h.acs, list):
        return []
    redirecting = [b for b in h.acs if b.redirects]
    if not redirecting:
        return []
    by_bus = {short_bus_id(g.pci_bus_id): g.nvml_index for g in topo.gpus}
    gpus = sorted({by_bus[short_bus_id(x)] for b in redirecting for x in b.gpus if short_bus_id(x) in by_bus})
    if _no_pcie_pair(topo):
        return [Finding(
            "acs", "info", f"ACS redirect is on in {len(redirecting)} PCIe bridge(s) above GPU(s) "
            f"{gpu_ranges(gpus) or '?'}: " + _no_pcie_pair_text(topo, acs=True), gpus=gpus or None,
            evidence={"bridges": {b.bdf: {"gpus": b.gpus, "controls": b.controls} for b in redirecting}},
            cause="ACS request/completion redirect enabled (often together with the IOMMU)")]
    return [Finding(
        "acs", "warning",
        f"ACS redirect is on in {len(redirecting)} PCIe bridge(s) above GPU(s) {gpu_ranges(gpus) or '?'}: "
        "peer-to-peer traffic is forced up to the root complex, slower, and broken where the root "
        "complex does not route it back",
        gpus=gpus or None,
        evidence={"bridges": {b.bdf: {"gpus": b.gpus, "controls": b.controls} for b in redirecting}},
        cause="ACS request/completion redirect enabled (often together with the IOMMU)",
        remedies=P2P_REMEDIES,
    )]



def _top(errors: dict, n: int = 3) -> str:
    items = sorted(errors.items(), key=lambda kv: -kv[1])
    s = ", ".join(f"{k}={v}" for k, v in items[:n])
    return s + (f", +{len(items) - n} more" if len(items) > n else "")
