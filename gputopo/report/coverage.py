"""How much of what a run was asked to measure its folder holds, and what makes it unreadable.

A wrong verdict is the worst thing a diagnostic can do, and the easiest way to make one is to
judge a partial run as if it were whole: GPUs never measured look "fine" or, worse, a pattern
over the pairs that were measured looks like a faulty GPU. So the report reads, before judging:

- the pairs run.json planned against the pairs the folder holds anything for: a run with fewer
  (interrupted, still running, failed) is *partial*, and every output says so first
  (:func:`partial_line`);
- the files a bench run must have (run.json, topology.json, measurements.jsonl) and the counts
  events.jsonl recorded per finished step against the lines the JSON-lines files still hold
  (:func:`folder_problems`): a file deleted or cut short is ``incomplete-data``, and a gate fails.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Set, Union

from gputopo.model import Finding, Measurement
from gputopo.bench.fabrics.fabric import FABRIC_NAMES
from gputopo.model.finding_kinds import symptom
from gputopo.model.step_failure import StepFailure
from gputopo.runfolder.layout import (EVENTS_JSONL, MEASUREMENTS_JSONL, NUMERICS_JSONL, RUN_JSON, STATUSES,
                                      TOPOLOGY_JSON, UNFINISHED)
from gputopo.runfolder.reader import Pair, planned_pairs

#: Bench test groups that write measurements.jsonl.
MEASURING_TESTS = ("p2p", "dp", "collectives", "self")


def measured_pairs(measurements: Sequence[Measurement], numerics: Sequence[Dict[str, Any]],
                   findings: Sequence[Union[Finding, StepFailure]] = ()) -> Set[Pair]:
    """Pairs the folder holds any result for: a measurement, a numerics record, a failure."""
    out: Set[Pair] = set()
    for m in measurements:
        if len(m.gpus) == 2:
            out.add((min(m.gpus), max(m.gpus)))
    for rec in numerics:
        g = sorted(int(x) for x in rec.get("gpus") or [])
        if len(g) == 2:
            out.add((g[0], g[1]))
    for f in findings:
        if symptom(f.kind) == "failure" and f.gpus and len(f.gpus) == 2:
            out.add((min(f.gpus), max(f.gpus)))
    return out


def coverage(run) -> Optional[Dict[str, Any]]:
    """``{"pairs_measured", "pairs_planned", "status", "unmeasured"}`` when the run is partial
    (it did not finish, or planned pairs have no result), else None."""
    planned = planned_pairs(run.info)
    status = run.info.get("status")
    if not planned:  # a cluster run that lost ranks ("failed") names them in its own findings
        return None if status not in ("running", "interrupted") else {
            "pairs_measured": None, "pairs_planned": None, "status": status, "unmeasured": []}
    have = measured_pairs(run.measurements, run.numerics, [*run.event_findings, *run.step_failures])
    missing = [p for p in planned if p not in have]
    if not missing and status not in UNFINISHED:
        return None
    return {"pairs_measured": len(planned) - len(missing), "pairs_planned": len(planned),
            "status": status, "unmeasured": [list(p) for p in missing]}


def partial_line(run) -> Optional[str]:
    """The line every output shows first on a partial run ("partial: 7 of 28 pairs ...")."""
    c = coverage(run)
    if c is None:
        return None
    status = f"run.json says {c['status']}" if c["status"] else "the run did not record finishing"
    if c["pairs_planned"] is None:
        return f"partial: {status}; findings judge only what was measured"
    return (f"partial: {c['pairs_measured']} of {c['pairs_planned']} pairs measured ({status}); "
            "findings judge only the measured pairs, the others are not measured, not fine")


def folder_problems(path, info: Dict[str, Any], events: List[Dict[str, Any]],
                    measurements: int, numerics: List[Dict[str, Any]]) -> List[str]:
    """What makes a bench run folder unreadable as a whole: a missing file, an unfinished run,
    a JSON-lines file holding fewer results than events.jsonl recorded. One line each."""
    out = []
    bench = bool(planned_pairs(info))
    if not (path / RUN_JSON).exists():
        out.append(f"no {RUN_JSON}: what the run was asked to measure and whether it finished "
                   "are unknown, so nothing here can stand for a whole run")
    if bench and not (path / TOPOLOGY_JSON).exists():
        out.append(f"no {TOPOLOGY_JSON}: the machine's links are unknown; link classes come "
                   "from the measurements only")
    tests = (info.get("options") or {}).get("tests") or []
    if bench and any(t in MEASURING_TESTS for t in tests) and not (path / MEASUREMENTS_JSONL).exists():
        out.append(f"no {MEASUREMENTS_JSONL}: the run's measurements are gone")
    status = info.get("status")
    if status in (UNFINISHED if bench else ("running", "interrupted")):
        out.append(f"{RUN_JSON} says the run is {status}: it did not finish, so what it did not "
                   "measure is unknown")
    elif bench and status not in STATUSES:  # a bench writes one from its start on
        said = "has no status" if status is None else f"says the run is {str(status)[:40]!r}, a status gputopo never writes"
        out.append(f"{RUN_JSON} {said}: whether the run finished is unknown (the file was edited or cut)")
    if bench and status == "complete" and not (path / EVENTS_JSONL).exists():  # a finished step writes it
        out.append(f"no {EVENTS_JSONL}: which steps finished, and how many results each delivered, is "
                   "unknown, so a file cut short cannot be told from a whole one")
    if bench and info.get("fabric") not in FABRIC_NAMES:  # the fabrics a bench run measures with
        out.append(f"{RUN_JSON} names the fabric {str(info.get('fabric'))[:40]!r}, one gputopo bench never "
                   "uses: what measured these figures is unknown (the file was edited or is not gputopo's)")
    delivered: Dict[str, int] = {}
    numerics_steps: Set[str] = set()
    stepped: Set[Pair] = set()  # pairs with a finished step ("p2p:0-1"), whatever its status
    for rec in events:
        step = rec.get("step")
        if rec.get("type") != "step-done" or not isinstance(step, str):
            continue
        ends = step.partition(":")[2].split("-")
        if len(ends) == 2 and all(e.isdigit() and len(e) < 8 for e in ends):
            stepped.add((min(int(ends[0]), int(ends[1])), max(int(ends[0]), int(ends[1]))))
        if step.startswith("numerics:"):
            numerics_steps.add(step)
        elif isinstance(rec.get("measurements"), int):
            delivered[step] = rec["measurements"]  # the latest (a resume may redo a step)
    unstepped = [p for p in planned_pairs(info) if p not in stepped]
    if bench and status == "complete" and events and unstepped:  # every step writes its line before the end
        out.append(f"{EVENTS_JSONL} records no finished step for {len(unstepped)} planned pair(s) "
                   f"({', '.join(f'{a}-{b}' for a, b in unstepped[:4])}{' ...' if len(unstepped) > 4 else ''}) "
                   "of a run that says it completed: the file lost lines, so their failures may be lost too")
    expected = sum(delivered.values())
    if expected > measurements:
        out.append(f"{MEASUREMENTS_JSONL} holds {measurements} measurement(s) but events.jsonl "
                   f"records {expected} delivered: the file was cut short or lost lines")
    have_numerics = {"numerics:{}-{}".format(*sorted(int(g) for g in rec.get("gpus") or []))
                     for rec in numerics if len(rec.get("gpus") or []) == 2}
    lost = sorted(numerics_steps - have_numerics)
    if lost:
        what = "is missing" if not (path / NUMERICS_JSONL).exists() else "lacks them"
        out.append(f"{NUMERICS_JSONL} {what}: events.jsonl records numerics for "
                   f"{len(numerics_steps)} pair(s), {len(lost)} without a result "
                   f"({', '.join(s.split(':')[1] for s in lost[:4])}"
                   f"{' ...' if len(lost) > 4 else ''})")
    return out


def unreadable(run) -> Optional[str]:
    """Why ``run`` cannot stand as a whole run (the first reason), or None: for a baseline or
    either side of a diff, where a missing result would read as 'no problem'."""
    if run.problems:
        return run.problems[0]
    line = partial_line(run)
    if line:
        return line
    if not run.measurements and not run.numerics and not run.nccl_tests:
        return "the run holds no measurement: nothing to compare or take as a baseline"
    return None
