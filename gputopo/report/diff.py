"""`gputopo diff A B`: what got worse (or better) from run A to run B, per pair and per class.

Regressions: a pair's or a class's bandwidth down by more than a threshold (same series, so
like is compared with like), findings that B has and A had not, verdicts that got worse.
Findings A had and B has not are listed as gone, but only where B measured what A judged them
from: a finding on a pair B never measured (a subset run, a partial one) is "not measured in B",
never "gone". Findings are matched by (kind, GPUs, class).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from gputopo import SCHEMA_VERSION
from gputopo.errors import UsageError
from gputopo.model import Finding
from gputopo.model.finding_kinds import family, is_culprit

from .coverage import unreadable
from .judged import UNJUDGED_VERDICTS
from .machine_identity import machine_differences
from .summary import Summary, summarize_dir

#: Bandwidth down by more than this fraction is a regression (0.10 = 10 %).
DEFAULT_THRESHOLD = 0.10
_VERDICT_ORDER = ("not-measured", "ok", "degraded", "broken")


def finding_key(f: Finding) -> Tuple:
    return (f.kind, tuple(sorted(f.gpus)) if f.gpus else None, f.link_class)


@dataclass
class Change:
    """One compared figure: where (pair or class), which series, before, after."""

    where: str  # "pair 0,1" | "class NV4"
    series: str
    before: float
    after: float

    @property
    def ratio(self) -> float:
        return self.after / self.before if self.before else float("inf")

    def to_json(self) -> dict:
        return {"where": self.where, "series": self.series, "before_gbps": round(self.before, 4),
                "after_gbps": round(self.after, 4), "change": round(self.ratio - 1, 4)}


@dataclass
class RunDiff:
    a: Summary
    b: Summary
    threshold: float
    bandwidth_down: List[Change] = field(default_factory=list)
    bandwidth_up: List[Change] = field(default_factory=list)
    new_findings: List[Finding] = field(default_factory=list)
    gone_findings: List[Finding] = field(default_factory=list)
    #: A's findings on pairs B did not measure (with those pairs): neither gone nor still there.
    unmeasured_findings: List[Tuple[Finding, List[Tuple[int, ...]]]] = field(default_factory=list)
    verdicts_worse: List[dict] = field(default_factory=list)
    verdicts_better: List[dict] = field(default_factory=list)
    only_in_a: List[str] = field(default_factory=list)
    only_in_b: List[str] = field(default_factory=list)
    #: What tells A's machine from B's (empty: the same machine); said at the top of the diff.
    machine_differences: List[str] = field(default_factory=list)
    #: Run verdicts that moved to or from one that judged nothing (``not-judged``,
    #: ``not-measured``): said, never a regression (judged.py).
    notes: List[str] = field(default_factory=list)

    @property
    def regressions(self) -> int:
        serious_new = [f for f in self.new_findings if f.severity in ("error", "warning")]
        return len(self.bandwidth_down) + len(serious_new) + len(self.verdicts_worse)

    @property
    def has_regressions(self) -> bool:
        return self.regressions > 0

    def to_json(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION, "a": str(self.a.run.path), "b": str(self.b.run.path),
            "simulated": {"a": self.a.simulated, "b": self.b.simulated}, "threshold": self.threshold,
            "regressions": self.regressions,
            "bandwidth_down": [c.to_json() for c in self.bandwidth_down],
            "bandwidth_up": [c.to_json() for c in self.bandwidth_up],
            "new_findings": [f.to_json() for f in self.new_findings],
            "gone_findings": [f.to_json() for f in self.gone_findings],
            "not_measured_in_b": [{**f.to_json(), "unmeasured_pairs": [list(g) for g in gs]}
                                  for f, gs in self.unmeasured_findings],
            "verdicts_worse": self.verdicts_worse, "verdicts_better": self.verdicts_better,
            "only_in_a": self.only_in_a, "only_in_b": self.only_in_b,
            "same_machine": not self.machine_differences, "machine_differences": self.machine_differences,
            "verdict": {"a": self.a.verdict, "b": self.b.verdict}, "notes": self.notes,
        }

    def text(self) -> str:
        """Plain text listing, worst first (what `gputopo diff` prints)."""
        out = [f"gputopo diff {self.a.run.path} -> {self.b.run.path} (threshold {self.threshold:.0%})"]
        if self.a.simulated or self.b.simulated:
            out.append("SIMULATED: at least one run is from a simulated machine")
        if self.machine_differences:
            out.append("DIFFERENT MACHINES: " + "; ".join(self.machine_differences)
                       + ": this compares two machines, not one machine over time")
        out.append(f"{self.regressions} regression(s)")
        for v in self.verdicts_worse:
            out.append(f"  verdict worse: {v['where']}: {v['before']} -> {v['after']}")
        for c in sorted(self.bandwidth_down, key=lambda c: c.ratio):
            out.append(f"  bandwidth down: {c.where} {c.series}: {c.before:.3g} -> {c.after:.3g} GB/s ({c.ratio - 1:+.0%})")
        for f in self.new_findings:
            out.append(f"  new finding: {f.severity} {f.kind}: {f.message}")
        for f in self.gone_findings:
            out.append(f"  finding gone: {f.severity} {f.kind}: {f.message}")
        alike: Dict[Tuple[str, str], List[Tuple[Finding, List[Tuple[int, ...]]]]] = {}
        for f, gs in self.unmeasured_findings:  # alike ones on one line: a subset leaves out many
            alike.setdefault((f.severity, f.kind), []).append((f, gs))
        for (sev, kind), group in alike.items():
            pairs = list(dict.fromkeys(g for _, gs in group for g in gs))
            what = f"{group[0][0].message}" if len(group) == 1 else f"{len(group)} findings"
            out.append(f"  not measured in B: {sev} {kind}: {what} (B did not measure {_pairs_text(pairs)})")
        for v in self.verdicts_better:
            out.append(f"  verdict better: {v['where']}: {v['before']} -> {v['after']}")
        for c in sorted(self.bandwidth_up, key=lambda c: -c.ratio):
            out.append(f"  bandwidth up: {c.where} {c.series}: {c.before:.3g} -> {c.after:.3g} GB/s ({c.ratio - 1:+.0%})")
        for w in self.only_in_a:
            out.append(f"  only in A: {w}")
        for w in self.only_in_b:
            out.append(f"  only in B: {w}")
        for n in self.notes:
            out.append(f"  note: {n}")
        return "\n".join(out)


def _pairs_text(pairs: List[Tuple[int, ...]], limit: int = 8) -> str:
    words = " ".join(",".join(map(str, g)) for g in pairs[:limit])
    more = f" and {len(pairs) - limit} more" if len(pairs) > limit else ""
    return f"pair{'s' if len(pairs) != 1 else ''} {words}{more}"




def unmeasured_in(f: Finding, a: Summary, b: Summary) -> List[Tuple[int, ...]]:
    """The pairs A judged ``f`` from that B did not measure (empty: B measured them all, so a
    finding B lacks is gone). Host and scan findings come from the topology, in both runs."""
    pb = {p.gpus: p for p in b.pairs}

    def in_b(g: Tuple[int, ...], numerics: bool) -> bool:
        p = pb.get(g)
        return bool(p and (p.numerics if numerics else p.measured))

    if f.gpus and len(f.gpus) == 2:
        g = tuple(sorted(f.gpus))
        numerics = family(f.kind) == "numerics"  # judged from the pair's training numerics, not its transfers
        return [] if in_b(g, numerics) else [g]
    if not is_culprit(f.kind):
        return []
    classes = set((f.link_class or "").split(","))
    if f.kind == "class-fault":
        judged = [p.gpus for p in a.pairs if len(p.gpus) == 2 and p.measured and p.link_class in classes]
    else:  # a GPU's (or a worker's) fault: judged from the measured pairs it is in
        judged = [p.gpus for p in a.pairs if len(p.gpus) == 2 and p.measured and set(p.gpus) & set(f.gpus or ())]
    return [g for g in judged if not in_b(g, False)]


def _compare(where: str, series: str, before: Optional[float], after: Optional[float], d: RunDiff):
    if before is None or after is None or before <= 0:
        return
    c = Change(where, series, before, after)
    if c.ratio < 1 - d.threshold:
        d.bandwidth_down.append(c)
    elif c.ratio > 1 + d.threshold:
        d.bandwidth_up.append(c)


def _verdict(where: str, before: str, after: str, d: RunDiff):
    if before == after or {before, after} & set(UNJUDGED_VERDICTS):
        return
    entry = {"where": where, "before": before, "after": after}
    if _VERDICT_ORDER.index(after) > _VERDICT_ORDER.index(before):
        d.verdicts_worse.append(entry)
    else:
        d.verdicts_better.append(entry)


def verdict_notes(a: Summary, b: Summary) -> List[str]:
    """The run verdict moving to or from one that judged nothing: a note, not a regression (B's
    figures may be as good as A's; what changed is whether anything could judge them)."""
    if a.verdict == b.verdict or not ({a.verdict, b.verdict} & set(UNJUDGED_VERDICTS)):
        return []
    why = {"not-judged": "measured, but nothing to judge it against",
           "not-measured": "nothing measured or read"}
    side, word = ("B", b.verdict) if b.verdict in UNJUDGED_VERDICTS else ("A", a.verdict)
    detail = (b if side == "B" else a).judged.line(word)
    return [f"run verdict {a.verdict} -> {b.verdict}: {side} is {word} ({why[word]}"
            + (f": {detail}" if detail else "") + "); not a regression"]


def diff_summaries(a: Summary, b: Summary, threshold: float = DEFAULT_THRESHOLD) -> RunDiff:
    d = RunDiff(a=a, b=b, threshold=threshold, machine_differences=machine_differences(a.run, b.run))
    d.notes = verdict_notes(a, b)
    pa = {p.gpus: p for p in a.pairs}
    pb = {p.gpus: p for p in b.pairs}
    for gpus in sorted(set(pa) | set(pb), key=lambda g: (len(g), g)):
        where = f"pair {','.join(map(str, gpus))}"
        ra, rb = pa.get(gpus), pb.get(gpus)
        a_measured, b_measured = bool(ra and ra.measured), bool(rb and rb.measured)
        if a_measured != b_measured:
            (d.only_in_a if a_measured else d.only_in_b).append(where + " (measured)")
        if ra is None or rb is None:
            continue
        for series in sorted(set(ra.series) & set(rb.series)):
            _compare(where, series, ra.series[series]["gbps"], rb.series[series]["gbps"], d)
        _verdict(where, ra.verdict, rb.verdict, d)
    ca = {c.link_class: c for c in a.classes}
    cb = {c.link_class: c for c in b.classes}
    for lc in sorted(set(ca) | set(cb)):
        where = f"class {lc}"
        xa, xb = ca.get(lc), cb.get(lc)
        if xa is None or xb is None:
            (d.only_in_a if xb is None else d.only_in_b).append(where)
            continue
        if xa.series == xb.series:
            _compare(where, xa.series or "-", xa.median_gbps, xb.median_gbps, d)
        _verdict(where, xa.verdict, xb.verdict, d)
    ka: Dict[Tuple, Finding] = {finding_key(f): f for f in a.findings}
    kb: Dict[Tuple, Finding] = {finding_key(f): f for f in b.findings}
    d.new_findings = [f for k, f in kb.items() if k not in ka]
    for k, f in ka.items():
        if k in kb:
            continue
        unmeasured = unmeasured_in(f, a, b)
        if unmeasured:
            d.unmeasured_findings.append((f, unmeasured))
        else:
            d.gone_findings.append(f)
    return d


def diff_runs(dir_a, dir_b, threshold: float = DEFAULT_THRESHOLD) -> RunDiff:
    """Compare two run folders (analysed afresh from their raw data, not their summary.json).
    UsageError when a measurement line of either cannot be read: its figure would be missing
    from the comparison, and a missing figure looks like no regression."""
    a, b = summarize_dir(dir_a), summarize_dir(dir_b)
    for name, s in (("A", a), ("B", b)):
        bad = [n for n in s.run.skipped_lines if "skipped, not a measurement" in n]
        if bad:
            more = f" (and {len(bad) - 1} more line(s))" if len(bad) > 1 else ""
            raise UsageError(f"diff: run {name} {s.run.path}: {bad[0]}{more}; fix the run "
                             "folder or measure again: a missing figure would look like no "
                             "regression")
    for name, s in (("A", a), ("B", b)):
        why = unreadable(s.run)
        if why:  # a finding "gone" from a run that lost its data is no fix
            raise UsageError(f"diff: run {name} {s.run.path} cannot be compared: {why}")
    return diff_summaries(a, b, threshold)
