"""The localised findings themselves: one builder per culprit (a GPU, a link, the whole machine,
a killed worker) and the words their messages and reasoning are made of. The reasoning that
picks the culprit is gputopo.report.why.localise's.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Set, Tuple

from gputopo.model import Finding, LinkClass
from gputopo.model.finding import gpu_ranges

from .causes import REMEDY_AVOID, REMEDY_GPU_HEALTH, REMEDY_NVLINK, path_facts
from ..step_failures import kill_reason_cause

Pair = Tuple[int, int]

#: How each kind reads in a localised message.
KIND_WORDS = {"corrupt": "wrong data", "nan": "NaN in training", "diverged": "diverging training",
              "hang": "hangs", "crash": "crashes", "slow": "below the link's rate",
              "outlier": "below its class median", "p2p-slower-than-staged": "peer copies slower than staged"}
#: A crash whose process the kernel killed, or that ran out of memory: not the link's doing.
KILLED = re.compile(r"SIGKILL|CUDA out of memory|OutOfMemoryError|out of memory|MemoryError|oom[- ]kill",
                    re.IGNORECASE)
REMEDY_XID = ("read the GPU's health: `nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT` "
              "(uncorrectable ECC, pending remapped rows), Xid errors in `dmesg`; run `dcgmi diag -r 3`")


def killed(f: Finding) -> Optional[str]:
    """The reason a crash was the kernel's doing (SIGKILL, out of memory), else None."""
    ev = f.evidence or {}
    texts = [f.message, str(ev.get("error") or ""), str(ev.get("stderr_tail") or "")[-2000:]]
    if ev.get("exitcode") == -9:
        return "killed by SIGKILL"
    m = next((KILLED.search(t) for t in texts if KILLED.search(t)), None)
    return m.group(0) if m else None


def gpu_fault(family, g, pairs, fs, own, classes, partners, all_measured) -> Finding:
    staged_bad = bool(own) or any(t.get("path") == "staged" for f in fs for t in (f.evidence or {}).get("tests", {}).values())
    staged_ok = any("p2p.staged" in (f.evidence or {}).get("clean_tests", []) for f in fs)
    where = f"{'all ' if all_measured else ''}{len(pairs)} of its pairs" + (f" over {', '.join(classes)}" if classes else "")
    reasoning = [f"every bad pair of this kind has GPU {g}: {pair_list_text(pairs)}",
                 ("all of GPU {g}'s measured pairs are bad" if all_measured else
                  f"GPU {g} is the one GPU its failed pairs share").format(g=g),
                 f"its partners {gpu_ranges(partners)} are fine with the other GPUs"]
    if family == "data":
        if staged_bad:
            msg = f"GPU {g} corrupts on every path ({where}, and copies through host memory): suspect its memory"
            reasoning.append("copies through host memory (no peer DMA) are wrong too: the GPU itself, not a link")
            cause = f"GPU {g} itself: its memory (uncorrectable ECC errors, rows to remap) or its own PCIe link"
        else:
            msg = (f"GPU {g} corrupts on every peer path ({where})"
                   + ("; its copies through host memory are correct" if staged_ok else "")
                   + ": suspect the GPU, not the links")
            reasoning.append("copies through host memory were correct" if staged_ok
                             else "copies through host memory were not measured")
            cause = f"GPU {g} itself: its peer DMA engine, its memory, or its own PCIe link"
        remedies = [REMEDY_XID, f"leave GPU {g} out: gputopo place N --exclude {g}"]
    elif family == "failure":
        msg = f"GPU {g}: steps {' and '.join(kinds(fs))} on {where}: the GPU they share, not the links"
        cause = f"GPU {g} (driver state, Xid errors, a GPU that stops responding)"
        remedies = [REMEDY_XID, f"leave GPU {g} out: gputopo place N --exclude {g}"]
    else:
        msg = f"GPU {g} is slow on {where}: the GPU or its own link, not each pair's link"
        cause = f"GPU {g}: clocks throttled (power, thermal), or its own PCIe link"
        remedies = ["check `nvidia-smi -q -d PERFORMANCE,CLOCK` (throttle reasons) and `gputopo scan`",
                    f"leave GPU {g} out: gputopo place N --exclude {g}"]
    sev = "error" if any(f.severity == "error" for f in fs) else "warning"
    return made("gpu-fault", sev, msg, [g], None, fs, reasoning, culprit="gpu", cause=cause, remedies=remedies,
                 extra={"pairs": [list(p) for p in pairs], "staged_bad": staged_bad})


