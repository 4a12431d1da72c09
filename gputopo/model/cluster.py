"""A cluster run's records: each all_reduce of a group of nodes (GroupResult), each round
(RoundRecord), the ranks lost (LostRank) and the whole run (Outcome). gputopo/cluster measures
them (cluster/rounds.py runs the rounds, a backend fills the results); gputopo/report judges
them (report/cluster_findings.py); the run folder keeps them as JSON (rounds.jsonl, cluster.json).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Tuple

#: The nodes of one group, by index (cluster/patterns.py plans them).
Group = Tuple[int, ...]


@dataclass
class GroupResult:
    """One all_reduce over all GPUs of ``nodes``: median time per iteration, bus bandwidth
    (GB/s, nccl-tests' busbw for all_reduce) and where the time came from."""

    nodes: Group
    size_bytes: int
    timing: str  # "cuda-events" | "wall" | "modeled"
    time_s: Optional[float] = None
    busbw_gbps: Optional[float] = None
    gpus: int = 0
    error: Optional[str] = None  # failed: the message (busbw then None)
    #: the members that failed on their own (``rank``, ``node`` name, ``error``): the group
    #: measured nothing, and its other members only waited on them
    rank_errors: List[Dict[str, Any]] = field(default_factory=list)
    na: Optional[str] = None  # not applicable: the reason (e.g. one GPU per node)
    wrong: int = 0  # elements that were not the expected sum after the all_reduce
    #: inter-node only: the same all_reduce between one GPU (local rank 0) of each node
    one_gpu_busbw_gbps: Optional[float] = None
    #: inter-node only: why that figure is missing (a leader's error, a time-out, a member
    #: that did not measure it); the all-GPU figure above stands either way
    one_gpu_na: Optional[str] = None
    slow: bool = False  # below the round's reference, or failed: set by cluster/rounds.mark_slow_groups

    def to_json(self) -> dict:
        d = asdict(self)
        d["nodes"] = list(self.nodes)
        return d

    @classmethod
    def from_json(cls, d: dict) -> "GroupResult":
        return cls(**{**d, "nodes": tuple(d["nodes"])})


@dataclass
class LostRank:
    """A rank that did not reach the liveness barrier in time: ``state`` is ``hang`` (still
    connected but silent) or ``crash`` (its connection is gone); or ``stopped``: it reached it,
    saying a signal (SIGTERM, SIGINT) stopped it."""

    rank: int
    node: str
    state: str
    message: str = ""


@dataclass
class RoundRecord:
    """One round: the intra-node one (index 0) or an inter-node one, its groups' results and
    the cluster's reference busbw the round's groups were judged slow against."""

    index: int  # 0: intra-node; 1.. inter-node rounds
    phase: str  # "intra" | "inter"
    groups: List[GroupResult]
    reference_gbps: Optional[float] = None

    def to_json(self) -> dict:
        return {"round": self.index, "phase": self.phase, "reference_gbps": self.reference_gbps,
                "groups": [g.to_json() for g in self.groups]}


@dataclass
class Outcome:
    """What the rounds measured, and the ranks lost (during ``lost_phase``), if any."""

    pattern: str
    rounds: List[RoundRecord] = field(default_factory=list)
    lost: List[LostRank] = field(default_factory=list)
    lost_phase: Optional[str] = None

    @property
    def inter_rounds(self) -> List[RoundRecord]:
        return [r for r in self.rounds if r.phase == "inter"]


def out_of_memory(error: Optional[str]) -> bool:
    """Whether a group's error is its message's buffer not fitting (host or GPU memory taken by
    others since the rank's check, cluster/rank_device.py): nothing about its nodes' speed."""
    low = (error or "").lower()
    return ("out of memory" in low or "outofmemoryerror" in low or "can't allocate memory" in low
            or "cannot allocate memory" in low)
