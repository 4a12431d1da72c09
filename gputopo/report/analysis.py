"""A run folder -> its findings (worst first), headlines and notes: the judge of a bench run or an import.

The findings come from the registered rules (rules.py: each reads some of the run's facts and
makes some kinds; one loop runs them), then the culprits that explain them (why/)
and the findings judged against the history when the run was recorded (history_record.py). The
notes say what was read and how (an import's --topo, its GPU numbering, peer access, a kernel
log; the series that reached their published figure, those none applies to).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List

from gputopo.runfolder.settings import NCCL_ENV_KEY
from gputopo.model import Finding, worst_first
from gputopo.model.finding_kinds import is_culprit

from .why.causes import run_nccl_settings
from .expected_basis import expected_notes, no_reference_notes
from .headline import Headline, headlines
from .import_numbering import gpu_numbering_notes, topology_file_notes
from .peer_access import peer_access_notes
from .kernel_log_findings import kernel_log_notes
from .single_gpu import single_gpu_notes
from .why import explain_findings
from .rules import run_findings
from .run_folder import Run


@dataclass
class Analysis:
    findings: List[Finding]
    headlines: List[Headline]
    notes: List[str] = field(default_factory=list)

    @property
    def localised(self) -> List[Finding]:
        """The culprits (gputopo.report.why), each with the findings it explains."""
        return [f for f in self.findings if is_culprit(f.kind)]


def analyze(run: Run) -> Analysis:
    """Every finding of ``run``; NCCL routes in causes and remedies are judged under the NCCL
    settings the run was measured with (run.json ``nccl_env``), not the reader's."""
    with run_nccl_settings(run.info.get(NCCL_ENV_KEY)):
        return _analyze(run)


def _analyze(run: Run) -> Analysis:
    notes = list(run.notes)
    topo = run.topology
    heads = headlines(run.measurements, topo)
    notes += topology_file_notes(run)  # what reading an import's --topo file said (cut, no legend)
    notes += gpu_numbering_notes(run)  # which --topo GPU each imported device is, and on what basis
    notes += peer_access_notes(run)
    notes += kernel_log_notes(run)
    notes += single_gpu_notes(run, heads)  # an imported pair tool's output of one GPU: no pair measured
    findings = run_findings(run, heads)  # every registered rule of a run (rules.py)
    findings = explain_findings(findings, topo, run.measurements, run.numerics)  # the culprits (why/)
    if run.history is not None:  # judged against the history when the run was recorded
        findings += run.history.findings
    if any(m.of_stand_ins for m in run.measurements):
        notes.append("cpu fabric: timings are of CPU processes, so no efficiency, slow, outlier or "
                     "staged-vs-peer judgement is made from them")
    notes += expected_notes(heads, topo)  # the series that reached their published figure
    notes += no_reference_notes(heads, topo)  # the series no published figure applies to, and why
    return Analysis(findings=worst_first(findings), headlines=heads, notes=notes)
