"""`corrupt` findings of a run folder: wrong elements after a copy, a DataParallel primitive or a
collective, and nccl-tests' own out-of-bounds count.

Wrong data from measurements has one definition, measured_findings.corrupt_findings: per pair
(or GPU, or collective group) every test that returned wrong data on it and the data path each
exercised. The *pattern* is the diagnosis, added here (:func:`with_causes`) with the host facts:
peer copies wrong while staged copies are right points at the P2P path (IOMMU/ACS); staged copies
wrong too points at a GPU or its link.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional

from gputopo.model import Finding, Topology
from gputopo.model.flagged_lines import TOOL_LINES

from .why.causes import collective_broken, path_facts, peer_path_broken, staged_path_broken
from gputopo.model.topology import class_of


def with_causes(found: List[Finding], topo: Optional[Topology]) -> List[Finding]:
    """``corrupt`` findings (measured_findings.corrupt_findings, the one definition of wrong data
    from measurements) with the host facts on their path, and the cause and remedies the pattern
    of their data paths supports."""
    out = []
    for f in found:
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


def nccl_tests_findings(logs: List[Dict[str, Any]], topo: Optional[Topology]) -> List[Finding]:
    """nccl-tests' own "Out of bounds values" count is corruption too: the number of results its data
    check found outside the expected bounds (src/common.cu sums them over threads and ranks), i.e.
    wrong data, not writes outside the buffers; where it went wrong the count does not tell."""
    out = []
    for log in logs:
        oob = log.get("out_of_bounds")
        if isinstance(oob, int) and oob > 0:
            gpus = log.get("gpus") or None
            lc = class_of(topo, gpus) if gpus else None
            out.append(Finding(
                "corrupt", "error",
                f"nccl-tests {log.get('op', '?')} reported {oob} out-of-bounds value(s) ({log.get('file', '?')}): "
                "its own data check found results outside the expected bounds",
                gpus=gpus, link_class=str(lc) if lc else None,
                evidence={"out_of_bounds": oob, "file": log.get("file"),
                          # nccl-tests' own line (printf "# Out of bounds values : %d %s"): this finding says it
                          TOOL_LINES: [f"Out of bounds values : {oob} {log.get('out_of_bounds_status') or ''}".strip()]},
                cause="the collective returned wrong data; which GPU pair, transport or size is not known from "
                      "this count: the #wrong column of each size, a per-pair run (`gputopo bench --pairs I,J`) or "
                      "a rerun with one transport disabled tells",
                remedies=["rerun with NCCL_DEBUG=INFO; try NCCL_P2P_DISABLE=1 to isolate the transport",
                          "run `gputopo bench` on the GPUs to find the pair that corrupts"]))
    return out
