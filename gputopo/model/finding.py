"""Findings: what gputopo concludes, in a stable vocabulary users script against.

A finding is ``{kind, severity, gpus, link_class, message, evidence}`` plus the likely cause and
remedies. Kinds may be added when a new check needs one; never renamed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

KINDS = (
    "corrupt", "nan", "diverged", "slow", "outlier", "p2p-slower-than-staged", "hang", "crash",
    "nvlink-down", "pcie-downgraded", "link-errors", "p2p-unsupported", "iommu", "acs",
    "topology-mismatch", "slow-node", "gpu-lost", "noisy", "incomplete-data", "invalid-data",
    "ecc", "remapped-rows", "retired-pages", "xid", "thermal",
    # The culprit a run's per-pair findings point at (gputopo.report.localise).
    "gpu-fault", "link-fault", "class-fault", "worker-killed",
    # busbw along an imported nccl-tests size sweep falls and does not recover (report/sweep_findings.py).
    "bandwidth-cliff",
    # An imported nccl-tests run that checked no data (validation: 0, -c 0): #wrong means nothing.
    "not-verified",
    # An imported perftest run (ib_write_bw & co., report/perftest_findings.py): it failed; its
    # bandwidth below its port's rate; its bandwidth stated (judged fine, or not judged and why).
    "rdma-test-failed", "rdma-slow", "rdma-bandwidth",
    # A GPU with NVLink ports and none connected (an unbridged PCIe card): info, fails nothing.
    "nvlink-not-connected",
    # An NVSwitch GPU NVML reports not (successfully) registered with its NVLink fabric.
    "nvlink-fabric",
    # Against the machine's own history (gputopo.report.history_findings).
    "drift", "counter-growth",
    # A cluster group whose all_reduce buffer could not be allocated: nothing measured there.
    "out-of-memory",
    # A cluster rank that failed on its own (its error, by host and rank; its peers only waited),
    # and one that a signal stopped (SIGTERM, SIGINT: the run is partial, the node not blamed).
    "rank-error", "stopped",
    # What an imported NCCL_DEBUG log says the job did (gputopo.report.nccl_debug_findings): an init
    # that failed, GPUDirect RDMA not used, sockets instead of IB, a NIC farther than the nearest.
    "nccl-init-failed", "nccl-gdr-off", "nccl-socket-fallback", "nccl-far-nic",
    # ... and a failure after init, while NCCL moved data (its progress thread's error path).
    "nccl-comm-failed",
    # The network path of each GPU (gputopo.report.network_checks): its nearest RDMA NIC far
    # (NODE/SYS) while other GPUs have one beside them; GPUDirect RDMA unavailable (kernel side) or
    # off by NCCL's distance rule; a NIC port not Active; a port below its peers' rate; NIC port
    # error counters not zero. Each names its NIC in evidence["nic"].
    "nic-far", "gpudirect-rdma", "nic-port-down", "nic-rate", "nic-errors",
    # GPU pairs an imported output shows without peer access (report/peer_access.py).
    "no-peer-access",
    # An NVIDIA driver line of a kernel log that is no Xid and says a GPU or an NVSwitch failed
    # (RmInitAdapter failed, a fatal SXid, NV_ERR_RESET_REQUIRED, ...: report/kernel_log_findings.py).
    "driver-error",
)
#: Severities, worst first.
SEVERITIES = ("error", "warning", "info")


@dataclass
class Finding:
    kind: str
    severity: str
    message: str
    gpus: Optional[List[int]] = None
    link_class: Optional[str] = None
    evidence: Dict[str, Any] = field(default_factory=dict)
    cause: Optional[str] = None
    remedies: List[str] = field(default_factory=list)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown finding kind {self.kind!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")
        if self.gpus is not None:
            self.gpus = list(self.gpus)

    @property
    def sort_key(self):
        """Worst first, then by GPUs."""
        return (SEVERITIES.index(self.severity), KINDS.index(self.kind), self.gpus or [])

    def to_json(self) -> Dict[str, Any]:
        return {
            "kind": self.kind, "severity": self.severity, "gpus": self.gpus,
            "link_class": self.link_class, "message": self.message, "evidence": self.evidence,
            "cause": self.cause, "remedies": list(self.remedies),
        }

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Finding":
        return cls(**d)


def gpu_ranges(gpus) -> str:
    """[0,1,2,3,5] -> '0-3,5': how GPU sets are written in messages."""
    xs = sorted(set(gpus))
    parts, start = [], None
    for k, x in enumerate(xs):
        if start is None:
            start = x
        if k == len(xs) - 1 or xs[k + 1] != x + 1:
            parts.append(str(start) if start == x else f"{start}-{x}")
            start = None
    return ",".join(parts)


def where_text(gpus, link_class: Optional[str] = None) -> str:
    """How a finding's message names its place: ``GPUs 0,4 (SYS)``, ``GPU 2``."""
    g = ",".join(map(str, gpus))
    w = f"GPUs {g}" if len(gpus) > 1 else f"GPU {g}"
    return f"{w} ({link_class})" if link_class else w


def worst_first(findings: List[Finding]) -> List[Finding]:
    return sorted(findings, key=lambda f: f.sort_key)
