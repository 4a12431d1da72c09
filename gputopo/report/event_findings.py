"""The findings of a run folder's events: the steps that did not finish (``hang`` / ``crash``:
the bench's step failures, step_failures.py, and the numerics' records, numerics_findings.py)
and any finding a writer recorded in events.jsonl (a cluster run's findings; a bench folder from
before step failures were recorded as facts), with the link class, the host facts on the path
and a cause filled in: the rule ``steps-not-finished`` of rules.py.
"""

from __future__ import annotations

from typing import List

from gputopo.model import Finding
from gputopo.model.finding_kinds import symptom

from .causes import path_facts
from .culprits import killed
from .expected import class_of
from .numerics_findings import numerics_failure_findings
from .run_folder import Run
from .step_failures import kill_reason_cause, step_failure_findings


def run_event_findings(run: Run) -> List[Finding]:
    """The steps that did not finish (hang / crash: the bench's step failures, the numerics'
    records) and any finding a writer put in events.jsonl (a folder from before step failures
    were recorded as facts has its hangs and crashes there), with the link class, the host
    facts on their path and a cause filled in."""
    out = []
    for f in (run.event_findings + step_failure_findings(run.step_failures)
              + numerics_failure_findings(run.numerics, run.event_findings)):
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


def step_failure_cause(run: Run, f: Finding):
    """A default explanation for a hang or crash without one (a SIGKILL has its own)."""
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
