"""One nccl-tests log as parsed (nccl_parse.py): its header facts, ranks, column names and rows,
each row's out-of-place and in-place cells with the figures as printed (N/A: NotAvailable).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple


@dataclass
class Rank:
    rank: int
    group: Optional[int]
    pid: int
    host: str
    device: int
    bus_id: str  # as printed: "0000:b4:00" (newer) or "0x1b" (older)
    name: str

    def to_json(self) -> dict:
        return dict(vars(self))


@dataclass
class Cell:
    """One placement's printed figures; N/A cells are NotAvailable, never NaN."""

    time_us: Any
    algbw_gbps: Any
    busbw_gbps: Any
    wrong: Any  # int | NotAvailable
    per_iter: Dict[str, Any] = field(default_factory=dict)


@dataclass
class Row:
    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: Optional[int]
    out_of_place: Optional[Cell]
    in_place: Optional[Cell]
    line: int


@dataclass
class NcclTestsLog:
    """One test's output, parsed."""

    source: str
    op: Optional[str] = None
    program: Optional[str] = None
    version: Optional[str] = None
    nccl_headers: Optional[int] = None
    nccl_library: Optional[int] = None
    config: Dict[str, Any] = field(default_factory=dict)
    ranks: List[Rank] = field(default_factory=list)
    columns: List[str] = field(default_factory=list)
    time_kind: str = "time"  # "time" (CUDA events) | "cputime" (host wall clock)
    rows: List[Row] = field(default_factory=list)
    out_of_bounds: Optional[int] = None
    out_of_bounds_status: Optional[str] = None  # "OK" | "FAILED" as printed
    nccl_version: Optional[str] = None  # "NCCL version 2.9.9+cuda11.2" as NCCL printed it
    avg_busbw_gbps: Optional[float] = None
    errors: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    #: What makes this log's data incomplete or invalid (nccl_checks.py); the report says it.
    problems: List[str] = field(default_factory=list)

    @property
    def hosts(self) -> List[str]:
        return list(dict.fromkeys(r.host for r in self.ranks))

    def cells(self):
        """(row, in_place, cell) for every printed placement."""
        for r in self.rows:
            if r.out_of_place is not None:
                yield r, False, r.out_of_place
            if r.in_place is not None:
                yield r, True, r.in_place

    @property
    def peak(self) -> Tuple[Optional[float], Optional[int], Optional[bool]]:
        """(printed busbw max, the largest size reaching it, in place?)."""
        best: Tuple[Optional[float], Optional[int], Optional[bool]] = (None, None, None)
        for r, inplace, c in self.cells():
            b = c.busbw_gbps
            if isinstance(b, float) and (best[0] is None or b > best[0] or (b == best[0] and r.size_bytes >= best[1])):
                best = (b, r.size_bytes, inplace)
        return best
