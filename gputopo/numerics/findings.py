"""The finding one numerics record makes (a line of numerics.jsonl, as a dict): ``nan`` /
``diverged`` with the way and the step, ``hang`` / ``crash`` with the error.

Made here, once: the numerics run shows these findings as its results come in (adding a quick
cause where the ways alone tell it, run.py), and the report builds on the same findings, adding
the host facts and the analysed cause (gputopo.report.numerics_findings). No torch.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Mapping, Optional

from gputopo.model import Finding
from gputopo.model.finding import where_text

from .result import WAY_NAMES
from .verdict import FAILED_VERDICTS

#: Verdicts of a way that ran to the end with bad numbers.
BAD_VERDICTS = ("nan", "diverged")
#: The way compared with each way on the same GPUs.
OTHER_WAY = {"dp": "ddp", "ddp": "dp"}
#: Big fields left out of a finding's evidence (they go to plots instead).
_BULKY = ("losses", "reference_losses", "gpus", "way", "verdict", "type", "schema_version", "notes")
#: Small tables of a record kept in the evidence (which transport each way used, the tolerance).
_SMALL_TABLES = ("paths", "tolerance")


def record_gpus(rec: Mapping[str, Any]) -> tuple:
    return tuple(sorted(int(g) for g in (rec.get("gpus") or [])))


def _scalar(v) -> bool:
    if isinstance(v, float):
        return math.isfinite(v)
    return isinstance(v, (int, str, bool)) or v is None


def record_finding(rec: Mapping[str, Any], others: Mapping[str, Mapping[str, Any]],
                   link_class: Optional[str] = None) -> Optional[Finding]:
    """The finding ``rec`` makes, if any, without a cause. ``others``: the records of the other
    ways on the same GPUs by way (the DP finding names DDP's verdict, and vice versa);
    ``link_class``: the pair's class when the record names none.

    Severity: ``error``, but ``warning`` for the one-GPU reference (the job itself is unstable:
    that says nothing about the GPUs) and ``info`` for a record marked ``expected_difference``
    (a difference by design, e.g. BatchNorm statistics per replica)."""
    verdict, way = rec.get("verdict"), rec.get("way")
    if verdict not in BAD_VERDICTS + FAILED_VERDICTS:
        return None
    gpus = record_gpus(rec)
    lc = rec.get("link_class") or link_class
    who = where_text(gpus, lc) if gpus else "reference run"
    name = WAY_NAMES.get(str(way), str(way))
    evidence: Dict[str, Any] = {
        "way": way, "step": rec.get("step"), "test": "numerics",
        **{k: v for k, v in rec.items() if k not in _BULKY and k != "step" and _scalar(v)},
        **{k: rec[k] for k in _SMALL_TABLES if isinstance(rec.get(k), dict) and rec[k]}}
    if verdict in FAILED_VERDICTS:
        what = "hung" if verdict == "hang" else "crashed"
        return Finding(verdict, "error", f"{who}: {name} training run {what}: {rec.get('error')}",
                       gpus=list(gpus) or None, link_class=lc, evidence=evidence)
    what = "loss/gradient went NaN/Inf" if verdict == "nan" else "loss diverged from the reference"
    step = f" from step {rec['step']}" if rec.get("step") is not None else ""
    first_dev = rec.get("first_deviation_step")
    if verdict == "diverged" and isinstance(first_dev, int) and rec.get("step") not in (None, first_dev):
        step += f" (off by more than the tolerance from step {first_dev})"
    msg = f"{who}: {name} {what}{step}"
    other_way = OTHER_WAY.get(str(way))
    other = others.get(other_way) if other_way else None
    if other is not None and other_way:
        evidence[f"{other_way}_verdict"] = other.get("verdict")
        msg += f"; {WAY_NAMES[other_way]} on the same GPUs: {other.get('verdict')}"
    severity = "error"
    if way == "reference":
        severity = "warning"
    elif rec.get("expected_difference"):
        severity = "info"
        msg += f" (expected: {rec['expected_difference']})"
    return Finding(verdict, severity, msg, gpus=list(gpus) or None, link_class=lc, evidence=evidence)
