"""What each verdict was judged against: the judged basis of every measured series and fact.

coverage.py says what a run *measured* (pairs planned against pairs with a result); this module
says what of it was *judged*, and against what. A figure with nothing to compare it with is
neither slow nor fine, so the run's verdict must not read ``ok`` for it (issue 46):

- every headline series (headline.py, keyed by ``(series, gpus, direction)``) gets one basis, the
  first that applies: ``reference`` (a published figure of the same model, class, test and GPU
  count: expected_basis.judge_rate), ``theoretical`` (the link's rate, for plain peer copies),
  ``nics`` (a collective of a job across hosts against what the NICs it used carry:
  network_floor.py, the NICs given by `import nccl-tests --nics`),
  ``peers`` (the like GPUs of the same run, given as a mapping by the rule that compared them),
  ``history`` (this machine's own earlier runs, where the run was recorded and a baseline
  existed), or ``none`` with why (``spec`` is the basis a `gputopo check` spec adds, said by check);
- every fact a rule judges counts where it judged it: the NIC ports an ibstat import read (state,
  rate against their peers), a perftest figure against its port's rate, the connections of an
  NCCL_DEBUG log, the pairs an output shows without peer access (with measurements), the training
  numerics of a pair against one GPU. A run's topology is judged by scan's checks and a kernel
  log's lines by theirs, whose findings the run shows; they are context, not what the run
  measured (a log excerpt cannot show a GPU healthy), so they make no run "ok";
- what an import could not read (data trouble, info) is listed as not read: coverage, not a fault.

:class:`Judgement` then decides the verdict word (:meth:`Judgement.verdict`): ``not-judged`` where
something was measured or read but nothing of it could be judged, ``ok`` only where something was
judged and nothing was found; and the words the verdict line adds ("ok for 12 of 14 series; 2 not
judged: ...").
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from gputopo.model import Finding, Topology
from gputopo.model.finding_kinds import is_data_trouble
from gputopo.model.measurement import FIGURES_OF_CPU_PROCESSES

from .expected_basis import NO_LINK_SERIES, why_no_reference, judge_rate
from .headline import Headline

#: The bases a series or fact can be judged against, in the order they are tried.
BASES = ("reference", "theoretical", "nics", "peers", "spec", "history", "none")
#: A series' key: (series, gpus, direction), as Headline has them.
SeriesKey = Tuple[str, Tuple[int, ...], Optional[str]]
#: The run verdicts, best first after the two that judged nothing (one vocabulary everywhere).
VERDICTS = ("not-measured", "not-judged", "ok", "degraded", "broken")
#: Verdicts that judged nothing: neither is a problem (exit 0), neither is "ok".
UNJUDGED_VERDICTS = ("not-measured", "not-judged")


def series_key(h: Headline) -> SeriesKey:
    return (h.series, tuple(h.gpus), h.direction)


@dataclass(frozen=True)
class Basis:
    """What one series was judged against: ``basis`` (BASES) and, in words, the figure or why none."""

    basis: str
    text: str

    @property
    def judged(self) -> bool:
        return self.basis != "none"

    def to_json(self) -> Dict[str, str]:
        return {"basis": self.basis, ("text" if self.judged else "why"): self.text}


@dataclass(frozen=True)
class Fact:
    """A fact a rule judges (NIC ports, a perftest figure, ...): how many, and whether judged."""

    what: str
    count: int
    judged: bool
    why: str = ""

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"what": self.what, "count": self.count, "judged": self.judged}
        if self.why:
            out["why" if not self.judged else "basis"] = self.why
        return out


def _history_keys(history_doc: Optional[Mapping[str, Any]]) -> Dict[SeriesKey, int]:
    """The series the history compared this run with: key -> baseline runs (history_findings.json's
    ``drift.compared``, written when the run was recorded)."""
    drift = (history_doc or {}).get("drift")
    compared = drift.get("compared") if isinstance(drift, dict) else None
    runs = drift.get("baseline_runs") if isinstance(drift, dict) else None
    n = len(runs) if isinstance(runs, list) else 0
    out: Dict[SeriesKey, int] = {}
    for item in compared if isinstance(compared, list) else []:
        if isinstance(item, list) and len(item) == 3 and isinstance(item[0], str) and isinstance(item[1], list):
            try:
                out[(item[0], tuple(int(g) for g in item[1]), item[2] if isinstance(item[2], str) else None)] = n
            except (TypeError, ValueError):
                continue
    return out


def _why_none(h: Headline, topo: Optional[Topology]) -> str:
    if not h.of_gpus:
        what = ("CPU processes, not a GPU link" if h.figures_of == FIGURES_OF_CPU_PROCESSES else
                "a fabric gputopo never wrote: what its figures are of is not recorded")
        return f"timed on the {h.fabric} fabric ({what}): no rate applies"
    if h.test in NO_LINK_SERIES:
        return "an on-device copy crosses no link: no rate applies"
    what = "the whole job's figure" if not h.gpus else "a GPU set" if len(h.gpus) > 2 else "this series"
    return why_no_reference(h, topo) + f"; no theoretical rate for {what}, no like GPUs compared"


def series_basis(heads: Sequence[Headline], topo: Optional[Topology],
                 peers: Optional[Mapping[SeriesKey, str]] = None,
                 history_doc: Optional[Mapping[str, Any]] = None) -> Dict[SeriesKey, Basis]:
    """THE basis of every headline series (one function: every surface reads it from here).

    ``peers``: series key -> the words naming the like GPUs of the same run it was compared with
    (the like-GPU rule's ``peer_bases(heads, topo)``); ``history_doc``: the run's
    history_findings.json, whose ``drift.compared`` names the series its baseline held."""
    peers = peers or {}
    hist = _history_keys(history_doc)
    out: Dict[SeriesKey, Basis] = {}
    for h in heads:
        key = series_key(h)
        j = judge_rate(h, topo)
        if j is not None:
            out[key] = Basis(j.basis, j.text)
        elif key in peers:
            out[key] = Basis("peers", peers[key])
        elif key in hist:
            n = hist[key]
            out[key] = Basis("history", f"this machine's own past only ({n} earlier run{'s' if n != 1 else ''} "
                                        "of the same series): no published or theoretical rate applies")
        else:
            out[key] = Basis("none", _why_none(h, topo))
    return out


def judged_facts(run, findings: Sequence[Finding]) -> List[Fact]:
    """The facts a rule judged in ``run`` (a run_folder.Run), and those it read but could not judge."""
    out: List[Fact] = []
    topo = run.topology
    # A bench run's (or an import's --topo) link matrix is judged by scan's checks, whose findings
    # the run shows; it is the run's context, not what it measured, so it makes no run "ok". The
    # NIC ports of an ibstat import are what it read. A kernel log's Xid and driver lines are
    # judged by their rules (findings, or a note), but a log excerpt cannot show a GPU healthy (it
    # holds what someone kept of it): they make no run "ok" either, and the verdict of a log with
    # no warning stays "not-measured".
    ports = [p for n in (topo.nics if topo is not None and not topo.gpus else []) for p in n.ports]
    if ports:
        out.append(Fact("NIC ports (state, rate against their peers)", len(ports), True, "scan's network checks"))
    # a perftest figure's finding says in its evidence whether it was judged against its port's rate
    perf = [f for f in findings if isinstance(f.evidence, dict) and f.evidence.get("tool") == "perftest"
            and isinstance(f.evidence.get("judged"), bool)]
    done = [f for f in perf if f.evidence.get("judged")]
    if done:
        out.append(Fact("perftest bandwidth figures", len(done), True, "the port's rate"))
    if len(done) < len(perf):
        out.append(Fact("perftest bandwidth figures", len(perf) - len(done), False,
                        "its port's rate is not known or does not apply (see the rdma-bandwidth finding)"))
    # pairs an output shows without peer access, judged against what the card and link class allow
    # (an info that is not "by design" is one the rule could not judge: model or class unknown)
    no_peer = [f for f in findings if isinstance(f.evidence, dict) and isinstance(f.evidence.get("by_design"), bool)
               and (f.evidence["by_design"] or f.severity != "info")]
    if no_peer and run.measurements:  # (alone, a waived testcase: nothing was measured)
        out.append(Fact("GPU pairs without peer access (against what the card and link class allow)",
                        len(no_peer), True, "the peer-access rule"))
    nd = run.nccl_debug or {}
    if isinstance(nd.get("channel_lines"), int) and nd["channel_lines"]:
        out.append(Fact("connections of the NCCL_DEBUG log (transports, GPUDirect RDMA, NICs)",
                        nd["channel_lines"], True, "the NCCL log rules"))
    pairs = {tuple(sorted(int(g) for g in rec.get("gpus") or [])) for rec in run.numerics
             if rec.get("way") in ("dp", "ddp")}
    if pairs:
        out.append(Fact("training numerics of GPU pairs", len(pairs), True, "the same training on one GPU"))
    return out


@dataclass
class Judgement:
    """What a run's verdict was judged against: its series' bases, its facts, what was not read."""

    series: Dict[SeriesKey, Basis] = field(default_factory=dict)
    facts: List[Fact] = field(default_factory=list)
    #: What an import could not read (its data-trouble findings' messages): coverage, not a fault.
    not_read: List[str] = field(default_factory=list)

    @property
    def series_judged(self) -> int:
        return sum(1 for b in self.series.values() if b.judged)

    @property
    def series_not_judged(self) -> int:
        return len(self.series) - self.series_judged

    @property
    def facts_judged(self) -> int:
        return sum(f.count for f in self.facts if f.judged)

    @property
    def anything_judged(self) -> bool:
        return self.series_judged > 0 or self.facts_judged > 0

    @property
    def anything_read(self) -> bool:
        return bool(self.series) or bool(self.facts)

    def reasons(self) -> List[Tuple[str, int]]:
        """Why series were not judged, most common first: (why, how many)."""
        return Counter(b.text for b in self.series.values() if not b.judged).most_common()

    def bases(self) -> Dict[str, int]:
        c = Counter(b.basis for b in self.series.values())
        return {b: c[b] for b in BASES if c.get(b)}

    @property
    def history_only(self) -> bool:
        """Every judged series' only basis is this machine's own past."""
        return self.series_judged > 0 and all(b.basis in ("history", "none") for b in self.series.values())

    def verdict(self, verdict: str, run_measured: bool = False) -> str:
        """The run's verdict word from the findings' one (classes.overall_verdict): a degraded or
        broken run stays so; otherwise ``ok`` needs something judged, and a run that measured or
        read something but judged none of it is ``not-judged``. ``run_measured``: the run holds
        a completed measurement (the pairs may not say so: GPUs measured alone, a log whose
        devices are not named)."""
        if verdict in ("degraded", "broken"):
            return verdict
        if self.anything_judged:
            return "ok"
        if self.anything_read or run_measured or verdict == "ok":
            return "not-judged"
        return verdict

    def line(self, verdict: str) -> str:
        """What the verdict line adds after the verdict word ("" when nothing needs saying)."""
        parts = []
        n, j = len(self.series), self.series_judged
        reasons = self.reasons()
        why = "; ".join(f"{r} ({k})" if len(reasons) > 1 else r for r, k in reasons[:2])
        more = f"; and {len(reasons) - 2} other reason(s)" if len(reasons) > 2 else ""
        if n and j < n:
            if j and verdict == "ok":
                parts.append(f"ok for {j} of {n} series; {n - j} not judged: {why}{more}")
            elif j or verdict in ("degraded", "broken"):  # its findings say what is wrong, this what was not judged
                parts.append(f"{n - j} of {n} series not judged: {why}{more}")
            else:
                parts.append(f"{n} series measured, none judged: {why}{more}")
        if self.history_only:
            parts.append("judged against this machine's own past only (no published or theoretical rate applies)")
        unjudged = [f for f in self.facts if not f.judged]
        for f in unjudged:
            parts.append(f"{f.count} {f.what} not judged: {f.why}")
        if self.not_read:
            parts.append(f"not read: {len(self.not_read)} part(s) of the input ({self.not_read[0]}"
                         + (" ..." if len(self.not_read) > 1 else "") + ")")
        return "; ".join(parts)

    def to_json(self, heads: Sequence[Headline] = ()) -> Dict[str, Any]:
        """summary.json's ``judged``: counts, bases, reasons, facts, what was not read."""
        return {
            "series": len(self.series), "series_judged": self.series_judged,
            "series_not_judged": self.series_not_judged,
            "bases": self.bases(),
            "not_judged": [{"why": r, "series": k} for r, k in self.reasons()],
            "facts": [f.to_json() for f in self.facts],
            "facts_judged": self.facts_judged,
            "not_read": list(self.not_read),
            "history_only": self.history_only,
        }


def unjudged_keys(j: Judgement) -> List[List[Any]]:
    """The series nothing judged, as the history names them: [series, gpus, direction]."""
    return [[s, list(g), d] for (s, g, d), b in j.series.items() if not b.judged]


def with_history(doc: Dict[str, Any], unjudged: Sequence[Sequence[Any]],
                 compared: Sequence[Sequence[Any]]) -> Dict[str, Any]:
    """A run's stored judged record (Judgement.to_json()) once the history has judged the series
    of ``unjudged`` it ``compared`` (the same series a report of the folder then bases on it)."""
    seen = {(str(c[0]), tuple(c[1]), c[2]) for c in compared}
    n = sum(1 for u in unjudged if (str(u[0]), tuple(u[1]), u[2]) in seen)
    if not n:
        return doc
    out = dict(doc)
    bases = dict(out.get("bases") or {})
    bases["history"] = bases.get("history", 0) + n
    bases["none"] = bases.get("none", 0) - n
    out["bases"] = {b: bases[b] for b in BASES if bases.get(b)}
    out["series_judged"] = int(out.get("series_judged") or 0) + n
    out["series_not_judged"] = int(out.get("series_not_judged") or 0) - n
    out["history_only"] = set(out["bases"]) <= {"history", "none"}
    return out


def judgement(run, heads: Sequence[Headline], findings: Sequence[Finding],
              peers: Optional[Mapping[SeriesKey, str]] = None) -> Judgement:
    """The judged basis of ``run`` (a run_folder.Run) with its headlines and findings."""
    hist = run.history.doc if run.history is not None else None
    not_read = [f.message for f in findings if is_data_trouble(f.kind) and f.severity == "info"]
    return Judgement(series=series_basis(heads, run.topology, peers, hist), facts=judged_facts(run, findings),
                     not_read=not_read)
