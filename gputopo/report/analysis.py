"""A run's measurements + topology + host facts -> findings, worst first.

Sources, each in its own module: the scan's problems (topology_checks.py), steps that did not
finish (hang / crash: the bench's step failures, step_failures.py, and the numerics' records,
numerics_findings.py), wrong data (integrity_findings.py), training numerics
(numerics_findings.py), bandwidth (bandwidth_findings.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from gputopo.runfolder.settings import NCCL_ENV_KEY
from gputopo.model import Finding, Topology, worst_first
from gputopo.model.finding_kinds import is_culprit, symptom

from .bandwidth_findings import noisy_findings, outlier_findings, slow_findings, staged_findings
from .causes import path_facts, run_nccl_settings
from .culprits import killed
from .data_findings import data_findings
from .expected import class_of
from .expected_basis import expected_notes, no_reference_notes
from .headline import Headline, headlines
from .import_findings import import_findings
from .import_numbering import gpu_numbering_notes, topology_file_notes
from .peer_access import peer_access_notes
from .nccl_debug_findings import nccl_debug_findings
from .integrity_findings import corrupt_findings
from .kernel_log_findings import kernel_log_findings, kernel_log_notes
from .sweep_findings import cliff_findings
from .localise import finish, localise, mark_explained
from .numerics_findings import numerics_failure_findings, numerics_findings
from .run_folder import Run
from .step_failures import kill_reason_cause, step_failure_findings


@dataclass
class Analysis:
    findings: List[Finding]
    headlines: List[Headline]
    notes: List[str] = field(default_factory=list)

    @property
    def localised(self) -> List[Finding]:
        """The culprits (gputopo.report.localise), each with the findings it explains."""
        return [f for f in self.findings if is_culprit(f.kind)]


def scan_findings(topo: Optional[Topology], notes: List[str]) -> List[Finding]:
    """The lead's topology checks; a missing module is noted, not fatal."""
    if topo is None:
        return []
    try:
        from gputopo.report.topology_checks import topology_findings
    except ModuleNotFoundError as e:  # pragma: no cover - only while the module is being written
        if e.name != "gputopo.report.topology_checks":
            raise
        notes.append("scan checks unavailable (gputopo.report.topology_checks missing)")
        return []
    return list(topology_findings(topo))


def event_findings(run: Run) -> List[Finding]:
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
            cause, remedies = _step_failure_cause(run, f)
            f = Finding(**{**f.to_json(), "cause": cause, "remedies": list(f.remedies) or remedies})
        out.append(f)
    return out


def _step_failure_cause(run: Run, f: Finding):
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


def nccl_tests_findings(run: Run) -> List[Finding]:
    """nccl-tests' own "Out of bounds values" count (writes outside the buffers) is corruption too."""
    out = []
    for log in run.nccl_tests:
        oob = log.get("out_of_bounds")
        if isinstance(oob, int) and oob > 0:
            gpus = log.get("gpus") or None
            lc = class_of(run.topology, gpus) if gpus else None
            out.append(Finding(
                "corrupt", "error",
                f"nccl-tests {log.get('op', '?')} wrote {oob} out-of-bounds value(s) ({log.get('file', '?')})",
                gpus=gpus, link_class=str(lc) if lc else None,
                evidence={"out_of_bounds": oob, "file": log.get("file")},
                cause="the collective wrote outside its buffers: a transport or driver fault",
                remedies=["rerun with NCCL_DEBUG=INFO; try NCCL_P2P_DISABLE=1 to isolate the transport"]))
    return out


def _identity(f: Finding):
    return (f.kind, tuple(sorted(f.gpus)) if f.gpus else None)


def analyze(run: Run) -> Analysis:
    """Every finding of ``run``; NCCL routes in causes and remedies are judged under the NCCL
    settings the run was measured with (run.json ``nccl_env``), not the reader's."""
    with run_nccl_settings(run.info.get(NCCL_ENV_KEY)):
        return _analyze(run)


def _analyze(run: Run) -> Analysis:
    notes = list(run.notes)
    topo = run.topology
    heads = headlines(run.measurements, topo)
    corrupt = corrupt_findings(run.measurements, topo) + nccl_tests_findings(run)
    corrupt_pairs = {tuple(sorted(f.gpus)) for f in corrupt if f.gpus}
    derived: List[Finding] = []
    derived += corrupt
    derived += numerics_findings(run.numerics, topo, corrupt_pairs)
    derived += slow_findings(heads, topo)
    derived += outlier_findings(heads, topo)
    derived += staged_findings(run.measurements, topo)
    derived += noisy_findings(run.measurements, topo)
    derived += import_findings(run)
    notes += topology_file_notes(run)  # what reading an import's --topo file said (cut, no legend)
    notes += gpu_numbering_notes(run)  # which --topo GPU each imported device is, and on what basis
    notes += peer_access_notes(run)
    derived += nccl_debug_findings(run.nccl_debug, topo)  # an imported NCCL_DEBUG log (import nccl-debug --into)
    derived += cliff_findings(run.measurements)
    derived += kernel_log_findings(run)  # an imported kernel log's NVIDIA driver lines that are no Xid
    notes += kernel_log_notes(run)
    # A writer may also have recorded a finding this analysis derives from the data (e.g. the
    # bench's own `corrupt`): the analysed one, with host facts and causes, replaces it.
    seen = {_identity(f) for f in derived}
    events = [f for f in event_findings(run) if _identity(f) not in seen]
    findings: List[Finding] = scan_findings(topo, notes) + events + derived + data_findings(run)
    culprits = localise(findings, topo, run.measurements, run.numerics)
    findings = mark_explained(findings, culprits) + finish(culprits)
    if run.history is not None:  # judged against the history when the run was recorded
        findings += run.history.findings
    fabrics = {m.fabric for m in run.measurements}
    if "cpu" in fabrics:
        notes.append("cpu fabric: timings are of CPU processes, so no efficiency, slow, outlier or "
                     "staged-vs-peer judgement is made from them")
    notes += expected_notes(heads, topo)  # the series that reached their published figure
    notes += no_reference_notes(heads, topo)  # the series no published figure applies to, and why
    return Analysis(findings=worst_first(findings), headlines=heads, notes=notes)
