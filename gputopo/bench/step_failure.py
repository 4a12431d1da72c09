"""The finding a failed bench step makes (a ``hang`` or a ``crash`` of its workers): where (GPUs
and link class), in which step, during which case and size, and what happened. The runner
(runner.py) decides that a step failed; this module only words it."""

from __future__ import annotations

from typing import Optional

from gputopo.model import Finding

from .options import format_size
from .plan import Step


def step_failure_finding(step: Step, kind: str, what: str, evidence: dict,
                         cause: Optional[str] = None, remedies=None) -> Finding:
    """``kind`` ("hang"/"crash") of ``step``; ``evidence["case"]`` names the case it was in."""
    gpus = ",".join(map(str, step.gpus))
    where = f"GPUs {gpus}" if len(step.gpus) > 1 else f"GPU {gpus}"
    if step.link_class:
        where += f" ({step.link_class})"
    case = evidence.get("case")
    during = ""
    if case:
        way = f" {case['direction']}" if case.get("direction") else ""
        during = f" during {case['test']}{way} at {format_size(case['size_bytes'])}"
    return Finding(kind=kind, severity="error",
                   message=f"{where}: {kind} in the {step.group} step{during}: {what}",
                   gpus=list(step.gpus), link_class=step.link_class, evidence=evidence,
                   cause=cause, remedies=list(remedies or []))
