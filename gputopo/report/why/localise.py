"""From every pair's findings to the smallest culprit that explains them: one GPU, one link,
a link class (the host's peer path), or a cause the scan already saw.

The per-pair findings say *where* something went wrong; a user wants to know *what* is broken.
Seven bad pairs that all share GPU 2 are one faulty GPU, not seven faulty links; sixteen bad
SYS pairs while every NVLink and NODE pair is fine are the host's PCIe peer path (IOMMU/ACS),
not sixteen links. The reasoning is by contrast, per kind of symptom (wrong data, failed
steps, low bandwidth), over the pairs that were measured:

1. a worker the kernel killed (SIGKILL, out of memory) is taken out first: never a link fault;
2. cause chains: a slow pair whose GPU the scan saw on a narrowed PCIe link, with NVLinks down
   or link errors, is explained by that GPU's link ("4,6 at 25 % because GPU 6 trained at x4");
3. a GPU all of whose measured pairs (at least two) are bad, while other pairs are good, is the
   GPU; for hangs and crashes also several failed pairs that all share one GPU;
4. a link class all of whose measured pairs are bad (some not yet explained by a GPU), while
   pairs of other classes are good, is the class (for PCIe classes: the host's peer path, tied
   to the IOMMU/ACS facts);
5. a bad pair whose GPUs are both fine with other GPUs is the link between them.

Each localised finding (kinds `gpu-fault`, `link-fault`, `class-fault`, `worker-killed`) keeps
the findings it explains in ``evidence.explains``, and each explained finding gets the
localised finding's id in ``evidence.explained_by``; nothing is dropped, so rules and scripts
that read per-pair kinds keep working.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Dict, Iterable, List, Optional, Set, Tuple

from gputopo.model import Finding, Measurement, Topology
from gputopo.model.finding import gpu_ranges
from gputopo.model.finding_kinds import SYMPTOM_FAMILIES, spec, symptom
from gputopo.model.finding_kinds import family as family_of

from .causes import REMEDY_AVOID, REMEDY_GPU_HEALTH, REMEDY_NVLINK, path_facts, peer_path_broken
from .culprits import (figures_text, gpu_fault, killed, killed_finding, link_fault, machine_wide, made,
                       pair_list_text, class_rank, staged_only, symptom_verb, symptoms, width_text)
from ..pairs import gpu_finding_touches

# The kinds this module adds are the table's ``culprit`` kinds; the symptom families it localises
# separately (a corrupting GPU and a slow link are two faults) its ``symptom``; the scan findings
# of one GPU's own links that explain slow pairs over those links its ``explains_slow``
# (gputopo/model/finding_kinds.py).

Pair = Tuple[int, int]


def finding_id(f: Finding) -> str:
    """How an explained finding names its localised finding: 'gpu-fault:2', 'class-fault:SYS'."""
    if f.kind == "class-fault" or not f.gpus:
        where = f.link_class or "machine"
    else:
        where = ",".join(map(str, f.gpus)) if len(f.gpus) == 2 else gpu_ranges(f.gpus)
    return f"{f.kind}:{where}"


def _pair(f: Finding) -> Optional[Pair]:
    return (min(f.gpus), max(f.gpus)) if f.gpus and len(f.gpus) == 2 else None


def _hardware_symptom(f: Finding) -> bool:
    """Errors/warnings of a symptom kind that speak about the hardware (not the reference run,
    not a difference by design, not a killed worker)."""
    if f.severity not in ("error", "warning"):
        return False
    if family_of(f.kind) == "numerics" and (f.severity != "error" or (f.cause or "").startswith("the single-GPU")):
        return False
    return not (f.kind == "crash" and killed(f))


def evidence_pairs(measurements: Iterable[Measurement], numerics: Iterable[dict],
                   findings: Iterable[Finding]) -> Dict[str, Set[Pair]]:
    """Pairs with evidence for each symptom family: data and failures wherever anything ran;
    speed where a GPU link's timing was measured (figures of GPUs, not of CPU processes standing
    in)."""
    ran: Set[Pair] = set()
    timed: Set[Pair] = set()
    for m in measurements:
        if len(m.gpus) == 2 and m.error is None:
            p = (min(m.gpus), max(m.gpus))
            ran.add(p)
            if m.of_gpus:
                timed.add(p)
    for rec in numerics:
        g = sorted(int(x) for x in rec.get("gpus") or [])
        if len(g) == 2:
            ran.add((g[0], g[1]))
    failed = {p for f in findings if symptom(f.kind) == "failure" for p in [_pair(f)] if p is not None}
    return {"data": ran, "failure": ran | failed, "speed": timed}


def class_by_pair(topo: Optional[Topology], measurements: Iterable[Measurement],
                 findings: Iterable[Finding]) -> Dict[Pair, str]:
    """Each pair's link class: the topology's, else what its measurements or findings recorded."""
    out: Dict[Pair, str] = {}
    for f in findings:
        fp = _pair(f)
        if fp and f.link_class:
            out[fp] = f.link_class
    for m in measurements:
        if len(m.gpus) == 2 and m.link_class:
            out[(min(m.gpus), max(m.gpus))] = m.link_class
    if topo is not None:
        for p in topo.pairs:
            out[(min(p.gpus), max(p.gpus))] = str(p.link_class)
    return out


def localise(findings: List[Finding], topo: Optional[Topology], measurements: List[Measurement],
             numerics: List[dict]) -> List[Finding]:
    """The localised findings for ``findings`` (the analysis' per-pair and scan findings)."""
    measured = evidence_pairs(measurements, numerics, findings)
    classes = class_by_pair(topo, measurements, findings)
    out: List[Finding] = [killed_finding(f) for f in findings
                          if f.kind == "crash" and f.severity == "error" and killed(f)]
    for family in SYMPTOM_FAMILIES:
        bad: Dict[Pair, List[Finding]] = defaultdict(list)
        for f in findings:
            fp = _pair(f)
            if symptom(f.kind) == family and fp and _hardware_symptom(f):
                bad[fp].append(f)
        if bad:
            out += _localise_family(family, bad, measured[family] | set(bad), findings, topo, classes)
    return out


def mark_explained(findings: List[Finding], localised: List[Finding]) -> List[Finding]:
    """``findings`` with ``evidence.explained_by`` naming the localised findings of each."""
    by_id: Dict[int, List[str]] = defaultdict(list)
    for lf in localised:
        for f in lf.evidence.get("_explains", []):
            by_id[id(f)].append(finding_id(lf))
    out = []
    for f in findings:
        ids = by_id.get(id(f))
        out.append(dataclasses.replace(f, evidence={**f.evidence, "explained_by": ids}) if ids else f)
    return out


def with_explained(localised: List[Finding]) -> List[Finding]:
    """The localised findings with their explained findings as JSON (``evidence.explains``)."""
    out = []
    for lf in localised:
        ev = dict(lf.evidence)
        fs = ev.pop("_explains", [])
        ev["explains"] = [{k: v for k, v in f.to_json().items() if k not in ("cause", "remedies")} for f in fs]
        out.append(dataclasses.replace(lf, evidence=ev))
    return out


# --- the steps --------------------------------------------------------------------------------

def _localise_family(family: str, bad: Dict[Pair, List[Finding]], measured: Set[Pair],
                     findings: List[Finding], topo: Optional[Topology], classes: Dict[Pair, str]) -> List[Finding]:
    out: List[Finding] = []
    left = dict(bad)
    good = measured - set(bad)
    if family == "speed":
        out += _chains(left, findings, topo)
    if not good:
        if len(left) >= 3:
            out.append(machine_wide(family, left))
        return out
    # A GPU whose measured pairs all lie in classes bad on every measured pair is no culprit
    # by itself: the class explains it (an interrupted run that measured only GPU 0's and 1's
    # pairs would otherwise blame every other GPU for the host path's fault).
    in_bad_class = {p for lc in _fully_bad_classes(bad, measured, classes) for p in measured
                    if classes.get(p) == lc}
    out += _gpus(family, left, bad, measured, findings, topo, in_bad_class)
    out += _classes(family, left, bad, measured, findings, topo, classes)
    fine_with: Dict[int, Set[int]] = defaultdict(set)
    for a, b in good:
        fine_with[a].add(b)
        fine_with[b].add(a)
    for pair in sorted(left):
        i, j = pair
        ok_i, ok_j = sorted(fine_with[i]), sorted(fine_with[j])
        if ok_i and ok_j:
            out.append(link_fault(family, pair, left[pair], ok_i, ok_j, topo, classes.get(pair)))
    return out


def _chains(left: Dict[Pair, List[Finding]], findings: List[Finding], topo) -> List[Finding]:
    """Slow pairs over a GPU link the scan saw narrowed, down or erring: that link is the cause."""
    out = []
    for s in findings:
        if not spec(s.kind).explains_slow or s.severity == "info" or not s.gpus or len(s.gpus) != 1:
            continue
        mine = {p: fs for p, fs in left.items()
                if s.gpus[0] in p and (gpu_finding_touches(topo, s, p, fs[0].link_class)
                                       or (s.kind == "pcie-downgraded" and staged_only(fs)))}
        if not mine:
            continue
        g = s.gpus[0]
        listed = figures_text(mine)
        what = {"pcie-downgraded": width_text(s), "nvlink-down": "has NVLinks down",
                "link-errors": "has link errors"}[s.kind]
        out.append(made("gpu-fault", "warning",
                         f"GPU {g} {what}: pair{'s' if len(mine) > 1 else ''} {listed} "
                         f"{'are' if len(mine) > 1 else 'is'} slow because of it, not because of the link between the GPUs",
                         [g], None, [s] + [f for fs in mine.values() for f in fs],
                         ["the scan found this GPU's own link in a degraded state: " + s.message,
                          f"the slow pairs are the ones whose traffic uses that link: {pair_list_text(sorted(mine))}"],
                         culprit="gpu-pcie-link" if s.kind == "pcie-downgraded" else "gpu-nvlinks",
                         cause=s.cause, remedies=list(s.remedies) or [REMEDY_NVLINK]))
        for p in mine:
            left.pop(p, None)
    return out


def _fully_bad_classes(bad, measured: Set[Pair], classes: Dict[Pair, str]) -> List[str]:
    """Classes with at least 2 measured pairs, all bad, not all sharing one GPU (none while a
    measured pair's class is unknown)."""
    if any(p not in classes for p in measured):
        return []
    by_class: Dict[str, List[Pair]] = defaultdict(list)
    for p in measured:
        by_class[classes[p]].append(p)
    return sorted((lc for lc, ps in by_class.items()
                   if len(ps) >= 2 and all(p in bad for p in ps)
                   and not set.intersection(*(set(p) for p in ps))), key=class_rank)


def _classes(family, left, bad, measured, findings, topo, classes) -> List[Finding]:
    """Fully bad classes (at least 2 measured pairs, not all sharing one GPU); fully bad PCIe
    classes are one host-path finding. No class is judged while a measured pair's is unknown."""
    by_class: Dict[str, List[Pair]] = defaultdict(list)
    for p in measured:
        by_class[classes.get(p, "?")].append(p)
    full = [lc for lc in _fully_bad_classes(bad, measured, classes)
            if any(p in left for p in by_class[lc])]
    if not full:
        return []
    groups = [[lc] for lc in full if lc.startswith("NV")]
    pcie = [lc for lc in full if not lc.startswith("NV")]
    if pcie:
        groups.append(pcie)
    out = []
    fine = sorted({lc for lc, ps in by_class.items() if lc not in full and not all(p in bad for p in ps)}, key=class_rank)
    for group in groups:
        pairs = sorted(p for lc in group for p in by_class[lc])
        fs = [f for p in pairs for f in bad[p]]
        gpus = sorted({g for p in pairs for g in p})
        lc_text = ",".join(group)
        facts = path_facts(topo, gpus, group[-1])
        is_nv = group[0].startswith("NV")
        symptom = symptoms(fs)
        if is_nv:
            cause, remedies = ("every NVLink pair of this class is bad: the NVLink fabric (NVSwitch, "
                               "fabric manager, driver) rather than one link", [REMEDY_NVLINK, REMEDY_GPU_HEALTH])
        else:
            cause, remedies = peer_path_broken(facts, symptom_verb(family), group if len(group) > 1 else ())
            remedies = remedies + [REMEDY_AVOID + "; `gputopo place N` picks them"]
        reasoning = [f"all {len(pairs)} measured {lc_text} pairs are bad",
                     ("pairs of the other classes are fine: " + ", ".join(fine)) if fine else "no other class was clean",
                     "the pairs share no one GPU: the path, not a GPU"]
        host = facts.evidence()
        # ACS between a GPU and its NIC (evidence "nic") bears on GPUDirect RDMA, not on GPU pairs
        scan = [] if is_nv else [f for f in findings if spec(f.kind).breaks_peer_dma and "nic" not in f.evidence]
        if scan:
            reasoning.append("the scan saw what breaks PCIe peer DMA on this host: "
                             + "; ".join(f.message.split(":")[0] for f in scan))
        what = "the host's PCIe peer path" if not is_nv else "the NVLink fabric"
        out.append(made("class-fault", "error" if any(f.severity == "error" for f in fs) else "warning",
                         f"every {' and '.join(group)} pair is bad ({len(pairs)} measured: {symptom})"
                         + (f" while {' and '.join(fine)} pairs are fine" if fine else "") + f": {what}, not the GPUs",
                         gpus, lc_text, fs + scan, reasoning, culprit="class" if is_nv else "host-path",
                         cause=cause, remedies=remedies, extra={"link_classes": group, **host}))
        for p in pairs:
            left.pop(p, None)
    return out


def _gpus(family, left, bad, measured, findings, topo, in_bad_class=frozenset()) -> List[Finding]:
    out = []
    gpus = sorted({g for p in measured for g in p})
    by_gpu: Dict[int, List[Pair]] = defaultdict(list)
    for p in measured:
        by_gpu[p[0]].append(p)
        by_gpu[p[1]].append(p)
    candidates = [g for g in gpus if len(by_gpu[g]) >= 2 and all(p in bad for p in by_gpu[g])
                  and any(p in left for p in by_gpu[g])
                  and not all(p in in_bad_class for p in by_gpu[g])]
    culprits: List[int] = []  # most bad pairs first; one whose pairs all meet a culprit is not one
    for g in sorted(candidates, key=lambda g: (-len(by_gpu[g]), g)):
        if any(p in left and not set(p) & set(culprits) for p in by_gpu[g]):
            culprits.append(g)
    if not culprits and family == "failure" and len(left) >= 2:
        shared = set.intersection(*(set(p) for p in left))
        culprits = sorted(shared)[:1]
    for g in culprits:
        mine = sorted(by_gpu[g])
        fs = [f for p in mine for f in bad[p]]
        own = [f for f in findings if f.kind == "corrupt" and f.gpus == [g]] if family == "data" else []
        classes = sorted({f.link_class for f in fs if f.link_class}, key=class_rank)
        partners = sorted({x for p in mine for x in p if x != g})
        all_measured = all(p in bad for p in by_gpu[g])
        out.append(gpu_fault(family, g, mine, fs + own, own, classes, partners, all_measured))
        for p in mine:
            left.pop(p, None)
    return out


