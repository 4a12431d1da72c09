"""Each spec rule judged against a run: a list of Outcomes, one per rule and pair (or GPU).

An Outcome is a JUnit testcase: ``passed``, ``failed`` (with the evidence: the numbers that
failed) or ``skipped`` (no data to judge: nothing measured, no topology, the cpu fabric).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from gputopo.runfolder.layout import HISTORY_FINDINGS_JSON, MEASUREMENTS_JSONL, NUMERICS_JSONL, RUN_JSON
from gputopo.model import Finding, is_value
from gputopo.model.collectives import collective
from gputopo.model.finding_kinds import is_data_trouble, is_history_kind
from gputopo.runfolder.cluster import read_cluster_doc
from gputopo.report.summary import Summary

from .spec import ANY, Spec, selector_matches

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


@dataclass
class Outcome:
    rule: str  # the spec key, e.g. "bandwidth.SYS.min_gbps"
    subject: str  # "5-6", "GPU3", "machine"
    status: str
    message: str
    gpus: Optional[List[int]] = None
    link_class: Optional[str] = None
    evidence: Dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.rule}[{self.subject}]"

    def to_json(self) -> dict:
        return {"rule": self.rule, "name": self.name, "subject": self.subject, "status": self.status,
                "message": self.message, "gpus": self.gpus, "link_class": self.link_class,
                "evidence": self.evidence}


def _pair_subject(gpus) -> str:
    return "-".join(map(str, gpus)) if gpus else "machine"


def _judge(rule, subject, ok: bool, msg: str, **kw) -> Outcome:
    return Outcome(rule, subject, PASSED if ok else FAILED, msg, **kw)


# ----------------------------------------------------------------------------- topology


def topology_rules(spec: Spec, s: Summary) -> List[Outcome]:
    topo = s.run.topology
    out: List[Outcome] = []
    wants = spec.gpu_count is not None or spec.expected_classes or spec.all_pairs
    if wants and topo is None:
        return [Outcome("topology", "machine", SKIPPED, "the run has no topology.json")]
    if topo is None:  # and nothing asked of it
        return out
    if spec.gpu_count is not None:
        n = len(topo.gpus)
        out.append(_judge("topology.gpu_count", "machine", n == spec.gpu_count,
                          f"{n} GPUs, spec expects {spec.gpu_count}", evidence={"gpus": n, "expected": spec.gpu_count}))
    for (i, j), want in sorted(spec.expected_classes.items()):
        try:
            got = str(topo.link_class(i, j))
        except KeyError:
            out.append(Outcome("topology.link_class", f"{i}-{j}", FAILED,
                               f"GPUs {i},{j}: pair not in the run's topology (spec expects {want})",
                               gpus=[i, j], evidence={"expected": want, "actual": None}))
            continue
        out.append(_judge("topology.link_class", f"{i}-{j}", got == want,
                          f"GPUs {i},{j}: {got}, spec expects {want}", gpus=[i, j], link_class=got,
                          evidence={"expected": want, "actual": got}))
    if spec.all_pairs:
        for p in topo.pairs:
            got = str(p.link_class)
            out.append(_judge("topology.all_pairs", _pair_subject(p.gpus), got == spec.all_pairs,
                              f"GPUs {p.gpus[0]},{p.gpus[1]}: {got}, spec expects every pair {spec.all_pairs}",
                              gpus=list(p.gpus), link_class=got, evidence={"expected": spec.all_pairs, "actual": got}))
    return out


# ----------------------------------------------------------------------------- NVLink / PCIe


def _gpus(s: Summary):
    topo = s.run.topology
    return [] if topo is None else topo.gpus


def nvlink_rules(spec: Spec, s: Summary) -> List[Outcome]:
    wants = spec.nvlink_min_links_up is not None or spec.nvlink_links_up or spec.nvlink_max_errors
    if not wants:
        return []
    if s.run.topology is None:
        return [Outcome("nvlink", "machine", SKIPPED, "the run has no topology.json")]
    out = []
    for g in _gpus(s):
        subj = f"GPU{g.nvml_index}"
        need = spec.nvlink_links_up.get(g.nvml_index, spec.nvlink_min_links_up)
        if need is not None:
            rule = "nvlink.links_up" if g.nvml_index in spec.nvlink_links_up else "nvlink.min_links_up"
            if g.lost is not None:
                out.append(Outcome(rule, subj, FAILED, f"GPU {g.nvml_index} is lost ({g.lost.error})",
                                   gpus=[g.nvml_index]))
            else:
                active = len(g.active_nvlinks())
                down = [lk.link for lk in g.nvlinks if lk.active is False]
                out.append(_judge(rule, subj, active >= need,
                                  f"GPU {g.nvml_index}: {active} NVLinks up, spec needs {need}"
                                  + (f" (down: {down})" if down else ""),
                                  gpus=[g.nvml_index], evidence={"active": active, "required": need, "down": down}))
        if spec.nvlink_max_errors and g.lost is None:
            totals: Dict[str, int] = {}
            for lk in g.nvlinks:
                for c, v in lk.errors.items():
                    if is_value(v):
                        totals[c] = totals.get(c, 0) + int(v)
            over = {c: totals[c] for c, lim in spec.nvlink_max_errors.items() if totals.get(c, 0) > lim}
            out.append(_judge("nvlink.max_errors", subj, not over,
                              f"GPU {g.nvml_index}: NVLink error counters {totals or 'none read'}"
                              + (f"; over the limit: {over} (limits {spec.nvlink_max_errors})" if over else ""),
                              gpus=[g.nvml_index], evidence={"counters": totals, "limits": spec.nvlink_max_errors}))
    return out


def pcie_rules(spec: Spec, s: Summary) -> List[Outcome]:
    wants = (spec.pcie_min_gen is not None or spec.pcie_min_width is not None or spec.pcie_full_width
             or spec.pcie_max_replay is not None)
    if not wants:
        return []
    if s.run.topology is None:
        return [Outcome("pcie", "machine", SKIPPED, "the run has no topology.json")]
    out = []
    for g in _gpus(s):
        subj, p, gi = f"GPU{g.nvml_index}", g.pcie, g.nvml_index

        def add(rule, value, ok_fn, text, subj=subj, gi=gi):
            if not is_value(value):
                out.append(Outcome(rule, subj, SKIPPED, f"GPU {gi}: {text} not available", gpus=[gi]))
            else:
                ok, msg = ok_fn(value)
                out.append(_judge(rule, subj, ok, f"GPU {gi}: {msg}", gpus=[gi], evidence={"value": value}))

        if spec.pcie_min_gen is not None:
            gen = p.gen_max if is_value(p.gen_max) else p.gen_current
            add("pcie.min_gen", gen, lambda v: (v >= spec.pcie_min_gen,
                f"PCIe Gen{v} (max supported), spec needs Gen{spec.pcie_min_gen}"), "PCIe generation")
        if spec.pcie_min_width is not None:
            add("pcie.min_width", p.width_current, lambda v: (v >= spec.pcie_min_width,
                f"PCIe x{v}, spec needs x{spec.pcie_min_width}"), "PCIe width")
        if spec.pcie_full_width:
            if is_value(p.width_current) and is_value(p.width_max):
                out.append(_judge("pcie.full_width", subj, p.width_current >= p.width_max,
                                  f"GPU {gi}: PCIe x{p.width_current} of x{p.width_max}", gpus=[gi],
                                  evidence={"width_current": p.width_current, "width_max": p.width_max}))
            else:
                out.append(Outcome("pcie.full_width", subj, SKIPPED, f"GPU {gi}: PCIe width not available", gpus=[gi]))
        if spec.pcie_max_replay is not None:
            add("pcie.max_replay", p.replay_counter, lambda v: (v <= spec.pcie_max_replay,
                f"PCIe replay counter {v}, limit {spec.pcie_max_replay}"), "PCIe replay counter")
    return out


# ----------------------------------------------------------------------------- bandwidth


def _fabric_measures_links(s: Summary) -> bool:
    return any(m.of_gpus for m in s.run.measurements)


def bandwidth_rules(spec: Spec, s: Summary) -> List[Outcome]:
    out: List[Outcome] = []
    links_measured = _fabric_measures_links(s)
    for rule in spec.bandwidth:
        base = f"bandwidth.{rule.selector}"
        pairs = [p for p in s.pairs if len(p.gpus) == 2 and selector_matches(rule.selector, p.link_class)]
        start = len(out)
        for p in pairs:
            cls = s.class_row(p.link_class) if p.link_class else None
            series = rule.series or (cls.series if cls else None) or p.headline_series
            subj = _pair_subject(p.gpus)
            data = p.series.get(series) if series else None
            if data is None:
                if p.measured:
                    out.append(Outcome(base, subj, SKIPPED, f"GPUs {subj}: no {series or 'bandwidth'} measurement",
                                       gpus=list(p.gpus), link_class=p.link_class))
                continue
            if not links_measured:
                out.append(Outcome(base, subj, SKIPPED, "cpu fabric: no GPU link was measured",
                                   gpus=list(p.gpus), link_class=p.link_class))
                continue
            if rule.min_gbps is not None:
                out.append(_judge(f"{base}.min_gbps", subj, data["gbps"] >= rule.min_gbps,
                                  f"GPUs {subj} ({p.link_class}): {series} {data['gbps']:.3g} GB/s, spec needs "
                                  f">= {rule.min_gbps:g}", gpus=list(p.gpus), link_class=p.link_class,
                                  evidence={"series": series, "gbps": data["gbps"], "min_gbps": rule.min_gbps,
                                            "directions": data.get("directions"), "size_bytes": data.get("size_bytes")}))
            if rule.min_efficiency is not None:
                eff = data.get("efficiency")
                if eff is None:
                    out.append(Outcome(f"{base}.min_efficiency", subj, SKIPPED,
                                       f"GPUs {subj}: theoretical rate unknown ({p.expected.basis})",
                                       gpus=list(p.gpus), link_class=p.link_class))
                else:
                    out.append(_judge(f"{base}.min_efficiency", subj, eff >= rule.min_efficiency,
                                      f"GPUs {subj} ({p.link_class}): {series} {data['gbps']:.3g} GB/s = {eff:.0%} of "
                                      f"{p.expected.gbps:g} GB/s, spec needs >= {rule.min_efficiency:.0%}",
                                      gpus=list(p.gpus), link_class=p.link_class,
                                      evidence={"series": series, "gbps": data["gbps"], "efficiency": eff,
                                                "expected_gbps": p.expected.gbps, "min_efficiency": rule.min_efficiency}))
        if len(out) == start:
            out.append(Outcome(base, rule.selector, SKIPPED,
                               f"no measured pair of class {rule.selector} in the run"))
    return out


def busbw_rules(spec: Spec, s: Summary) -> List[Outcome]:
    out = []
    links_measured = _fabric_measures_links(s)
    for op, per in spec.busbw.items():
        series = collective(op).test
        for sel, minimum in per.items():
            rule = f"busbw.{op}.{sel}" if sel != ANY else f"busbw.{op}"
            rows = [p for p in s.pairs if series in p.series and selector_matches(sel, p.link_class)]
            if not rows:
                out.append(Outcome(rule, sel, SKIPPED, f"no {series} measurement on a {sel} pair"))
                continue
            for p in rows:
                subj = _pair_subject(p.gpus)
                if not links_measured:
                    out.append(Outcome(rule, subj, SKIPPED, "cpu fabric: no GPU link was measured", gpus=list(p.gpus)))
                    continue
                d = p.series[series]
                out.append(_judge(rule, subj, d["gbps"] >= minimum,
                                  f"GPUs {subj} ({p.link_class or '?'}): {op} busbw {d['gbps']:.3g} GB/s at "
                                  f"{d['size_bytes']} B, spec needs >= {minimum:g}", gpus=list(p.gpus),
                                  link_class=p.link_class,
                                  evidence={"busbw_gbps": d["gbps"], "size_bytes": d["size_bytes"], "min_gbps": minimum}))
    return out


# ----------------------------------------------------------------------------- integrity / findings


def _finding_outcome(rule: str, f: Finding) -> Outcome:
    ev = {"kind": f.kind, "severity": f.severity, "message": f.message, "cause": f.cause,
          "evidence": f.evidence}
    return Outcome(rule, _pair_subject(f.gpus), FAILED, f.message + (f"; likely cause: {f.cause}" if f.cause else ""),
                   gpus=f.gpus, link_class=f.link_class, evidence=ev)


def integrity_rules(spec: Spec, s: Summary) -> List[Outcome]:
    out = []
    on = {k: v for k, v in spec.integrity.items() if v}
    if on.get("no_corruption"):
        bad = [f for f in s.findings if f.kind == "corrupt"]
        out += [_finding_outcome("integrity.no_corruption", f) for f in bad]
        bad_keys = {tuple(sorted(f.gpus)) for f in bad if f.gpus}
        measured = [p for p in s.pairs if p.checked and p.gpus not in bad_keys]
        for p in measured:
            out.append(Outcome("integrity.no_corruption", _pair_subject(p.gpus), PASSED,
                               f"GPUs {_pair_subject(p.gpus)}: {p.measurements} measurements, 0 wrong elements",
                               gpus=list(p.gpus), link_class=p.link_class))
        unverified = [p for p in s.pairs if p.unchecked and not p.checked and p.gpus not in bad_keys]
        for p in unverified:  # measured without a data check (nccl-tests -c 0): not "0 wrong elements"
            out.append(Outcome("integrity.no_corruption", _pair_subject(p.gpus), SKIPPED,
                               f"GPUs {_pair_subject(p.gpus)}: {p.measurements} measurements whose data was not "
                               "verified (nccl-tests validation: 0)", gpus=list(p.gpus), link_class=p.link_class))
        if not bad and not measured and not unverified:
            out.append(Outcome("integrity.no_corruption", "machine", SKIPPED, "no measurements in the run"))
    for key, kind in (("no_nan", "nan"), ("no_divergence", "diverged")):
        if not on.get(key):
            continue
        rule = f"integrity.{key}"
        # DataParallel and DDP are judged; the one-GPU reference only calibrates them.
        recs = [r for r in s.run.numerics if r.get("way") in ("dp", "ddp")]
        if not recs:
            out.append(Outcome(rule, "machine", SKIPPED, "no numerics results in the run"))
            continue
        for rec in recs:
            gpus = sorted(int(g) for g in (rec.get("gpus") or []))
            subj = f"{_pair_subject(gpus)} {rec.get('way')}"
            went_bad = rec.get("verdict") == kind and not rec.get("expected_difference")
            f = next((x for x in s.findings if x.kind == kind and sorted(x.gpus or []) == gpus
                      and x.evidence.get("way") == rec.get("way")), None)
            msg = (f.message + (f"; likely cause: {f.cause}" if f and f.cause else "")) if (went_bad and f) else \
                f"GPUs {_pair_subject(gpus)} {rec.get('way')}: verdict {rec.get('verdict')}" + (
                    f" at step {rec.get('step')}" if went_bad and rec.get("step") is not None else "")
            out.append(Outcome(rule, subj, FAILED if went_bad else PASSED, msg, gpus=gpus or None,
                               evidence={k: v for k, v in rec.items() if k not in ("losses", "reference_losses")}))
    for key, kind in (("no_hang", "hang"), ("no_crash", "crash")):
        if on.get(key):
            out += _kind_outcomes(f"integrity.{key}", kind, s, f"no {kind} recorded")
    return out


def _kind_outcomes(rule: str, kind: str, s: Summary, passed_message: str) -> List[Outcome]:
    """One failed outcome per finding of ``kind``, or one passed outcome for the machine."""
    bad = [f for f in s.findings if f.kind == kind]
    if not bad:
        return [Outcome(rule, "machine", PASSED, passed_message)]
    return [_finding_outcome(rule, f) for f in bad]


def findings_rules(spec: Spec, s: Summary) -> List[Outcome]:
    out = []
    for kind in spec.fail_on:
        rule = f"findings.fail_on.{kind}"
        unjudged = _not_judged_by_history(kind, s)
        if unjudged:  # "no drift finding" would pass a run that was never compared
            out.append(Outcome(rule, "machine", SKIPPED, unjudged))
            continue
        out += _kind_outcomes(rule, kind, s, f"no {kind} finding")
    return out


def _not_judged_by_history(kind: str, s: Summary) -> Optional[str]:
    """Why the run folder cannot say whether a history kind (drift, counter-growth) happened,
    or None: they are judged when the run is recorded (its history_findings.json)."""
    if not is_history_kind(kind):
        return None
    record = s.run.history
    if record is None:
        return (f"the run was never compared with the machine's history (no {HISTORY_FINDINGS_JSON}: "
                "recorded with --no-history, or not recorded): no " + kind + " can be judged")
    if not record.judged(kind):
        return ("no earlier error-free run of this machine to compare with" if kind == "drift"
                else "no earlier reading of this machine's error counters to compare with"
                if record.counters_read else "the run read no error counters")
    return None


def run_rules(spec: Spec, summary: Summary) -> List[Outcome]:
    """A run cut short (Ctrl-C, a crash of gputopo itself) cannot pass: what it did not measure
    would count as clean. Runs without a status (imported nccl-tests results) are complete."""
    run = summary.run
    cluster = read_cluster_doc(run.path)  # a `gputopo cluster` run: its rounds are its measurements
    out = []
    if not (run.path / RUN_JSON).exists():  # what was asked and whether it finished is lost
        out.append(Outcome("run.complete", "machine", FAILED,
                           f"{run.path} has no {RUN_JSON}: nothing says what the run was asked to "
                           "measure or that it finished; measure again",
                           evidence={"status": None}))
    status = run.info.get("status")
    if status is not None:
        ok = status == "complete"
        out.append(Outcome("run.complete", "machine", PASSED if ok else FAILED,
                           "the run finished" if ok else
                           f"the run is {status}: " + ("run `gputopo cluster` again" if cluster is not None
                                                       else f"finish it with `gputopo bench --resume {run.path}`"),
                           evidence={"status": status}))
    # A run the report cannot fully read (a file deleted or cut short, impossible values, an
    # unfinished run) never passes, whatever the spec says about warnings: what is missing
    # would count as clean.
    for f in summary.findings:
        if is_data_trouble(f.kind):
            out.append(Outcome("run.readable", "machine", FAILED,
                               f"{f.message}: the run cannot be judged as a whole; measure again",
                               evidence={"kind": f.kind}))
    if not run.measurements and not run.numerics and not (cluster or {}).get("rounds"):
        # an emptied file must not pass as clean
        out.append(Outcome("run.measured", "machine", FAILED,
                           f"the run holds no measurements ({MEASUREMENTS_JSONL} and "
                           f"{NUMERICS_JSONL} are empty or missing): nothing can be judged",
                           evidence={"notes": list(run.notes)}))
    return out


ALL_RULES = (run_rules, topology_rules, nvlink_rules, pcie_rules, bandwidth_rules, busbw_rules, integrity_rules,
             findings_rules)


#: The outcome of series neither the report nor the spec could judge (judged.py).
NOT_JUDGED_RULE = "judged.series"


def spec_judged_pairs(outcomes: List[Outcome]) -> set:
    """The pairs a bandwidth or busbw rule of the spec judged (passed or failed): their series
    have the spec as basis."""
    return {tuple(sorted(o.gpus)) for o in outcomes if o.gpus and o.status in (PASSED, FAILED)
            and o.rule.startswith(("bandwidth.", "busbw."))}


def not_judged_outcomes(summary: Summary, outcomes: List[Outcome]) -> List[Outcome]:
    """One skipped outcome per reason for the series nothing judged: no published or theoretical
    rate, no like GPUs, no history, and no rule of this spec (a strict spec fails them)."""
    by_spec = spec_judged_pairs(outcomes)
    why: Dict[str, List[Any]] = {}
    for (series, gpus, direction), b in summary.judged.series.items():
        if not b.judged and tuple(sorted(gpus)) not in by_spec:
            why.setdefault(b.text, []).append([series, list(gpus), direction])
    return [Outcome(NOT_JUDGED_RULE, f"reason{k + 1}", SKIPPED,
                    f"{len(keys)} series not judged (no basis in the report, no rule of this spec): {text}",
                    evidence={"series": keys[:20], "count": len(keys)})
            for k, (text, keys) in enumerate(why.items())]


def evaluate(spec: Spec, summary: Summary, extra=()) -> List[Outcome]:
    """Every rule's outcomes; ``extra`` adds rule functions defined above this module. Series
    nothing judged are skipped outcomes (NOT_JUDGED_RULE), failed under ``strict = true``."""
    out: List[Outcome] = []
    for fn in ALL_RULES + tuple(extra):
        out += fn(spec, summary)
    out += not_judged_outcomes(summary, out)
    if spec.strict:
        for o in out:
            if o.status == SKIPPED:
                o.status = FAILED
                o.message = "strict spec: no data to judge: " + o.message
    return out
