"""The story told at the top of every report, worst first: each GPU whose own links are faulty,
each broken or degraded link class with what went wrong on how many of its pairs (and
DataParallel against DDP), the host facts, the run's data problems, then what is fine.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from gputopo.model import Finding
from gputopo.model.finding import gpu_ranges
from gputopo.model.finding_kinds import family, is_data_trouble
from gputopo.report.why.localise import finding_id
from gputopo.report.nccl_routes import ddp_survived_clause
from gputopo.report.summary import Summary

from .cell_text import gbps, gpus_text, group_findings, group_where, message_head, pct
from gputopo.report.pairs import names_each_gpu
from gputopo.report.why.diagnosis import explained, is_localised, localised_story
from .bridge_names import BRIDGES, bridge_key
from gputopo.report.why.explain import Explanation, explanations


@dataclass
class StoryItem:
    """One point of the story told at the top of every report: what is wrong (or fine), where,
    the likely cause and what to do."""

    severity: str  # "error" | "warning" | "ok" | "info"
    text: str
    cause: Optional[str] = None
    remedies: List[str] = field(default_factory=list)
    findings: List[Finding] = field(default_factory=list)  # the findings this point tells
    details: List[str] = field(default_factory=list)  # why, and the findings underneath


_SEV_RANK = {"error": 0, "warning": 1, "ok": 2, "info": 3}
WAY_WORDS = {"dp": "nn.DataParallel", "ddp": "DDP", "reference": "the one-GPU reference"}
VERDICT_WORDS = {"nan": "went NaN", "diverged": "diverged", "hang": "hung", "crash": "crashed"}
#: How a finding kind reads in "<class>: broken on N pairs: <words> on M".
KIND_WORDS = {"slow": "below the link's expected rate", "outlier": "below the class median",
              "p2p-slower-than-staged": "peer copies slower than copies staged through host memory",
              "hang": "a step hung", "crash": "a worker crashed", "p2p-unsupported": "P2P not OK in NVML",
              "noisy": "noisy timings"}


def pairs_text(pairs, limit: int = 16) -> str:
    """'every pair between GPUs 0-3 and GPUs 4-7' for a complete block, else the pairs listed."""
    pairs = sorted(tuple(p) for p in pairs)
    a, b = sorted({p[0] for p in pairs}), sorted({p[1] for p in pairs})
    if len(pairs) > 2 and not set(a) & set(b) and len(pairs) == len(a) * len(b):
        return f"every pair between GPUs {gpu_ranges(a)} and GPUs {gpu_ranges(b)}"
    txt = " ".join(gpus_text(p) for p in pairs[:limit])
    return txt + (f" and {len(pairs) - limit} more" if len(pairs) > limit else "")


def _count(n: int, total: int) -> str:
    if total <= 1:
        return str(n)
    return f"all {n}" if n == total else f"{n} of {total}"


def _numerics_clause(rows) -> Optional[str]:
    """'nn.DataParallel training went NaN on 8 and diverged on 8; DDP on the same GPUs trained fine'
    (counted over the pairs where some way went bad)."""
    bad_rows = [p for p in rows if any(v in VERDICT_WORDS for v in p.numerics.values())]
    if not bad_rows:
        return None
    order = list(VERDICT_WORDS)
    parts, good = [], []
    for way in ("dp", "ddp"):
        verdicts = [p.numerics[way] for p in bad_rows if way in p.numerics]
        bad = {v: verdicts.count(v) for v in order if v in verdicts}
        if bad:
            parts.append(f"{WAY_WORDS[way]} training " + " and ".join(f"{VERDICT_WORDS[v]} on {n}" for v, n in bad.items()))
        elif verdicts:
            good.append(way)
    txt = "; ".join(parts)
    if good:
        txt += "; " + " and ".join(WAY_WORDS[w] for w in good) + " on the same GPUs trained fine"
    why = ddp_survived_clause(bad_rows)
    if why:
        txt += ": " + why
    return txt


def _nccl_details(summary: Summary, told: List[Finding]) -> List[str]:
    """Why DDP survived where DataParallel did not, for the pairs a culprit's findings name."""
    pairs = {tuple(sorted(f.gpus)) for f in told if family(f.kind) == "numerics" and f.gpus and len(f.gpus) == 2}
    rows = [p for p in summary.pairs if tuple(sorted(p.gpus)) in pairs]
    why = ddp_survived_clause(rows) if rows else None
    return [why] if why else []


