"""NumericsResult: one way of the training job on one GPU pair, as written to numerics.jsonl.

One JSON line per pair and way (docs/run-folder.md):

    {"gpus": [i, j], "link_class": "SYS", "way": "reference" | "dp" | "ddp",
     "verdict": "ok" | "diverged" | "nan"   (or "hang" | "crash" when the way gave no numbers),
     "step": first bad step (0-based; losses[step] is that step's loss) or null,
     "losses": [...], "max_rel_loss_dev", "max_abs_param_diff", "tolerance": {...},
     "dp_split": [sizes] (dp only), "paths": {...}, "fabric", "timing", "wall_s", ...}

Steps are numbered from 0. JSON has no NaN/Inf, so non-finite numbers are written as the
strings "nan", "inf", "-inf" (:func:`num_to_json` / :func:`num_from_json`); ``null`` only ever
means "not applicable" (e.g. ``step`` of an ``ok`` way), never a bad number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from gputopo import SCHEMA_VERSION

WAYS = ("reference", "dp", "ddp")
WAY_NAMES = {"reference": "one GPU (reference)", "dp": "DataParallel", "ddp": "DDP"}
#: The way compared with each way on the same GPUs.
OTHER_WAY = {"dp": "ddp", "ddp": "dp"}


def record_gpus(rec: Mapping[str, Any]) -> tuple:
    """The sorted GPUs of a numerics.jsonl record (a dict)."""
    return tuple(sorted(int(g) for g in (rec.get("gpus") or [])))



def num_to_json(x: Optional[float]):
    """A float for JSON: finite as is, non-finite as "nan"/"inf"/"-inf", None stays None."""
    if x is None:
        return None
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def num_from_json(x) -> Optional[float]:
    if x is None:
        return None
    return float(x)  # float("nan"), float("inf") parse the strings back


@dataclass
class NumericsResult:
    gpus: Tuple[int, ...]  # the pair trained on (any list given is kept as a tuple)
    link_class: str
    way: str
    verdict: str
    step: Optional[int]
    losses: List[float]
    max_rel_loss_dev: Optional[float]
    max_abs_param_diff: Optional[float]
    tolerance: Dict[str, Any]
    fabric: str
    timing: str  # "modeled" (sim) | "wall"
    wall_s: float
    model: str = "mlp"
    steps: int = 0
    lr: float = 0.0
    batch: int = 0
    first_nonfinite_step: Optional[int] = None
    nonfinite_in: Optional[str] = None
    first_deviation_step: Optional[int] = None
    dp_split: Optional[List[int]] = None
    paths: Dict[str, str] = field(default_factory=dict)
    #: What the verdict compares against: "reference" (the one-GPU whole-batch run) or, for
    #: BatchNorm models, "per-replica" (the one-GPU job run as two half-batch passes, the
    #: statistics DataParallel/DDP replicas compute); the by-design difference from the
    #: whole-batch reference is then shown in ``extra["vs_whole_batch"]`` (with "expected").
    baseline: str = "reference"
    error: Optional[str] = None  # hang/crash: what happened
    notes: List[str] = field(default_factory=list)
    extra: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        self.gpus = tuple(self.gpus)
        if self.way not in WAYS:
            raise ValueError(f"unknown way {self.way!r}")

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"

    @property
    def final_loss(self) -> Optional[float]:
        return self.losses[-1] if self.losses else None

    def to_json(self) -> Dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "gpus": list(self.gpus), "link_class": self.link_class, "way": self.way,
            "verdict": self.verdict, "step": self.step,
            "losses": [num_to_json(v) for v in self.losses],
            "max_rel_loss_dev": num_to_json(self.max_rel_loss_dev),
            "max_abs_param_diff": num_to_json(self.max_abs_param_diff),
            "tolerance": self.tolerance, "fabric": self.fabric, "timing": self.timing,
            "wall_s": self.wall_s, "model": self.model, "steps": self.steps, "lr": self.lr,
            "batch": self.batch, "first_nonfinite_step": self.first_nonfinite_step,
            "nonfinite_in": self.nonfinite_in, "first_deviation_step": self.first_deviation_step,
            "dp_split": self.dp_split, "paths": self.paths,
            "baseline": self.baseline, "error": self.error,
            "notes": list(self.notes), "extra": self.extra,
        }

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "NumericsResult":
        d = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        d["losses"] = [num_from_json(v) for v in d.get("losses", [])]
        for k in ("max_rel_loss_dev", "max_abs_param_diff"):
            d[k] = num_from_json(d.get(k))
        return cls(**d)

    def summary(self) -> str:
        """One line for a terminal: 'DataParallel 5,6 (SYS): nan from step 3'."""
        g = ",".join(map(str, self.gpus))
        what = self.verdict if self.step is None else f"{self.verdict} from step {self.step}"
        if self.baseline == "per-replica":
            what += " (against per-replica BatchNorm statistics; differs from one GPU by design)"
        return f"{WAY_NAMES[self.way]} {g} ({self.link_class}): {what}"
