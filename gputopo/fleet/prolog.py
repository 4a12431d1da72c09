"""What `gputopo health` makes of a drain Slurm made after `gputopo gate` failed in its Prolog.

A Prolog that exits non-zero makes Slurm drain the node with its own reason, ``Prolog error``
(slurmctld; only where the node is not drained already), and requeue the batch job held. gate
does not drain the node itself (a Prolog must not call Slurm commands): it keeps its verdict
in the state folder (``gate-last.json``, gputopo/fleet/state.py), whose reason is in the reason
grammar. `health` then:

- never resumes nor takes over a ``Prolog error`` drain: its reason does not start ``gputopo:``,
  so it is another owner's (gputopo/fleet/slurm.py), whatever health's own verdict;
- says, in every dialect, gate's last verdict where it failed (its time, job and reason);
- in its Slurm log line, says whether gate's kept verdict explains the drain: a failing one
  kept in the state folder does (its verdict, time, job and reason are said); with none, the
  drain is said ``not explained`` (another Prolog failed, or gate keeps its verdict elsewhere).
  The drain's own time is not compared with gate's: the line gives gate's time to read beside
  ``scontrol show node``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

from gputopo.model.reason import clean

#: Slurm's drain reason when the Prolog failed (slurmctld's, word for word: 22.05 and later).
PROLOG_ERROR = "Prolog error"
#: gate's verdicts that fail a Prolog (exit non-zero): a failure; a verdict that judged nothing
#: only under --on-unknown drain, which the kept document says with its exit code.
FAILING = ("fail",)


@dataclass(frozen=True)
class GateKept:
    """gate's last verdict as kept: ``verdict`` (pass, warn, fail, not-judged, could-not-run),
    ``reason`` (the grammar's, "" when none), ``time`` (ISO 8601 as kept), the ``job`` it ran for
    ("" when none), its ``exit_code`` (None where not kept)."""

    verdict: str
    reason: str = ""
    time: str = ""
    job: str = ""
    exit_code: Optional[int] = None

    @classmethod
    def from_doc(cls, doc: Optional[Dict[str, Any]], source: str = "") -> Optional["GateKept"]:
        """The kept document (``gate-last.json``), or None where there is none, it is not gate's, or
        it judged another machine than ``source`` (the scan's source: ``sim:NAME`` for a simulated
        one; a document that names none, as a could-not-run one, is taken)."""
        if not isinstance(doc, dict) or not isinstance(doc.get("verdict"), str):
            return None
        if doc.get("command", "gate") != "gate":
            return None
        if source and doc.get("source") and doc.get("source") != source:
            return None
        code = doc.get("exit_code")
        job = doc.get("job") or doc.get("slurm_job_id") or ""
        return cls(verdict=clean(doc["verdict"]), reason=clean(str(doc.get("reason") or ""), semicolons=True),
                   time=clean(str(doc.get("time") or "")), job=clean(str(job)),
                   exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None)

    @property
    def failed(self) -> bool:
        """Whether this verdict failed the Prolog: a failure, or any verdict kept with a non-zero
        exit code (--on-unknown drain)."""
        return self.verdict in FAILING or bool(self.exit_code)

    def to_json(self) -> Dict[str, Any]:
        return {"verdict": self.verdict, "reason": self.reason or None, "time": self.time or None,
                "job": self.job or None, "exit_code": self.exit_code, "failed": self.failed}

    def text(self) -> str:
        """``gate fail at T (job 42): <reason>``: one clause for a person's line."""
        when = f" at {self.time}" if self.time else ""
        job = f" (job {self.job})" if self.job else ""
        return f"gate {self.verdict}{when}{job}" + (f": {self.reason}" if self.reason else "")


def is_prolog_error(reason: str) -> bool:
    """Whether a drain reason is Slurm's own after a failed Prolog."""
    return reason.strip() == PROLOG_ERROR


def prolog_drain_text(gate: Optional[GateKept]) -> str:
    """What health's Slurm line says of a ``Prolog error`` drain it leaves as it is."""
    if gate is not None and gate.failed:
        return f"drained by Slurm after a failed Prolog (\"{PROLOG_ERROR}\"), explained by {gate.text()}: not gputopo's drain, left as it is"
    seen = f"; the last kept is {gate.text()}" if gate is not None else ""
    return (f"drained by Slurm after a failed Prolog (\"{PROLOG_ERROR}\"), not explained by a failing gate "
            f"verdict kept here{seen}: not gputopo's drain, left as it is")
