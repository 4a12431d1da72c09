"""How a job handed to worker processes ended: the one result type of both supervisors (the
bench's ``Runner``, the numerics' ``WorkerPool``).

- ``delivered``: every worker of the job delivered its results;
- ``hang``: no progress (a result or a sign of progress) within the job's deadline; its workers
  were killed;
- ``crash``: a worker died (``exitcode``: its process's exit code, negative for a signal, and
  ``log_tail``: the end of its log) or raised (``traceback``).

Each supervisor turns an outcome into its own record: the bench a ``StepFailure``
(model/step_failure.py, an events.jsonl line), the numerics a way's ``hang`` or ``crash``
verdict (numerics.jsonl). ``what`` is the one line a person reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

from .processes import exit_text

DELIVERED, HANG, CRASH = "delivered", "hang", "crash"
#: What can happen to a job.
KINDS = (DELIVERED, HANG, CRASH)
#: Characters of a traceback a record keeps (its end).
TRACEBACK_CHARS = 4000


@dataclass
class JobOutcome:
    """``kind`` (one of :data:`KINDS`), ``what`` happened in words, and for a crash the dead
    worker's ``exitcode`` and ``log_tail`` or the ``traceback`` of a worker that raised."""

    kind: str
    what: str = ""
    exitcode: Optional[int] = None
    log_tail: str = ""
    traceback: str = ""
    #: A worker process died (its ``exitcode`` is then the fact, None when it could not be had).
    dead: bool = False
    #: How it died in words (a dead worker: ``"killed by signal SIGKILL"``), the one wording
    #: both supervisors put in their records.
    how: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")

    @property
    def failed(self) -> bool:
        return self.kind != DELIVERED

    def evidence(self) -> Dict[str, Any]:
        """The facts a failure record keeps beside its ``what``: ``exitcode`` (a worker that
        died), ``traceback`` (its last :data:`TRACEBACK_CHARS` characters, a worker that raised)."""
        out: Dict[str, Any] = {}
        if self.traceback:
            out["traceback"] = self.traceback[-TRACEBACK_CHARS:]
        if self.dead:
            out["exitcode"] = self.exitcode
        return out


def hung(what: str) -> JobOutcome:
    return JobOutcome(HANG, what)


def died(who: str, exitcode: Optional[int], log_tail: str = "") -> JobOutcome:
    """A worker process that died: ``"<who> died: killed by signal SIGKILL"``."""
    how = exit_text(exitcode)
    return JobOutcome(CRASH, f"{who} died: {how}", exitcode=exitcode, log_tail=log_tail,
                      dead=True, how=how)


def raised(what: str, traceback: str = "") -> JobOutcome:
    """A worker that raised, or workers that could not start: ``what``, and a traceback."""
    return JobOutcome(CRASH, what, traceback=traceback)
