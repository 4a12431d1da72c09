"""The passive checks of `gputopo health`: the scan's findings (gputopo/report/rules.py's
``scan`` judgement) and the history's (counter growth, drift) grouped by what they look at, each
with whether it applies to this node and what it was judged against.

A check is ``applicable`` (judged), ``not-applicable`` (the node has nothing it could look at:
no NVLink on a PCIe box, no fabric on a one-GPU VM, no RDMA NIC) or ``not-judged`` (it could
have looked but could not: the kernel log unreadable, no earlier scan in the history, the budget
spent). A check's findings are always kept, whatever its applicability: a fact read is said.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from gputopo.model import Finding, Topology
from gputopo.model.fabric import GpuFabric
from gputopo.model.finding import worst_first
from gputopo.model.finding_kinds import HEALTH_CHECKS, health_check
from gputopo.model.health import GpuHealth
from gputopo.model.values import is_value

APPLICABLE, NOT_APPLICABLE, NOT_JUDGED = "applicable", "not-applicable", "not-judged"

#: The checks, in the order they are said (a kind's check is its entry's ``health_check`` in
#: model/finding_kinds.py; a kind with none goes to ``gpus``: never dropped).
CHECKS = HEALTH_CHECKS


@dataclass
class CheckResult:
    name: str
    applicability: str
    #: what it was judged against, or why it was not
    basis: str
    findings: List[Finding] = field(default_factory=list)
    #: what it read that is no finding (the kernel log's non-fatal SXids, lines no rule judges)
    notes: List[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        """fail / warn (its findings decide, whatever its applicability), else pass, not-applicable
        or not-judged."""
        severities = {f.severity for f in self.findings}
        if "error" in severities:
            return "fail"
        if "warning" in severities:
            return "warn"
        return {APPLICABLE: "pass"}.get(self.applicability, self.applicability)

    def to_json(self) -> Dict[str, Any]:
        return {"name": self.name, "status": self.status, "applicability": self.applicability,
                "basis": self.basis, "findings": [f.to_json() for f in worst_first(self.findings)],
                "notes": list(self.notes)}


def not_judged(name: str, why: str) -> CheckResult:
    return CheckResult(name, NOT_JUDGED, why)


def _split(findings: List[Finding]) -> Dict[str, List[Finding]]:
    out: Dict[str, List[Finding]] = {c: [] for c in CHECKS}
    for f in findings:
        out[health_check(f.kind) or "gpus"].append(f)
    return out


def _read(topo: Topology) -> List[Any]:
    return [g for g in topo.gpus if g.lost is None]


def scan_checks(topo: Topology, findings: List[Finding], kernel_notes: Optional[List[str]] = None
                ) -> List[CheckResult]:
    """Every check but the history's, from a scan and its findings."""
    by = _split(findings)
    gpus, read = topo.gpus, _read(topo)
    n = len(gpus)
    out: List[CheckResult] = []

    healthy = sum(1 for g in read if isinstance(g.health, GpuHealth))
    if not gpus:
        out.append(CheckResult("gpus", NOT_JUDGED, f"no GPU read ({topo.source})", by["gpus"]))
    else:
        health = (f"health of {healthy}: ECC, row remapping, retired pages, temperature, clocks"
                  if healthy else "health n/a (NVML gave none)")
        out.append(CheckResult("gpus", APPLICABLE, f"NVML ({topo.source}): {n} GPU(s), {n - len(read)} lost; "
                               f"{health}", by["gpus"]))

    ports = sum(len(g.nvlinks) for g in read)
    if n < 2:
        why = "one GPU: no peer to link to" if n == 1 else "no GPU read"
        out.append(CheckResult("nvlink", NOT_APPLICABLE, why, by["nvlink"]))
    elif not ports:
        out.append(CheckResult("nvlink", NOT_APPLICABLE, "no NVLink port on these GPUs (PCIe only)", by["nvlink"]))
    else:
        out.append(CheckResult("nvlink", APPLICABLE, f"NVLink state and error counters of {ports} ports on "
                               f"{len(read)} GPUs (NVML), against like GPUs' active links", by["nvlink"]))

    in_fabric = [g for g in read if isinstance(g.fabric, GpuFabric)]
    if not in_fabric:
        out.append(CheckResult("fabric", NOT_APPLICABLE, "no GPU is in an NVLink fabric (NVML: fabric info "
                               "not supported)", by["fabric"]))
    elif n < 2:
        out.append(CheckResult("fabric", NOT_APPLICABLE, "one GPU: no traffic of its uses the NVLink fabric "
                               "(its fabric state is said, not judged)", by["fabric"]))
    else:
        out.append(CheckResult("fabric", APPLICABLE, f"NVLink fabric registration and health of "
                               f"{len(in_fabric)} GPU(s) (NVML GPU fabric info)", by["fabric"]))

    if not read:
        out.append(CheckResult("pcie", NOT_JUDGED, "no GPU read", by["pcie"]))
    else:
        p2p = f"; P2P status of {len(topo.pairs)} pair(s)" if n > 1 else ""
        out.append(CheckResult("pcie", APPLICABLE, f"PCIe link of {len(read)} GPU(s) against its maximum; "
                               f"IOMMU mode and ACS of the bridges above them{p2p}", by["pcie"]))

    src = topo.host.kernel_log
    if is_value(src):
        out.append(CheckResult("kernel-log", APPLICABLE, f"kernel log read with {src}: Xids, SXids and NVIDIA "
                               "driver lines", by["kernel-log"], list(kernel_notes or [])))
    else:
        out.append(CheckResult("kernel-log", NOT_JUDGED, f"kernel log not read ({getattr(src, 'reason', src)})",
                               by["kernel-log"], list(kernel_notes or [])))

    nic_ports = sum(len(nic.ports) for nic in topo.nics)
    if not topo.nics:
        out.append(CheckResult("nic", NOT_APPLICABLE, "no RDMA NIC on this node", by["nic"]))
    else:
        out.append(CheckResult("nic", APPLICABLE, f"{len(topo.nics)} RDMA NIC(s), {nic_ports} port(s): state, "
                               "rate against like ports, error counters; GPUDirect RDMA", by["nic"]))
    out[0].findings += by["history"]  # the scan makes no history kind; were it to, it is still said
    return out