def link_fault(family, pair, fs, ok_i, ok_j, topo, lc) -> Finding:
    i, j = pair
    reasoning = [f"GPUs {i},{j} together: {symptoms(fs)}",
                 f"GPU {i} is fine with {gpu_ranges(ok_i)}", f"GPU {j} is fine with {gpu_ranges(ok_j)}"]
    facts = path_facts(topo, [i, j], lc)
    if family == "speed" or not facts.is_nvlink:
        cause, remedies = fs[0].cause, list(fs[0].remedies)
    else:
        cause, remedies = "this NVLink connection (bridge, cable, or the link's lanes)", [REMEDY_NVLINK, REMEDY_AVOID]
    sev = "error" if any(f.severity == "error" for f in fs) else "warning"
    return made("link-fault", sev,
                 f"GPUs {i},{j} ({lc or '?'}): {symptoms(fs)} on this pair only, both GPUs are fine with "
                 "others: the link between them", [i, j], lc, fs, reasoning, culprit="link",
                 cause=cause, remedies=remedies)


def machine_wide(family, left) -> Finding:
    fs = [f for p in sorted(left) for f in left[p]]
    return made("class-fault", "error" if any(f.severity == "error" for f in fs) else "warning",
                 f"every measured pair ({len(left)}) shows {symptoms(fs)}: not one GPU, link or class",
                 sorted({g for p in left for g in p}), None, fs,
                 ["no measured pair is clean, so nothing contrasts: the driver, the host, or the job itself"],
                 culprit="machine", cause="something all pairs share: the driver, the host, or the test setup",
                 remedies=[REMEDY_GPU_HEALTH, "rerun one pair alone (gputopo bench --pairs I,J) to compare"])


def killed_finding(f: Finding) -> Finding:
    reason = killed(f)
    if reason is None:
        raise ValueError(f"not a finding of a killed worker: {f.message}")
    culprit, cause, remedies = kill_reason_cause(reason)
    where = gpu_ranges(f.gpus) if f.gpus else "?"
    what = "ran out of host memory" if culprit == "host-memory" and "SIGKILL" not in reason else \
        "was killed by SIGKILL" if culprit == "host-memory" else "ran out of GPU memory"
    return made("worker-killed", "warning",
                f"GPUs {where}: the worker {what} ({reason}): not a link fault", f.gpus, f.link_class, [f],
                ["a process killed by the kernel or out of memory says nothing about the link it was on"],
                culprit=culprit, cause=cause, remedies=remedies)


def made(kind, severity, message, gpus, link_class, fs, reasoning, *, culprit, cause, remedies, extra=None):
    """A localised finding; ``_explains`` holds the findings until finish() turns them into JSON."""
    ev = {"culprit": culprit, "reasoning": reasoning, "symptoms": sorted({f.kind for f in fs}),
          **(extra or {}), "_explains": list({id(f): f for f in fs}.values())}
    return Finding(kind, severity, message, gpus=gpus, link_class=link_class, evidence=ev, cause=cause,
                   remedies=list(dict.fromkeys(remedies)))


def symptoms(fs: List[Finding]) -> str:
    """'wrong data' for one pair; 'wrong data on 16, NaN in training on 8' for several."""
    by_kind: Dict[str, Set] = {}
    for f in fs:
        if f.kind in KIND_WORDS:
            by_kind.setdefault(f.kind, set()).add(tuple(f.gpus or ()))
    if len({p for ps in by_kind.values() for p in ps}) <= 1:
        return " and ".join(KIND_WORDS[k] for k in by_kind)
    return ", ".join(f"{KIND_WORDS[k]} on {len(ps)}" for k, ps in by_kind.items())


