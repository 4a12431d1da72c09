"""The one home of "why": what explains the findings the rules made.

The rules (gputopo/report/rules.py) say what is wrong; this package says why, and nothing else
does. Its entry point for the judge is :func:`explain_findings`: the smallest culprit (a GPU, a link, a
link class, a killed worker) that explains the per-pair findings, each finding marked with the
culprit that explains it. Its modules:

- ``causes``: the host facts on a pair's path (IOMMU, ACS, NCCL's route) and the causes and
  remedies they support; the rules ask it as they make their findings;
- ``culprits``: a culprit's finding, words and evidence; a killed worker; the cause of a hang
  or crash recorded without one (``step_failure_cause``, asked by report/event_findings.py);
- ``localise``: the search for the culprits, one symptom family at a time (the kind table's
  ``symptom``);
- ``root_causes``, ``diagnosis``, ``explain``: how every output says the why (root causes
  first, the findings each explains nested below; the explanation of a group of findings),
  which the views in gputopo/report/outputs/ print.
"""

from __future__ import annotations

from typing import List, Optional

from gputopo.model import Finding, Measurement, Topology

from .localise import with_explained, localise, mark_explained


def explain_findings(findings: List[Finding], topo: Optional[Topology], measurements: List[Measurement],
            numerics: List[dict]) -> List[Finding]:
    """``findings``, each marked with the culprits that explain it (``evidence.explained_by``),
    followed by the culprits, each with the findings it explains (``evidence.explains``)."""
    culprits = localise(findings, topo, measurements, numerics)
    return mark_explained(findings, culprits) + with_explained(culprits)
