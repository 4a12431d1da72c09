"""A bench step or a numerics way that did not finish: its workers made no progress for
``--timeout`` seconds (``hang``) or one of them died or raised (``crash``). The one failure
record of both, written as it happens in ``events.jsonl`` (``{"type": "step-failed", ...}``,
docs/run-folder.md): by the bench's runner for a step, by the numerics' sink for a way (group
``numerics``, step ``numerics:I-J``, the way in its evidence, made from the way's numerics.jsonl
record by :func:`numerics_failure`). gputopo/report/step_failures.py, the one reader, turns
each into the finding of the same kind.

Run folders written before step failures were facts hold a ``{"type": "finding", ...}`` line
instead; the reader still reads those as they are. Folders written before a numerics way's
failure was a ``step-failed`` line hold it only as its numerics.jsonl record (verdict ``hang``
or ``crash``): the run folder's reader derives the record from it (:func:`numerics_failure`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

#: The ``type`` of a step failure's events.jsonl line.
STEP_FAILED = "step-failed"
#: What can happen to a step: no progress for --timeout seconds, or a worker died or raised.
FAILURE_KINDS = ("hang", "crash")
#: The ``group`` of a numerics way's failure.
NUMERICS_GROUP = "numerics"
#: Fields of a numerics.jsonl record left out of its failure's (and its finding's) evidence:
#: the big ones (the loss curves go to plots), and those the record's place already says.
NUMERICS_BULKY = ("losses", "reference_losses", "gpus", "way", "verdict", "type", "schema_version",
                  "notes")
#: Small tables of a numerics record kept in the evidence (the transports, the tolerance).
NUMERICS_TABLES = ("paths", "tolerance")


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

    @property
    def numerics(self) -> bool:
        """Whether it is a numerics way's failure (its way: ``evidence["way"]``)."""
        return self.group == NUMERICS_GROUP

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


def numerics_step_id(gpus) -> str:
    """The id of a pair's numerics in events.jsonl, like the bench's step ids ("numerics:5-6")."""
    return "numerics:" + "-".join(str(g) for g in sorted(int(g) for g in gpus))


def numerics_record_evidence(rec: Mapping[str, Any]) -> Dict[str, Any]:
    """The facts of a numerics.jsonl record (a dict) that its finding keeps: ``way``, ``step``,
    ``test: "numerics"``, its other scalar fields (finite numbers, strings, booleans, nulls) and
    its small tables (:data:`NUMERICS_TABLES`, when not empty)."""
    return {"way": rec.get("way"), "step": rec.get("step"), "test": "numerics",
            **{k: v for k, v in rec.items()
               if k not in NUMERICS_BULKY and k != "step" and _scalar(v)},
            **{k: rec[k] for k in NUMERICS_TABLES if isinstance(rec.get(k), dict) and rec[k]}}


def numerics_failure(rec: Mapping[str, Any], evidence: Optional[Mapping[str, Any]] = None) -> StepFailure:
    """The failure record of the numerics way whose numerics.jsonl record ``rec`` (a dict, its
    verdict ``hang`` or ``crash``, on its GPU pair, or its one GPU) says it produced nothing: its kind the verdict,
    its ``what`` the record's ``error``, its evidence the record's facts
    (:func:`numerics_record_evidence`) and ``evidence`` (how its job ended: an ``exitcode``, a
    ``traceback``). The one maker, for the numerics' sink that writes it and for the reader that
    derives it from a folder written before. ValueError when ``rec`` is not such a record."""
    gpus = sorted(int(g) for g in (rec.get("gpus") or []))
    failure = StepFailure(kind=str(rec.get("verdict")), step=numerics_step_id(gpus),
                          group=NUMERICS_GROUP, gpus=gpus, link_class=rec.get("link_class"),
                          what=str(rec.get("error")),
                          evidence={**numerics_record_evidence(rec), **(evidence or {})})
    why = _problem(failure.to_event())
    if why:
        raise ValueError(why)
    return failure


def _scalar(v) -> bool:
    if isinstance(v, float):
        return math.isfinite(v)
    return isinstance(v, (int, str, bool)) or v is None


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
