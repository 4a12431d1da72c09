"""The one table of finding kinds: every property a kind has, in one entry per kind.

A finding's kind decides more than its name: which pairs it marks in the report's pair rows and
in `gputopo place`, whether it degrades or breaks a placement (and the words it says there),
whether a cluster node is drained for it, whether it is trouble with the run's own data, whether
it is judged against the history, and in which family of symptoms the culprit search localises it.
Each of those is a field of the kind's entry below, and every module that asks reads it here
(`tests/unit/model/test_finding_kind_table.py` fails where a module keeps a list of kinds of its
own). docs/findings.md documents each kind under the section of its family, with the severities
of its policy; its "Kind properties" part is generated from this table
(`tests/helpers/finding_kinds_doc.py`), and `tests/docs/test_finding_kinds_doc.py` checks both.

The order of the table is the vocabulary's order (``KINDS``): findings of one severity are listed
in it, so a kind is appended, never moved; kinds are never renamed.

Adding a kind: one entry here, one row in docs/findings.md (under its family's heading, with the
severities of its policy), and the rule that makes it, registered in gputopo/report/rules.py
(docs/architecture.md walks through it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

#: Severities, worst first.
SEVERITIES = ("error", "warning", "info")
#: Where a kind's finding is: one GPU, a GPU pair, a link class, a node (a host, its NICs or a
#: cluster node), the whole run, or an input (an imported file or the run folder's own data).
SCOPES = ("gpu", "pair", "class", "node", "run", "input")
#: Families: the section of docs/findings.md that documents the kind, by heading.
FAMILIES = {
    "bandwidth": "Data paths and bandwidth (bench runs and imports)",
    "numerics": "Training numerics (DP vs DDP vs one GPU)",
    "run": "Hangs, crashes and the run's own data",
    "nccl-log": "What an imported NCCL_DEBUG log says the job did",
    "scan": "What the scan sees",
    "network": "The network path of every GPU",
    "culprit": "Culprits: where the per-pair findings point",
    "history": "Against the machine's own history",
    "cluster": "Many nodes (`gputopo cluster`)",
}
#: Symptom families the culprit search localises separately (a corrupting GPU and a slow link are
#: two faults), in the order it takes them.
SYMPTOM_FAMILIES = ("data", "failure", "speed")
#: Which pairs a GPU's own finding marks (report pair rows, `gputopo place`): every pair of the
#: GPU; its PCIe pairs; its NVLink pairs; by its evidence (NVLink keys: the NVLink pairs,
#: ``pcie.replay``: the PCIe pairs); by its evidence's ``counter`` (``nvlink_*``: the NVLink
#: pairs, ``pcie_replay``: the PCIe pairs, any other counter: none).
#: The checks of ``gputopo health`` (gputopo/fleet/checks.py), in the order they are said.
HEALTH_CHECKS = ("gpus", "nvlink", "fabric", "pcie", "kernel-log", "nic", "history")

PAIR_MARKS = ("all", "pcie", "nvlink", "link-evidence", "counter")


@dataclass(frozen=True)
class KindSpec:
    """One finding kind and everything gputopo does with it besides making it."""

    name: str
    scope: str
    family: str
    #: The severities the kind's rules give it; empty: the severity of the findings it explains.
    severities: Tuple[str, ...]
    #: A GPU's own finding that marks the pairs its link carries (PAIR_MARKS), None: marks none
    #: (a pair's own finding is on its pair's row whatever its kind).
    marks_pairs: Optional[str] = None
    #: The marks reach every GPU the finding names (not only its first).
    marks_each_gpu: bool = False
    #: Placement: the words a degraded pair says (a GPU's own link problem: correct but slower).
    degrades: Optional[str] = None
    #: Placement: a degrading finding slows every pair of its GPU, not only those it marks.
    degrades_every_pair: bool = False
    #: Placement: a pair with this error is never placed ...
    breaks: bool = False
    #: ... unless only its peer path was shown bad: then it is p2p-broken, with these words.
    peer_only: Optional[str] = None
    #: A cluster node with this finding goes on drain.txt.
    drains: bool = False
    #: Trouble with the run's own data (a file cut, lines unread): said apart from the hardware's.
    data_trouble: bool = False
    #: Judged against the machine's history when a run is recorded (history_findings.json).
    history: bool = False
    #: A culprit the localisation names (it explains other findings).
    culprit: bool = False
    #: The symptom family the localisation takes it in (SYMPTOM_FAMILIES), None: not a symptom.
    symptom: Optional[str] = None
    #: A GPU's own link problem that explains slow pairs over that link (a gpu-fault's chain).
    explains_slow: bool = False
    #: A host fact that breaks PCIe peer DMA: named in a PCIe class-fault's reasoning.
    breaks_peer_dma: bool = False
    #: Alike findings (same severity and class) share a row of the findings tables; False: each
    #: finding of the kind is said on its own (each is a distinct fact, e.g. a distinct line a tool
    #: printed).
    grouped: bool = True
    #: The ``gputopo health`` check (HEALTH_CHECKS) a finding of this kind belongs to; None: a kind
    #: the passive health checks never make (said under ``gpus``, never dropped).
    health_check: Optional[str] = None

    def __post_init__(self):
        if self.scope not in SCOPES:
            raise ValueError(f"kind {self.name}: unknown scope {self.scope!r}")
        if self.family not in FAMILIES:
            raise ValueError(f"kind {self.name}: unknown family {self.family!r}")
        if any(s not in SEVERITIES for s in self.severities):
            raise ValueError(f"kind {self.name}: unknown severity in {self.severities!r}")
        if self.marks_pairs is not None and self.marks_pairs not in PAIR_MARKS:
            raise ValueError(f"kind {self.name}: unknown pair marks {self.marks_pairs!r}")
        if self.symptom is not None and self.symptom not in SYMPTOM_FAMILIES:
            raise ValueError(f"kind {self.name}: unknown symptom family {self.symptom!r}")
        if self.health_check is not None and self.health_check not in HEALTH_CHECKS:
            raise ValueError(f"kind {self.name}: unknown health check {self.health_check!r}")
        if self.peer_only and not self.breaks:
            raise ValueError(f"kind {self.name}: peer_only words without breaks")


K = KindSpec
ALL = ("error", "warning", "info")

KIND_TABLE: Tuple[KindSpec, ...] = (
    K("corrupt", "pair", "bandwidth", ("error",), breaks=True, drains=True, symptom="data",
      peer_only="wrong data on raw peer copies, copies through host memory correct (measured)"),
    K("nan", "pair", "numerics", ALL, breaks=True, symptom="data",
      peer_only="nn.DataParallel went NaN, DDP fine (measured)"),
    K("diverged", "pair", "numerics", ALL, breaks=True, symptom="data",
      peer_only="nn.DataParallel diverged, DDP fine (measured)"),
    K("slow", "pair", "bandwidth", ("warning", "info"), symptom="speed"),
    K("outlier", "pair", "bandwidth", ("warning",), symptom="speed"),
    K("p2p-slower-than-staged", "pair", "bandwidth", ("warning", "info"), symptom="speed"),
    K("hang", "pair", "run", ("error",), breaks=True, drains=True, symptom="failure"),
    K("crash", "pair", "run", ("error",), breaks=True, drains=True, symptom="failure"),
    K("nvlink-down", "gpu", "scan", ("error", "warning"), marks_pairs="nvlink", degrades="NVLinks down",
      explains_slow=True, health_check="nvlink"),
    K("pcie-downgraded", "gpu", "scan", ("warning",), marks_pairs="pcie",
      degrades="PCIe link narrower than it can be", degrades_every_pair=True, explains_slow=True, health_check="pcie"),
    K("link-errors", "gpu", "scan", ("warning", "info"), marks_pairs="link-evidence",
      degrades="link error counters above NVIDIA DCGM's limit", explains_slow=True, health_check="nvlink"),
    K("p2p-unsupported", "pair", "scan", ("warning", "info"), health_check="pcie"),
    K("iommu", "node", "scan", ("warning", "info"), breaks_peer_dma=True, health_check="pcie"),
    K("acs", "node", "scan", ("warning", "info"), breaks_peer_dma=True, health_check="pcie"),
    K("topology-mismatch", "node", "cluster", ("error",), drains=True),
    K("slow-node", "node", "cluster", ("error",), drains=True),
    K("gpu-lost", "gpu", "scan", ("error",), marks_pairs="all", health_check="gpus"),
    K("noisy", "run", "bandwidth", ("warning", "info")),
    K("incomplete-data", "input", "run", ("warning", "info"), data_trouble=True),
    K("invalid-data", "input", "run", ("warning", "info"), data_trouble=True),
    K("ecc", "gpu", "scan", ALL, health_check="gpus"),
    K("remapped-rows", "gpu", "scan", ALL, health_check="gpus"),
    K("retired-pages", "gpu", "scan", ("warning", "info"), health_check="gpus"),
    K("xid", "gpu", "scan", ALL, health_check="kernel-log"),
    K("thermal", "gpu", "scan", ("warning", "info"), health_check="gpus"),
    K("gpu-fault", "gpu", "culprit", (), culprit=True),
    K("link-fault", "pair", "culprit", (), culprit=True),
    K("class-fault", "class", "culprit", (), culprit=True),
    K("worker-killed", "run", "culprit", ("warning",), culprit=True),
    K("bandwidth-cliff", "input", "bandwidth", ("warning",)),
    K("not-verified", "input", "bandwidth", ("info",)),
    K("rdma-test-failed", "input", "bandwidth", ("error",)),
    K("rdma-slow", "input", "bandwidth", ("warning",)),
    K("rdma-bandwidth", "input", "bandwidth", ("info",)),
    K("nvlink-not-connected", "gpu", "scan", ("info",), health_check="nvlink"),
    K("nvlink-fabric", "gpu", "scan", ALL, marks_pairs="nvlink", marks_each_gpu=True,
      degrades="NVLink fabric not healthy or not registered (NVML)", health_check="fabric"),
    K("drift", "pair", "history", ("warning",), history=True, health_check="history"),
    K("counter-growth", "gpu", "history", ALL, marks_pairs="counter",
      degrades="link error counters growing between scans", history=True, health_check="history"),
    K("out-of-memory", "node", "run", ("error",)),
    K("rank-error", "node", "cluster", ("error",), drains=True),
    K("stopped", "node", "cluster", ("error",)),
    K("nccl-init-failed", "input", "nccl-log", ("error",)),
    K("nccl-gdr-off", "input", "nccl-log", ("warning", "info")),
    K("nccl-socket-fallback", "input", "nccl-log", ("warning", "info")),
    K("nccl-far-nic", "input", "nccl-log", ("warning",)),
    K("nccl-comm-failed", "input", "nccl-log", ("error",)),
    K("nic-far", "gpu", "network", ("warning", "info"), health_check="nic"),
    K("gpudirect-rdma", "node", "network", ("warning", "info"), health_check="nic"),
    K("nic-port-down", "node", "network", ("warning", "info"), health_check="nic"),
    K("nic-rate", "node", "network", ("warning",), health_check="nic"),
    K("nic-errors", "node", "network", ("info",), health_check="nic"),
    K("no-peer-access", "pair", "bandwidth", ("warning", "info")),
    K("driver-error", "gpu", "scan", ("error", "warning"), health_check="kernel-log"),
    K("tool-flagged", "input", "run", ("error", "warning"), grouped=False),
    K("slow-gpu-group", "gpu", "bandwidth", ("warning", "info"), marks_pairs="all", marks_each_gpu=True,
      degrades="slower than the other GPUs of its model with every peer (measured)"),
    K("nccl-known-warn", "input", "nccl-log", ("warning",)),
    K("nccl-collnet-failed", "input", "nccl-log", ("warning",)),
)

_INDEX: Dict[int, Dict[str, int]] = {}


def _index() -> Dict[str, int]:
    """Kind -> its place in the table (rebuilt when the table is replaced, as a test does)."""
    key = id(KIND_TABLE)
    ix = _INDEX.get(key)
    if ix is None:
        _INDEX.clear()
        ix = _INDEX[key] = {k.name: n for n, k in enumerate(KIND_TABLE)}
    return ix


def is_kind(name: str) -> bool:
    return name in _index()


def kind_index(name: str) -> int:
    """The kind's place in the vocabulary (findings of one severity are listed in this order)."""
    return _index()[name]