def _class_item(summary: Summary, c, exps: List[Explanation], keep=lambda f: True) -> Optional[StoryItem]:
    """The class's story point, told from its findings that ``keep`` accepts."""
    lc = c.link_class
    members = [p for p in summary.pairs if len(p.gpus) == 2 and (p.link_class or "unknown") == lc]
    own = [f for f in c.findings if f.link_class == lc and not is_localised(f) and keep(f)]
    if not own:
        return None  # only a GPU's own finding flags this class: that GPU's item tells it
    own_ids = {id(f) for f in own}
    flagged = [p for p in members if any(id(f) in own_ids for f in p.findings)]
    measured = [p for p in members if p.measured]
    severity = "error" if any(f.severity == "error" for f in own) else "warning"
    text = f"{lc} pairs: {'broken' if severity == 'error' else 'degraded'}"
    if flagged and len(measured) < len(members):
        text += (f" on {pairs_text([p.gpus for p in flagged])} ({len(flagged)} of {len(measured)} measured; "
                 f"the class has {len(members)} pairs)")
    elif flagged:
        text += f" on {_count(len(flagged), len(members))} ({pairs_text([p.gpus for p in flagged])})"
    clauses = []
    kinds: Dict[str, List[Finding]] = {}
    for f in own:
        kinds.setdefault(f.kind, []).append(f)
    for kind, fs in kinds.items():
        if family(kind) == "numerics":
            continue  # told from the numerics verdicts, with the DP vs DDP contrast
        n = len({tuple(sorted(f.gpus)) for f in fs if f.gpus and len(f.gpus) == 2})
        if kind == "corrupt":
            tests = sorted({t for f in fs for t in (f.evidence or {}).get("tests", {})})
            staged_ok = all("p2p.staged" in (f.evidence or {}).get("clean_tests", []) for f in fs)
            clauses.append(f"wrong data on {_count(n, len(flagged))} in " + (", ".join(tests) or "transfers")
                           + (", while copies staged through host memory were correct" if staged_ok else ""))
            continue
        words = KIND_WORDS.get(kind, kind)
        clauses.append(f"{words} on {_count(n, len(flagged))}" if n else words)
    num = _numerics_clause(flagged)
    if num:
        clauses.append(num)
    if clauses:
        text += ": " + "; ".join(clauses)
    mine = [e for e in exps if e.link_class == lc and any(f in own for f in e.findings)]
    worst = [e for e in mine if e.severity == severity] or mine
    cause = next((e.cause for e in worst if e.cause), None)
    return StoryItem(severity, text + ".", cause, _remedies(worst), own)


def _remedies(exps: List[Explanation]) -> List[str]:
    """The remedies of several explanations, once each; a generic 'the bridges between the GPUs'
    remedy is dropped where the same remedy names the bridges."""
    out = list(dict.fromkeys(r for e in exps for r in e.remedies))
    named = {bridge_key(r) for r in out if BRIDGES.search(r)}
    return [r for r in out if bridge_key(r.replace("the bridges between the GPUs", "bridge(s) 00:00.0"))
            not in named or BRIDGES.search(r)]


def _gpus_own(f: Finding) -> bool:
    """A finding about one GPU's own links, or a kind whose one finding names several GPUs that
    way (each GPU's pairs flagged): told as a GPU point of its own."""
    return bool(f.gpus) and (len(f.gpus or []) == 1 or names_each_gpu(f.kind))


def _gpu_item(summary: Summary, group: List[Finding], told: set) -> StoryItem:
    f = group[0]
    text = f.message
    touched = [p for p in summary.pairs if len(p.gpus) == 2 and any(x is f for x in p.findings)]
    key = tuple(p.gpus for p in touched)
    if touched and key in told:
        text += ". The same pairs as above"
    elif touched:
        told.add(key)
        by_class: Dict[str, int] = {}
        for p in touched:
            by_class[p.link_class or "?"] = by_class.get(p.link_class or "?", 0) + 1
        text += (f". Its pair{'s' if len(touched) > 1 else ''} "
                 + " ".join(gpus_text(p.gpus) for p in touched) + " "
                 + ("are" if len(touched) > 1 else "is") + " flagged ("
                 + ", ".join(f"{n} {k}" for k, n in by_class.items()) + ")")
        mine = [p.headline_gbps for p in touched if p.headline_gbps]
        rest = [p.headline_gbps for p in summary.pairs
                if len(p.gpus) == 2 and all(p is not t for t in touched) and p.headline_gbps]
        if mine and rest and statistics.median(mine) < 0.7 * statistics.median(rest):
            text += (f": median {gbps(statistics.median(mine))} GB/s against "
                     f"{gbps(statistics.median(rest))} GB/s for the other pairs")
    return StoryItem(f.severity, text + ".", f.cause, list(f.remedies), list(group))


