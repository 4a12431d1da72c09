"""A bench step that did not finish: its workers made no progress for ``--timeout`` seconds
(``hang``) or one of them died or raised (``crash``). The fact the bench's runner records, as
it happens, in ``events.jsonl`` (``{"type": "step-failed", ...}``, docs/run-folder.md);
gputopo/report/step_failures.py turns it into the finding of the same kind.

Run folders written before step failures were facts hold a ``{"type": "finding", ...}`` line
instead; the reader still reads those as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

#: The ``type`` of a step failure's events.jsonl line.
STEP_FAILED = "step-failed"
#: What can happen to a step: no progress for --timeout seconds, or a worker died or raised.
FAILURE_KINDS = ("hang", "crash")


@dataclass
class StepFailure:
    """``kind`` ("hang" / "crash") of bench step ``step`` (its id, e.g. ``"p2p:5-6"``) of test
    group ``group`` on ``gpus`` (``link_class`` as planned); ``what``: what happened, as the
    runner saw it ("worker w0 (pid 123) died: SIGABRT"); ``evidence``: the details (step,
    test_group, elapsed_s, measurements_delivered, case, worker_logs, stderr_tail, and a
    traceback or an exitcode)."""

    kind: str
    step: str
    group: str
    gpus: List[int]
    link_class: Optional[str]
    what: str
    evidence: Dict[str, Any] = field(default_factory=dict)

    def to_event(self) -> Dict[str, Any]:
        return {"type": STEP_FAILED, "kind": self.kind, "step": self.step, "group": self.group,
                "gpus": list(self.gpus), "link_class": self.link_class, "what": self.what,
                "evidence": self.evidence}

    @classmethod
    def from_event(cls, rec: Mapping[str, Any]) -> "StepFailure":
        """The fact of a ``step-failed`` line; ValueError naming the field when it is not one."""
        why = _problem(rec)
        if why:
            raise ValueError(why)
        return cls(kind=rec["kind"], step=rec["step"], group=rec["group"], gpus=list(rec["gpus"]),
                   link_class=rec.get("link_class"), what=rec["what"],
                   evidence=dict(rec.get("evidence") or {}))


def _index(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < (1 << 16)


def _problem(rec: Mapping[str, Any]) -> Optional[str]:
    if rec.get("kind") not in FAILURE_KINDS:
        return f"kind must be one of {', '.join(FAILURE_KINDS)}, got {rec.get('kind')!r}"
    for key in ("step", "group", "what"):
        if not isinstance(rec.get(key), str):
            return f"{key} must be a string, got {rec.get(key)!r}"
    gpus = rec.get("gpus")
    if not isinstance(gpus, list) or not gpus or not all(_index(g) for g in gpus):
        return f"gpus must be a list of GPU indices, got {gpus!r}"
    if not isinstance(rec.get("link_class"), (str, type(None))):
        return f"link_class must be a string or null, got {rec.get('link_class')!r}"
    evidence = rec.get("evidence")
    if not isinstance(evidence, (dict, type(None))):
        return f"evidence must be an object, got {evidence!r}"
    case = (evidence or {}).get("case")
    if case is not None and not (isinstance(case, dict) and isinstance(case.get("test"), str)
                                 and _size(case.get("size_bytes"))
                                 and isinstance(case.get("direction"), (str, type(None)))):
        return f"evidence.case must name a test, a size in bytes and a direction, got {case!r}"
    return None


def _size(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0