def kinds(fs: List[Finding]) -> List[str]:
    """'hang', 'crash' as verbs: 'hang', 'crash'; other kinds in words."""
    return [{"hang": "hang", "crash": "crash"}.get(k, KIND_WORDS.get(k, k)) for k in dict.fromkeys(f.kind for f in fs)]


def staged_only(fs: List[Finding]) -> bool:
    """Whether a pair is slow only in copies through host memory (each GPU's own PCIe link)."""
    series = {m.get("series") for f in fs for m in (f.evidence or {}).get("measured", [])}
    return bool(series) and series <= {"p2p.staged"}


def figures_text(mine: Dict[Pair, List[Finding]]) -> str:
    """'0,6 1,6 2,6 (25 % of the SYS median), 4,6 5,6 (25-26 % of the NODE median)'."""
    groups: Dict[str, List[Tuple[Pair, Optional[float]]]] = {}
    for p, fs in sorted(mine.items()):
        unit, ratio = speed_figure(fs)
        groups.setdefault(unit or "", []).append((p, ratio))
    parts = []
    for unit, items in groups.items():
        text = pair_list_text([p for p, _ in items])
        ratios = sorted(r for _, r in items if r is not None)
        if ratios:
            lo, hi = f"{ratios[0]:.0%}", f"{ratios[-1]:.0%}"
            text += f" ({lo if lo == hi else lo[:-1] + '-' + hi} of {unit})"
        parts.append(text)
    return ", ".join(parts)


def pair_list_text(pairs) -> str:
    return " ".join(f"{a},{b}" for a, b in pairs)


def symptom_verb(family: str) -> str:
    return {"data": "corrupting data", "failure": "failing (hangs/crashes)", "speed": "slow"}[family]


def class_rank(lc: str):
    try:
        return LinkClass.parse(lc).rank
    except ValueError:
        return (99, 0)


def width_text(s: Finding) -> str:
    ev = s.evidence or {}
    return f"trained at x{ev.get('width_current')} of x{ev.get('width_max')}"


def speed_figure(fs: List[Finding]) -> Tuple[Optional[str], Optional[float]]:
    """('the NODE median', 0.25) / ("the link's rate", 0.4) from an outlier or slow finding."""
    for f in fs:
        for m in (f.evidence or {}).get("measured", []):
            if "ratio" in m and "class_median_gbps" in m:
                series = "" if m.get("series") == "p2p.copy" else f" in {m.get('series')}"
                return f"the {f.link_class} median{series}", m["ratio"]
    for f in fs:
        for m in (f.evidence or {}).get("measured", []):
            if "efficiency" in m:
                return "the link's rate", m["efficiency"]
    return None, None


def step_failure_cause(run, f: Finding):
    """A default explanation for a hang or crash without one (a SIGKILL has its own); ``run``: the
    run folder (gputopo.report.run_folder.Run) whose topology holds the path's host facts."""
    reason = killed(f) if f.kind == "crash" else None
    if reason:  # the kernel killed it or memory ran out: the host's doing, not the link's
        _, cause, remedies = kill_reason_cause(reason)
        return cause, remedies
    facts = path_facts(run.topology, f.gpus or [], f.link_class)
    suspects = []
    if facts.iommu_translated:
        suspects.append("IOMMU faults on peer DMA (look for DMAR / AMD-Vi messages in dmesg)")
    if facts.acs_bridges:
        suspects.append(f"peer requests redirected by ACS on bridge(s) {', '.join(facts.acs_bridges)} and never completed")
    if f.kind == "hang":
        cause = "a transfer or collective never completed" + ("; suspects: " + "; ".join(suspects) if suspects else
                                                              ": a peer path that drops requests, or a driver/GPU hang")
        remedies = ["check `dmesg` for Xid and IOMMU fault messages",
                    "rerun the pair alone (gputopo bench --pairs I,J) with NCCL_DEBUG=INFO",
                    "set NCCL_P2P_DISABLE=1 to see whether the peer path is the cause"]
    else:
        cause = "the worker process died" + ("; suspects: " + "; ".join(suspects) if suspects else
                                             " (see the run folder's workers/*.log)")
        remedies = ["read the worker log in the run folder (workers/*.log)",
                    "check `dmesg` for Xid errors of these GPUs"]
    return cause, remedies
