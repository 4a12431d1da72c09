"""Bandwidth findings: `slow` (below the link's rate), `p2p-slower-than-staged` (peer copies
slower than going through host memory). (`outlier`, a pair below its like pairs' median, is
like_gpus.py's, with the sets of GPUs slower than the others of their model.) (`noisy`, samples
that spread, is measured_findings.py's: its one definition, for the bench's own findings and the
report's alike.)

Thresholds are named constants so users and tests can see them. Both are skipped on the
``cpu`` fabric, whose timings measure memcpy and process scheduling, not a GPU link.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Dict, List, Optional, Tuple

from gputopo.model import Finding, Measurement, Topology
from gputopo.model.finding import gpu_ranges

from .why.causes import REMEDY_ACS, REMEDY_NCCL_P2P, REMEDY_NVLINK, path_facts, peer_path_broken
from .expected_basis import SLOW_EFFICIENCY, UNKNOWN_TRAY_LINK, Judged, gpu_names, judge_rate, platform_of
from .network_floor import job_hosts
from .references import REFERENCE_FRACTION, closest_reference
from .headline import BANDWIDTH_MIN_SIZE_BYTES, Headline, link_class_of, measured_gbps

#: Peer copies below this fraction of staged copies (same pair, direction, size) are
#: `p2p-slower-than-staged`; the margin keeps timing noise from flagging equal paths.
STAGED_RATIO = 0.9


def _fmt(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:.3g}"


def _pair_text(gpus, lc) -> str:
    return f"GPUs {','.join(map(str, gpus))} ({lc or '?'})"


def _job_text(gpus, topo: Optional[Topology]) -> str:
    """A job across hosts: its hosts and ranks (its GPUs are ranks, not one host's GPU pair)."""
    hosts = job_hosts(topo)
    return f"the job across {len(hosts)} hosts ({', '.join(hosts)}; GPUs {gpu_ranges(gpus)})"


def _efficiency(h: Headline) -> float:
    """The efficiency of a headline slow_findings kept (only those with one are kept)."""
    return h.efficiency if h.efficiency is not None else 0.0


def slow_findings(heads: List[Headline], topo: Optional[Topology]) -> List[Finding]:
    """Series below their expected rate: a published figure of the same machine kind where one
    matches (references.py), else the link's theoretical rate x SLOW_EFFICIENCY (plain peer
    copies only). Each finding says which basis it used and cites the row."""
    by_pair: Dict[tuple, List[Tuple[Headline, Judged]]] = defaultdict(list)
    for h in heads:
        judged = judge_rate(h, topo)
        if judged is not None and judged.fraction < judged.threshold:
            by_pair[h.pair_key].append((h, judged))
    out = []
    for pair, hjs in sorted(by_pair.items()):
        worst, wj = min(hjs, key=lambda hj: hj[1].fraction)
        lc = worst.link_class
        facts = path_facts(topo, list(pair), lc)
        evidence = {
            "basis": wj.basis, "threshold": wj.threshold,
            "measured": [{"series": h.series, "direction": h.direction, "gbps": round(h.gbps, 3),
                          "expected_gbps": j.expected_gbps, "basis": j.basis,
                          "efficiency": round(j.fraction, 3), "size_bytes": h.size_bytes,
                          **({"reference": j.reference.to_json()} if j.reference else {})}
                         for h, j in hjs],
            "expected_basis": wj.text, **facts.evidence(),
        }
        if wj.basis == "theoretical":
            evidence["threshold_efficiency"] = SLOW_EFFICIENCY
        severity, told = "warning", ""
        if wj.basis == "nics":
            # a job across hosts under half of what its NICs carry: the log alone does not say why
            cause = ("not known from this output: the traffic between the hosts runs at under half of what the "
                     "NICs carry; NCCL using fewer NICs than the hosts have (NCCL_IB_HCA, a NIC down or not "
                     "visible in the container), GPUDirect RDMA off (every byte staged through host memory), "
                     "traffic over TCP (NET/Socket) or a congested or misconfigured fabric would each do it")
            remedies = ["run it again with NCCL_DEBUG=INFO and import that log (`gputopo import nccl-debug`): it "
                        "names the NICs and transport NCCL used (NET/IB, GDRDMA) per channel",
                        "check every host's ports (ibstat: State Active, Rate) and the fabric between them "
                        "(ib_write_bw between the two hosts)"]
        elif not wj.class_known:
            # an MNNVL row offered to a series whose link is unknown: said, not called a fault
            severity, told = "info", "; the link between the hosts is not in this output"
            evidence["link_known"] = False
            cause = UNKNOWN_TRAY_LINK
            remedies = ["check that the hosts share one NVLink domain (nvidia-smi -q: Fabric, Clique Id) "
                        "and that NCCL uses it (NCCL_DEBUG=INFO names MNNVL)"]
        elif facts.is_nvlink:
            cause = "the NVLink pair runs below its rate: links down or retraining, link errors, or a slow GPU"
            remedies = [REMEDY_NVLINK]
        elif facts.p2p_not_ok:
            cause = "NVML does not allow P2P here: the driver stages the copies through host memory"
            remedies = ["check BIOS/driver P2P settings (nvidia-smi topo -p2p r)"]
        elif facts.acs_bridges or facts.iommu_translated:
            cause, remedies = peer_path_broken(facts, "slow")
        elif facts.iommu_mode is None and not facts.acs_known:
            # an import (or a topology from `nvidia-smi topo -m` text): no host fact was read
            cause = ("not known from this input: the host facts on this path (IOMMU mode, ACS redirect, the PCIe "
                     "links' width and generation) were not read; a congested or downtrained link, or peer traffic "
                     "routed through the root complex, would each do it, and a scan of the machine tells which")
            remedies = ["run `gputopo scan` on the machine (or import again with --topo of its `gputopo scan "
                        "--json`): its PCIe width/generation, IOMMU mode and ACS bridges"]
        else:
            cause = ("the PCIe path runs below its rate with no IOMMU translation and no ACS redirect read on it: "
                     "a congested or downtrained link, or peer traffic routed through the root complex")
            remedies = ["compare with `gputopo scan` (PCIe width/generation under load)"]
            if not facts.acs_known:
                remedies.append(REMEDY_ACS)
        out.append(Finding(
            "slow", severity,
            f"{_job_text(pair, topo) if wj.basis == 'nics' else _pair_text(pair, lc)}: {worst.series} {worst.direction or ''} {worst.gbps:.3g} GB/s "
            f"{worst.metric} = {wj.fraction:.0%} of {wj.text} (below {wj.threshold:.0%}){told}".replace("  ", " "),
            gpus=list(pair), link_class=lc, evidence=evidence, cause=cause, remedies=remedies))
    return out


def staged_findings(measurements: List[Measurement], topo: Optional[Topology]) -> List[Finding]:
    """Peer copies slower than staged copies at the same size, per pair and direction."""
    p2p: Dict[tuple, Measurement] = {}
    staged: Dict[tuple, Measurement] = {}
    for m in measurements:
        if not m.of_gpus or m.size_bytes < BANDWIDTH_MIN_SIZE_BYTES:
            continue
        if m.test not in ("p2p.copy", "p2p.staged") or measured_gbps(m) is None:
            continue
        key = (tuple(m.gpus), m.direction, m.size_bytes)
        (p2p if m.test == "p2p.copy" else staged)[key] = m
    best: Dict[tuple, tuple] = {}  # (pair, direction) -> (size, p2p m, staged m)
    for key, mp in p2p.items():
        ms = staged.get(key)
        if ms is None:
            continue
        gpus, direction, size = key
        cur = best.get((gpus, direction))
        if cur is None or size > cur[0]:
            best[(gpus, direction)] = (size, mp, ms)
    hits: Dict[tuple, List[dict]] = defaultdict(list)
    lcs: Dict[tuple, Optional[str]] = {}
    for (gpus, direction), (size, mp, ms) in best.items():
        gp, gs = measured_gbps(mp), measured_gbps(ms)
        if gp is None or gs is None:  # (left out above)
            continue
        if gp < STAGED_RATIO * gs:
            pair = tuple(sorted(gpus))
            hits[pair].append({"direction": direction, "size_bytes": size, "p2p_gbps": round(gp, 3),
                               "staged_gbps": round(gs, 3), "ratio": round(gp / gs, 3),
                               "peer_access": mp.extra.get("peer_access")})
            lcs[pair] = link_class_of(topo, mp)
    out = []
    for pair, items in sorted(hits.items()):
        worst = min(items, key=lambda d: d["ratio"])
        lc = lcs[pair]
        facts = path_facts(topo, list(pair), lc)
        ref = closest_reference("p2p.copy", 2, lc, gpu_names(topo, pair), platform_of(topo))
        if ref is not None and ref.metric == "algbw" and worst["p2p_gbps"] >= REFERENCE_FRACTION * ref.gbps:
            # the peer path is as fast as healthy machines of this kind publish (GPUs across the
            # sockets of an Intel host): staging beating it is how they behave, not a fault
            out.append(Finding(
                "p2p-slower-than-staged", "info",
                f"{_pair_text(pair, lc)}: peer copy {worst['direction'] or ''} {worst['p2p_gbps']:.3g} GB/s is "
                f"slower than staging through host memory ({worst['staged_gbps']:.3g} GB/s, "
                f"{worst['ratio']:.0%}), as on healthy machines of this kind: {worst['p2p_gbps'] / ref.gbps:.0%} "
                f"of the {ref.gbps:g} GB/s {ref.metric} published for {ref.machine} ({ref.tool}; "
                f"{ref.source})".replace("  ", " "),
                gpus=list(pair), link_class=lc,
                evidence={"threshold_ratio": STAGED_RATIO, "measured": items, "reference": ref.to_json(),
                          **facts.evidence()},
                cause="peer-to-peer over this path is slow by design on this platform (published figure "
                      "above); copies through host memory are faster here",
                remedies=["keep NCCL's default route on this pair (host memory; no NCCL_P2P_LEVEL=SYS)",
                          "prefer GPUs of one socket for nn.DataParallel, whose raw peer copies take this path"]))
            continue
        if any(d.get("peer_access") is False for d in items):
            cause = "peer access is not enabled for this pair: the driver stages 'peer' copies itself, twice"
            remedies = ["check NVML P2P status (nvidia-smi topo -p2p r) and BIOS P2P settings", REMEDY_NCCL_P2P]
        else:
            cause, remedies = peer_path_broken(facts, "slower than staging through host memory")
        out.append(Finding(
            "p2p-slower-than-staged", "warning",
            f"{_pair_text(pair, lc)}: peer copy {worst['direction'] or ''} {worst['p2p_gbps']:.3g} GB/s is "
            f"slower than staging through host memory ({worst['staged_gbps']:.3g} GB/s, "
            f"{worst['ratio']:.0%})".replace("  ", " "),
            gpus=list(pair), link_class=lc,
            evidence={"threshold_ratio": STAGED_RATIO, "measured": items, **facts.evidence()},
            cause=cause, remedies=remedies))
    return out
