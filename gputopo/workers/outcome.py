"""How a job handed to worker processes ended: the one result type of both supervisors (the
bench's ``Runner``, the numerics' ``WorkerPool``).

- ``delivered``: every worker of the job delivered its results;
- ``hang``: no progress (a result or a sign of progress) within the job's deadline; its workers
  were killed;
- ``crash``: a worker died (``exitcode``: its process's exit code, negative for a signal, and
  ``log_tail``: the end of its log) or raised (``traceback``);
- ``oom``: a worker reported that it ran out of memory (torch's ``OutOfMemoryError``, CUDA's
  "out of memory" in the error it raised or sent): known, not inferred;
- ``killed``: a worker died of SIGKILL, which a worker never sends itself: the kernel's OOM
  killer is one cause, a person or the job scheduler others (``why`` says so; nothing here says
  "out of memory").

``oom`` and ``killed`` are crashes with what is known of their cause: their records are
``crash`` records (:attr:`JobOutcome.record_kind`), so no record, verdict or finding changed.
A failed outcome becomes the one failure record of both supervisors, a ``StepFailure``
(model/step_failure.py, an events.jsonl ``step-failed`` line): the bench's runner makes a
step's from it, the numerics a way's (its numerics.jsonl ``hang`` or ``crash`` record and,
from that record and the outcome's :meth:`~JobOutcome.evidence`, its failure record:
numerics/sink.py). ``what`` is the one line a person reads.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from typing import Any, Dict, Optional

from .processes import exit_text

DELIVERED, HANG, CRASH, OOM, KILLED = "delivered", "hang", "crash", "oom", "killed"
#: What can happen to a job.
KINDS = (DELIVERED, HANG, CRASH, OOM, KILLED)
#: What a SIGKILL death says of its cause: only what is known.
SIGKILL_WHY = "killed by SIGKILL (the OOM killer is one cause)"
#: How torch and CUDA say a device ran out of memory, in an error a worker raised or sent:
#: torch's ``torch.OutOfMemoryError`` / ``torch.cuda.OutOfMemoryError`` ("CUDA out of memory.
#: Tried to allocate ..."), the CUDA runtime's ``cudaErrorMemoryAllocation`` ("out of memory"),
#: NCCL's and the caching allocator's "CUDA error: out of memory".
_OOM_TEXT = re.compile(r"OutOfMemoryError|\bout of memory\b|cudaErrorMemoryAllocation",
                       re.IGNORECASE)
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
    #: What is known of why it failed (``killed``: :data:`SIGKILL_WHY`), "" when nothing is.
    why: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")

    @property
    def failed(self) -> bool:
        return self.kind != DELIVERED

    @property
    def record_kind(self) -> str:
        """The kind of its failure record ("hang" or "crash", the two that StepFailure and a
        numerics way's verdict know): ``oom`` and ``killed`` are crashes."""
        return HANG if self.kind == HANG else CRASH

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


def reported_oom(text: str) -> bool:
    """Whether a worker's error (its message, its traceback) says it ran out of memory."""
    return bool(text) and _OOM_TEXT.search(text) is not None


def death_kind(exitcode: Optional[int]) -> str:
    """``killed`` for a SIGKILL death, ``crash`` for any other."""
    return KILLED if exitcode == -signal.SIGKILL else CRASH


def died(who: str, exitcode: Optional[int], log_tail: str = "") -> JobOutcome:
    """A worker process that died: ``"<who> died: killed by signal SIGKILL"``; ``killed`` (with
    :data:`SIGKILL_WHY`) for SIGKILL, else ``crash``. (A worker's log that says it ran out of
    memory before it died is not taken as the cause: a dying process's last line is not known
    to be why it died.)"""
    how = exit_text(exitcode)
    kind = death_kind(exitcode)
    return JobOutcome(kind, f"{who} died: {how}", exitcode=exitcode, log_tail=log_tail,
                      dead=True, how=how, why=SIGKILL_WHY if kind == KILLED else "")


def raised(what: str, traceback: str = "") -> JobOutcome:
    """A worker that raised, or workers that could not start: ``what``, and a traceback;
    ``oom`` when the error says the worker ran out of memory (:func:`reported_oom`)."""
    oom = reported_oom(what) or reported_oom(traceback)
    return JobOutcome(OOM if oom else CRASH, what, traceback=traceback,
                      why="the worker reported that it ran out of memory" if oom else "")