def _class_fault_of(local: List[StoryItem], findings: List[Finding]) -> Optional[StoryItem]:
    """The class-fault point that explains any of ``findings``."""
    ids = {x for f in findings for x in (f.evidence or {}).get("explained_by") or []}
    return next((lit for lit in local if lit.findings[0].kind == "class-fault"
                 and finding_id(lit.findings[0]) in ids), None)


def _other_text(summary: Summary, other: List[Finding], after_others: bool) -> str:
    """The point telling findings no class, GPU or culprit tells: host settings ("Host: the IOMMU
    translates DMA; ...") by their heads; pair findings whose link class is unknown (an imported
    nccl-tests log without --topo) in full, saying so. "Also:" only after other points."""
    if all((f.evidence or {}).get("tool") for f in other):  # an imported tool's own failure (import_findings.py)
        return "Imported test: " + "; ".join(dict.fromkeys(message_head(f.message) for f in other)) + "."
    if all(not f.gpus or len(f.gpus) > 2 for f in other):
        return "Host: " + "; ".join(dict.fromkeys(f.message.split(": ")[0] for f in other)) + "."
    unknown = list(dict.fromkeys(gpus_text(f.gpus) for f in other if f.gpus and len(f.gpus) == 2
                                 and not f.link_class))
    texts = []
    for group in group_findings(other):
        texts += [f.message for f in group[:3]] + ([f"{len(group) - 3} more alike"] if len(group) > 3 else [])
    text = ("Also: " if after_others else "") + "; ".join(texts) + "."
    if unknown:
        topo = summary.run.topology
        why = "no topology: pass --topo FILE" if not (topo and topo.pairs) else "not in the topology"
        text += (f" The link class of GPUs {' '.join(unknown)} is unknown ({why}), so no path is named"
                 " and no rate is expected.")
    return text


