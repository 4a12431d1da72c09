"""One benchmark measurement: raw timing samples kept, statistics derived lazily.

Like torch.utils.benchmark's Measurement, the record holds every raw sample; median, IQR and
bandwidths are computed from them on demand, so nothing derived can drift from what was timed.
Every record says where its time came from: "cuda-events", "wall" or "modeled" (a simulated
link model), and what its figures are of (``figures_of``: real GPUs, a simulated machine's GPUs,
or CPU processes standing in for GPUs). Bandwidths use GB = 1e9 bytes, as nccl-tests does.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from .values import Failed, field_from_json, field_to_json

TIMING_SOURCES = ("cuda-events", "wall", "modeled")

#: What a measurement's figures are of (its ``figures_of``), whatever timed them: real GPUs (the
#: cuda fabric's, and every imported tool's: nccl-tests' ``cputime`` mode and
#: p2pBandwidthLatencyTest's CPU timer time real GPUs by the host's clock), ...
FIGURES_OF_GPUS = "gpus"
#: ... a simulated machine's GPUs (the sim fabric: its times come from a link model) ...
FIGURES_OF_SIMULATED_GPUS = "simulated-gpus"
#: ... or CPU processes standing in for the GPUs (the cpu fabric): not a GPU link's rate.
FIGURES_OF_CPU_PROCESSES = "cpu-processes"
FIGURES_OF = (FIGURES_OF_GPUS, FIGURES_OF_SIMULATED_GPUS, FIGURES_OF_CPU_PROCESSES)


def figures_are_of_gpus(figures_of: Optional[str]) -> bool:
    """Figures of GPUs (real, or a simulated machine's): a GPU link's rate applies to them.
    False for CPU processes standing in, and for a record that does not say."""
    return figures_of in (FIGURES_OF_GPUS, FIGURES_OF_SIMULATED_GPUS)
#: IQR/median above this marks a measurement as noisy.
NOISE_THRESHOLD = 0.1


def _quantile(sorted_xs: List[float], q: float) -> float:
    """Linear-interpolated quantile of sorted data (numpy's default method)."""
    if not sorted_xs:
        return math.nan
    pos = (len(sorted_xs) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


@dataclass
class Measurement:
    """A timed, verified operation on one GPU pair (or one GPU, for --self tests).

    ``samples_s`` are per-iteration times in seconds. ``bytes_per_iter`` is what algbw divides
    by (nccl-tests: the buffer size); ``busbw_factor`` turns algbw into busbw. ``wrong`` counts
    elements that failed bit-exact verification, ``first_bad_index`` the first of them.
    """

    test: str  # e.g. "p2p.copy", "dp.scatter", "collective.all_reduce", "self.h2d"
    gpus: Tuple[int, ...]
    size_bytes: int
    samples_s: List[float]
    timing: str
    fabric: str  # what ran it: a bench fabric's name (bench/fabrics/fabric.py); "cuda" for an import
    #: What its figures are of (FIGURES_OF); None only for a line written before the field whose
    #: fabric gputopo does not know (report/run_folder.py derives it for the others on read).
    figures_of: Optional[str]
    link_class: Optional[str] = None
    direction: Optional[str] = None  # "0->1", "1->0", "both"
    bytes_per_iter: Optional[int] = None
    busbw_factor: float = 1.0
    wrong: int = 0
    first_bad_index: Optional[int] = None
    error: Optional[Failed] = None
    extra: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if self.timing not in TIMING_SOURCES:
            raise ValueError(f"timing must be one of {TIMING_SOURCES}, got {self.timing!r}")
        if self.figures_of is not None and self.figures_of not in FIGURES_OF:
            raise ValueError(f"figures_of must be one of {FIGURES_OF}, got {self.figures_of!r}"[:200])
        self.gpus = tuple(self.gpus)
        if self.bytes_per_iter is None:
            self.bytes_per_iter = self.size_bytes

    @property
    def of_gpus(self) -> bool:
        """Its figures are of GPUs (:func:`figures_are_of_gpus`)."""
        return figures_are_of_gpus(self.figures_of)

    @property
    def of_stand_ins(self) -> bool:
        """Its figures are of CPU processes standing in for the GPUs (no GPU link's rate)."""
        return self.figures_of == FIGURES_OF_CPU_PROCESSES

    # --- statistics, derived from the raw samples every time they are asked for
    @property
    def n(self) -> int:
        return len(self.samples_s)

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples_s) if self.samples_s else math.nan

    @property
    def iqr_s(self) -> float:
        xs = sorted(self.samples_s)
        return _quantile(xs, 0.75) - _quantile(xs, 0.25) if xs else math.nan

    @property
    def noisy(self) -> bool:
        return self._noisy_at(self.median_s, self.iqr_s)

    def _noisy_at(self, m: float, iqr: float) -> bool:
        return bool(self.samples_s) and m > 0 and iqr / m > NOISE_THRESHOLD

    @property
    def median_us(self) -> float:
        return self.median_s * 1e6

    @property
    def algbw_gbps(self) -> float:
        """Bytes per second over the median time, in GB/s (1e9)."""
        return self._algbw_at(self.median_s)

    def _algbw_at(self, m: float) -> float:
        """GB/s (1e9) of the bytes moved per run over ``m`` seconds (nan unless ``m`` > 0)."""
        moved = self.bytes_per_iter if self.bytes_per_iter is not None else self.size_bytes
        return moved / m / 1e9 if m and m > 0 else math.nan

    @property
    def busbw_gbps(self) -> float:
        return self.algbw_gbps * self.busbw_factor

    @property
    def ok(self) -> bool:
        return self.error is None and self.wrong == 0

    # --- JSON
    def to_json(self) -> Dict[str, Any]:
        d = {
            "test": self.test, "gpus": list(self.gpus), "link_class": self.link_class,
            "direction": self.direction, "size_bytes": self.size_bytes,
            "bytes_per_iter": self.bytes_per_iter, "busbw_factor": self.busbw_factor,
            "timing": self.timing, "fabric": self.fabric, "figures_of": self.figures_of,
            "samples_s": list(self.samples_s),
            "wrong": self.wrong, "first_bad_index": self.first_bad_index,
            "error": field_to_json(self.error), "extra": self.extra,
        }
        # Derived values are written for readers of the file, never read back: the properties'
        # values, each statistic computed once here (a 200,000-row import writes 400,000 lines).
        m, iqr = self.median_s, self.iqr_s
        algbw = self._algbw_at(m)
        d["derived"] = {
            "median_s": _finite_or_none(m), "iqr_s": _finite_or_none(iqr),
            "algbw_gbps": _finite_or_none(algbw),
            "busbw_gbps": _finite_or_none(algbw * self.busbw_factor),
            "noisy": self._noisy_at(m, iqr),
        }
        return d

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Measurement":
        """The record of one measurements.jsonl line; ValueError naming the field when a value
        has the wrong type (a number written as text must not be compared with numbers later)."""
        d = dict(d)
        d.pop("derived", None)
        _check_types(d)
        d["error"] = field_from_json(d.get("error"))
        d["gpus"] = tuple(d["gpus"])
        d.setdefault("figures_of", None)  # a line written before the field (run_folder.py derives it)
        return cls(**d)


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


_FIELD_TYPES = (  # field, test, what it must be, may be null
    ("test", lambda x: isinstance(x, str), "text", False),
    ("gpus", lambda x: isinstance(x, list) and all(_is_int(g) and g >= 0 for g in x),
     "a list of GPU indices", False),
    ("size_bytes", lambda x: _is_int(x) and x >= 0, "a byte count", False),
    ("samples_s", lambda x: isinstance(x, list) and all(_is_number(v) for v in x),
     "a list of seconds", False),
    ("timing", lambda x: isinstance(x, str), "text", False),
    ("fabric", lambda x: isinstance(x, str), "text", False),
    ("figures_of", lambda x: isinstance(x, str), "text", True),
    ("link_class", lambda x: isinstance(x, str), "text", True),
    ("direction", lambda x: isinstance(x, str), "text", True),
    ("bytes_per_iter", lambda x: _is_int(x) and x >= 0, "a byte count", True),
    ("busbw_factor", _is_number, "a number", False),
    ("wrong", lambda x: _is_int(x) and x >= 0, "a count", False),
    ("first_bad_index", _is_int, "an index", True),
    ("extra", lambda x: isinstance(x, dict), "an object", False),
)


def _check_types(d: Dict[str, Any]) -> None:
    for name, ok, what, nullable in _FIELD_TYPES:
        if name not in d or (nullable and d[name] is None):
            continue  # missing required fields fail in the constructor, naming them
        if not ok(d[name]):
            raise ValueError(f"{name} must be {what}, got {d[name]!r}"[:200])


def _finite_or_none(x: float):
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None
