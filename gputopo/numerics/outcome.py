"""What one numerics run produced (NumericsRun), and how a way that produced nothing fails
(WayFailed): the types every stage of a run (run's ways per fabric, judging, sink, sim_jobs)
shares, so the stages import this module and not run.py, their caller."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gputopo.model import Finding
from gputopo.workers.outcome import HANG, JobOutcome

from .job import NumericsOptions
from .result import NumericsResult
from .verdict import Tolerance

Pair = Tuple[int, int]


class WayFailed(Exception):
    """A way produced no numbers: ``kind`` is "hang" or "crash"; ``outcome``: how its job
    ended on the worker pool (gputopo/workers/outcome.py), when it ran on one."""

    def __init__(self, kind: str, message: str, wall_s: Optional[float] = None,
                 outcome: Optional[JobOutcome] = None):
        super().__init__(message)
        self.kind = kind
        #: Seconds the way ran before it failed, when it ran before it was judged (sim_jobs.py).
        self.wall_s = wall_s
        self.outcome = outcome

    @classmethod
    def of(cls, way_name: str, outcome: JobOutcome, note: str = "",
           wall_s: Optional[float] = None) -> "WayFailed":
        """The failure of the way ``way_name`` whose job ended as ``outcome``: its kind the
        outcome's ``record_kind`` (an ``oom`` or ``killed`` job is a crash), its message
        ``"<way> hung<note>: <what>"`` or ``"<way><note>: <what>"``. The one maker of a way's
        failure from a worker pool's outcome (run.py's ways on cuda, sim_jobs.py's)."""
        kind = outcome.record_kind
        return cls(kind, f"{way_name}{' hung' if kind == HANG else ''}{note}: {outcome.what}",
                   wall_s, outcome=outcome)


@dataclass
class NumericsRun:
    """Everything one numerics run produced: its records and tolerances (the findings they
    make are gputopo.report.numerics_record's ``numerics_run_findings``)."""

    options: NumericsOptions
    fabric: str
    results: List[NumericsResult] = field(default_factory=list)
    #: Tolerance per scope: "run" (sim/cpu: one CPU job for every pair) or "i,j" (cuda).
    tolerances: Dict[str, Tolerance] = field(default_factory=dict)
    wall_s: float = 0.0
    notes: List[str] = field(default_factory=list)

    def verdicts(self) -> Dict[Tuple[int, ...], Dict[str, str]]:
        """{(i, j): {way: verdict}}."""
        out: Dict[Tuple[int, ...], Dict[str, str]] = {}
        for r in self.results:
            out.setdefault(tuple(r.gpus), {})[r.way] = r.verdict
        return out

    def tolerance_lines(self) -> List[str]:
        return [(f"{scope}: " if scope != "run" else "") + tol.describe()
                for scope, tol in self.tolerances.items()]

    def to_json(self, findings: Sequence[Finding] = ()) -> Dict[str, Any]:
        """The run as JSON, with ``findings`` (the report's judgement of it) beside its results."""
        return {"fabric": self.fabric, "options": self.options.to_json(),
                "tolerances": {k: t.to_json() for k, t in self.tolerances.items()},
                "results": [r.to_json() for r in self.results],
                "findings": [f.to_json() for f in findings],
                "wall_s": self.wall_s, "notes": list(self.notes)}