def spec(name: str) -> KindSpec:
    """The kind's entry; KeyError for a name that is no kind."""
    return KIND_TABLE[_index()[name]]


def kind_names() -> Tuple[str, ...]:
    return tuple(k.name for k in KIND_TABLE)


def kinds_where(**fields) -> Tuple[str, ...]:
    """The kinds whose entries have these field values (``drains=True``, ``symptom="speed"``)."""
    return tuple(k.name for k in KIND_TABLE if all(getattr(k, f) == v for f, v in fields.items()))


def marks_pairs(name: str) -> Optional[str]:
    return spec(name).marks_pairs if is_kind(name) else None


def degrades(name: str) -> Optional[str]:
    """The placement words of a kind that degrades a GPU's pairs, None for one that does not."""
    return spec(name).degrades if is_kind(name) else None


def drains(name: str) -> bool:
    return is_kind(name) and spec(name).drains


def health_check(name: str) -> Optional[str]:
    """The ``gputopo health`` check a kind belongs to (None: a kind no passive check makes)."""
    return spec(name).health_check if is_kind(name) else None


def is_data_trouble(name: str) -> bool:
    return is_kind(name) and spec(name).data_trouble


def is_history_kind(name: str) -> bool:
    return is_kind(name) and spec(name).history


def is_grouped(name: str) -> bool:
    """Whether alike findings of the kind share a row (see KindSpec.grouped)."""
    return not is_kind(name) or spec(name).grouped


def is_culprit(name: str) -> bool:
    return is_kind(name) and spec(name).culprit


def family(name: str) -> Optional[str]:
    return spec(name).family if is_kind(name) else None


def symptom(name: str) -> Optional[str]:
    return spec(name).symptom if is_kind(name) else None
