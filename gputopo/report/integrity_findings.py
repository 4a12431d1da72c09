"""`corrupt` findings: wrong elements after a copy, a DataParallel primitive or a collective.

measured_findings.py gathers, per pair (or GPU, or collective group), every test that returned wrong data
on it and the data path each exercised (measured_findings.corrupt_findings); the *pattern*
is the diagnosis, added here with the host facts: peer copies wrong while staged copies are
right points at the P2P path (IOMMU/ACS); staged copies wrong too points at a GPU or its link.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional

from gputopo.model import Finding, Measurement, Topology

from .causes import collective_broken, path_facts, peer_path_broken, staged_path_broken
from .headline import link_class_of
from .measured_findings import corrupt_findings as measured_corrupt_findings


def corrupt_findings(measurements: List[Measurement], topo: Optional[Topology]) -> List[Finding]:
    out = []
    for f in measured_corrupt_findings(measurements, lambda m: link_class_of(topo, m)):
        bad_paths = {t["path"] for t in f.evidence["tests"].values()}
        facts = path_facts(topo, list(f.gpus or ()), f.link_class)
        if "staged" in bad_paths:
            cause, remedies = staged_path_broken(facts)
        elif "peer" in bad_paths:
            cause, remedies = peer_path_broken(facts, "corrupted")
        else:
            cause, remedies = collective_broken(facts)
        out.append(dataclasses.replace(f, evidence={**f.evidence, **facts.evidence()},
                                       cause=cause, remedies=remedies))
    return out
