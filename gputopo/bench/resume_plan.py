"""Which steps a `--resume` runs again, and why, from what the run folder holds.

A step is finished only when events.jsonl says it ended ``ok`` *and* every one of its
measurements is in measurements.jsonl: a run marked complete whose measurements were lost, or a
step whose worker crashed, is redone rather than counted as measured (a resume that re-measures
nothing must not hand a CI gate a clean-looking run). A step that hung stays a result: running
it again would wait out the timeout again, and the hang is what the run found.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Set

#: step-done statuses that are results in themselves (not redone by a resume).
KEPT_FAILURES = ("hang",)


@dataclass
class Redo:
    """A step a resume runs again: its id, why, and how many of its measurements it takes."""

    step: str
    reason: str
    cases: int

    def to_json(self) -> dict:
        return {"type": "step-redo", "step": self.step, "reason": self.reason,
                "cases": self.cases}


def plan_resume(steps: List, status_by_step: Dict[str, str], done_keys: Set[str],
                retry_hung: bool = False):
    """(steps still to run, each with only its missing cases; the Redo of each that had been
    marked done). ``status_by_step`` is the last step-done status per step id; ``retry_hung``
    (--retry-hung) runs steps that hung again instead of keeping the hang as their result."""
    todo, redo = [], []
    for s in steps:
        status = status_by_step.get(s.id)
        if status in KEPT_FAILURES and not retry_hung:
            continue
        missing = [c for c in s.cases if c.key not in done_keys]
        if not missing:
            continue
        if status is not None:  # it was marked done, yet measurements are missing
            why = ("--retry-hung: it hung" if status in KEPT_FAILURES
                   else f"its worker ended with {status}" if status != "ok"
                   else f"{len(missing)} of its {len(s.cases)} measurement(s) are missing")
            redo.append(Redo(s.id, why, len(missing)))
        s.cases = missing
        todo.append(s)
    return todo, redo


def redo_lines(redo: List[Redo], limit: int = 5) -> List[str]:
    """What `bench --resume` tells the user it redoes (one line per step, then a count)."""
    if not redo:
        return []
    lines = [f"resume: redoing {len(redo)} step(s) marked done whose results are not all in "
             "the run folder:"]
    lines += [f"  {r.step}: {r.reason}" for r in redo[:limit]]
    if len(redo) > limit:
        lines.append(f"  ... and {len(redo) - limit} more (events.jsonl lists each as step-redo)")
    return lines
