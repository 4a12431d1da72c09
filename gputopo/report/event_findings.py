"""The findings of a run folder's events: the steps that did not finish (``hang`` / ``crash``:
the bench's steps and the numerics' ways, their failure records read by the one reader,
step_failures.py)
and any finding a writer recorded in events.jsonl (a cluster run's findings; a bench folder from
before step failures were recorded as facts), with the link class, the host facts on the path
and a cause filled in: the rule ``steps-not-finished`` of rules.py.
"""

from __future__ import annotations

from typing import List

from gputopo.model import Finding
from gputopo.model.finding_kinds import symptom

from .why.causes import path_facts
from .why.culprits import step_failure_cause
from gputopo.model.topology import class_of
from .run_folder import Run
from .step_failures import step_failure_findings


def run_event_findings(run: Run) -> List[Finding]:
    """The steps that did not finish (hang / crash: the failure records of the bench's steps
    and the numerics' ways) and any finding a writer put in events.jsonl (a folder from before step failures
    were recorded as facts has its hangs and crashes there), with the link class, the host
    facts on their path and a cause filled in."""
    out = []
    for f in run.event_findings + step_failure_findings(run.step_failures):
        if f.link_class is None and f.gpus and len(f.gpus) >= 2:
            lc = class_of(run.topology, f.gpus)
            if lc is not None:
                f = Finding(**{**f.to_json(), "link_class": str(lc)})
        if not f.evidence or not any(k in f.evidence for k in ("iommu_mode", "acs_redirect_bridges")):
            if f.gpus and len(f.gpus) >= 2 and symptom(f.kind) == "failure":
                facts = path_facts(run.topology, f.gpus, f.link_class).evidence()
                if facts:
                    f = Finding(**{**f.to_json(), "evidence": {**(f.evidence or {}), **facts}})
        if symptom(f.kind) == "failure" and not f.cause:
            cause, remedies = step_failure_cause(run, f)
            f = Finding(**{**f.to_json(), "cause": cause, "remedies": list(f.remedies) or remedies})
        out.append(f)
    return out