def story(summary: Summary) -> List[StoryItem]:
    """The run in a few points, worst first: each GPU whose own links are faulty, each broken or
    degraded link class with what went wrong on how many of its pairs (and DataParallel against
    DDP), the host facts, then what is fine. (What the GB/s figures are: figures_note.)"""
    exps = explanations(summary.findings)
    local = localised_story(summary.findings, group_where, StoryItem, lambda told: _nccl_details(summary, told))
    items: List[Tuple[tuple, StoryItem]] = [((_SEV_RANK[it.severity], -1, k), it) for k, it in enumerate(local)]
    told: set = set()
    untold = [f for f in summary.findings if not is_localised(f) and not explained(f)]
    for k, group in enumerate(group_findings(untold)):
        f = group[0]
        if f.severity in ("error", "warning") and _gpus_own(f):
            it = _gpu_item(summary, group, told)
            items.append(((_SEV_RANK[it.severity], 0, k), it))
    class_texts: Dict[int, Tuple[StoryItem, str, List[str]]] = {}  # a culprit's classes, each told once
    for k, c in enumerate(summary.classes):
        if c.verdict in ("broken", "degraded"):
            cit = _class_item(summary, c, exps)
            lit = _class_fault_of(local, cit.findings) if cit is not None else None
            if lit is not None:  # the class's own story (e.g. DataParallel against DDP) leads its culprit's
                fid = finding_id(lit.findings[0])
                told_here = _class_item(summary, c, exps, lambda f, fid=fid: fid in ((f.evidence or {}).get("explained_by") or []))
                if told_here is not None:  # none of the class's findings is the culprit's: nothing to tell
                    class_texts.setdefault(id(lit), (lit, lit.text, []))[2].append(told_here.text)
            cit = _class_item(summary, c, exps, lambda f: not explained(f))  # what no culprit explains
            if cit is not None:
                items.append(((_SEV_RANK[cit.severity], 1, k), cit))
    for lit, _own_text, texts in class_texts.values():
        # The root cause leads (its own short text); the class texts are its evidence, below it.
        said = " ".join(texts)
        keep = [d for d in lit.details if not d.startswith("underneath:")  # the class texts list them
                and not (d.startswith("DDP survived") and "DDP survived" in said)]
        why = [d for d in keep if d.startswith("why:")]
        lit.details = why + [f"evidence: {t}" for t in texts] + [d for d in keep if d not in why]
    other = [f for f in untold if f.severity in ("error", "warning") and not is_data_trouble(f.kind)
             and not _gpus_own(f) and (not f.gpus or len(f.gpus) > 2 or (len(f.gpus) == 2 and not f.link_class))]
    if other:
        sev = "error" if any(f.severity == "error" for f in other) else "warning"
        remedied = any(it.remedies for _, it in items)
        mine = [e for e in exps if any(f in other for f in e.findings)]
        items.append(((_SEV_RANK[sev], 2, 0), StoryItem(
            sev, _other_text(summary, other, bool(items)),
            None if remedied else next((e.cause for e in mine if e.cause), None),
            [] if remedied else list(dict.fromkeys(r for e in mine for r in e.remedies)), other)))
    data = [f for f in summary.findings if is_data_trouble(f.kind)]
    for k, f in enumerate(data):
        items.append(((_SEV_RANK[f.severity], 3, k), StoryItem(f.severity, f"Data: {f.message}.", None,
                                                                list(f.remedies), [f])))
    items.sort(key=lambda kv: kv[0])
    out = [it for _, it in items]
    # A class is judged where a transfer completed or a training run reached a verdict on it
    # (a numerics-only run moved its data over the link too), the latter only while the run's
    # data is whole (a lost measurements file leaves the transfers unjudged).
    checked = {lc for p in summary.pairs
               if len(p.gpus) == 2 and (p.checked or (_trained(p) and not data))
               for lc in [p.link_class or "unknown"]}
    # Classes nothing ran on are "not-measured" in the class table already; they are named here
    # too when the run's data is damaged (they may have been measured and lost).
    unjudged = [c for c in summary.classes if c.link_class not in checked
                and (c.verdict == "ok" or (c.verdict == "not-measured" and data))]
    if unjudged:
        out.append(StoryItem("warning", "Links not measured: " + ", ".join(
            f"{c.link_class} ({c.pairs} pair{'s' if c.pairs != 1 else ''})" for c in unjudged)
            + ": no transfer on them completed, so their links are not judged (not called ok)."))
    fine = [c for c in summary.classes if c.verdict == "ok" and c.link_class in checked]
    if fine:
        parts = []
        for c in fine:
            p = f"{c.link_class} ({c.pairs} pair{'s' if c.pairs != 1 else ''}"
            if c.pairs_measured < c.pairs:
                p += f", {c.pairs_measured} measured"
            if c.median_gbps is not None:
                p += f", median {gbps(c.median_gbps)} GB/s"
                if c.expected_gbps and c.efficiency is not None:
                    p += f" = {pct(c.efficiency)} of {gbps(c.expected_gbps)} GB/s"
            parts.append(p + ")")
        every = not out and len(fine) == len(summary.classes)
        head = "Every link class is fine: " if every else "Link classes without problems: "
        if [c.link_class for c in fine] == ["unknown"]:  # no topology (an imported log): no class to call fine
            topo, c = summary.run.topology, fine[0]
            unknown_why = "no topology: pass --topo FILE" if not (topo and topo.pairs) else "not in the topology"
            head = f"No problem found on {c.pairs_measured} pair{'s' if c.pairs_measured != 1 else ''} "
            parts = [f"of unknown link class ({unknown_why})" + (f": median {gbps(c.median_gbps)} GB/s, no rate expected"
                                                         if c.median_gbps is not None else "")]
        if summary.verdict == "not-judged":  # nothing to judge the figures by: no "OK" (issue 46)
            out.append(StoryItem("info", "Measured, not judged (nothing to compare the figures with): "
                                 + head[0].lower() + head[1:] + ", ".join(parts) + "."))
        else:
            out.append(StoryItem("ok", head + ", ".join(parts) + "."))
    nums = [p for p in summary.pairs if len(p.gpus) == 2 and p.numerics]
    good = [p for p in nums if all(v == "ok" for v in p.numerics.values())]
    if good:
        if len(nums) == 1:
            where = "the one pair"
        else:
            where = (f"all {len(nums)}" if len(good) == len(nums) else f"the other {len(good)} of {len(nums)}") + " pairs"
        out.append(StoryItem("ok", f"Training numerics: nn.DataParallel and DDP matched the one-GPU "
                                   f"reference on {where}."))
    return out


def _trained(pair) -> bool:
    """Whether a numerics way ran to a verdict of its numbers on the pair (not hang/crash)."""
    return any(v in ("ok", "nan", "diverged") for v in (pair.numerics or {}).values())
