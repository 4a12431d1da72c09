"""Compare a run's figures with the machine's baseline: the measurements the `drift` finding
is made of (gputopo/report/history_findings.py judges them).

Only headline figures are compared (the size a series is judged at), each with the baseline
of the very same pair, series, direction, size and time source. A class is compared by the
median of its pairs' figures against the median of their baselines, so a class-wide slowdown
is one statement, not one per pair.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from .query import BaselineFigure, FigureKey
from .record import Figure

#: Fraction of the baseline below which a figure has drifted (check's [history] can change it).
DEFAULT_FRACTION = 0.8
#: How many earlier error-free runs the baseline is the median of.
DEFAULT_RUNS = 5


@dataclass
class DriftPoint:
    """One figure (a pair's, or a class's median) against its baseline."""

    scope: str  # "pair" | "class"
    gpus: tuple[int, ...] | None  # None for a class
    link_class: str | None
    series: str
    direction: str | None
    size_bytes: int
    timing: str
    gbps: float
    baseline_gbps: float
    baseline_runs: int
    baseline_since_s: float
    pairs: int = 1  # pairs behind a class figure

    @property
    def ratio(self) -> float:
        return self.gbps / self.baseline_gbps if self.baseline_gbps > 0 else float("inf")


def drift_points(figures: list[Figure], base: dict[FigureKey, BaselineFigure]) -> list[DriftPoint]:
    """Every headline figure that has a baseline, pair by pair and class by class."""
    points: list[DriftPoint] = []
    by_class: dict[tuple[str | None, str, str | None, int, str], list[tuple[float, BaselineFigure]]] = {}
    for f in figures:
        if not f.headline or f.gbps is None:
            continue
        b = base.get((",".join(map(str, f.gpus)), f.series, f.direction, f.size_bytes, f.timing))
        if b is None:
            continue
        points.append(DriftPoint("pair", tuple(f.gpus), f.link_class, f.series, f.direction,
                                 f.size_bytes, f.timing, f.gbps, b.median_gbps, b.runs, b.first_s))
        if len(f.gpus) == 2 and f.link_class:
            key = (f.link_class, f.series, class_direction(f.gpus, f.direction), f.size_bytes, f.timing)
            by_class.setdefault(key, []).append((f.gbps, b))
    for (lc, series, direction, size, timing), vs in by_class.items():
        if len(vs) < 2:  # one pair: its own point says it
            continue
        points.append(DriftPoint("class", None, lc, series, direction, size, timing,
                                 statistics.median(g for g, _b in vs),
                                 statistics.median(b.median_gbps for _g, b in vs),
                                 min(b.runs for _g, b in vs), min(b.first_s for _g, b in vs),
                                 pairs=len(vs)))
    return points


def class_direction(gpus: tuple[int, ...], direction: str | None) -> str | None:
    """A pair's direction as its class sees it: "i->j" (lower GPU to higher), "j->i", or as is
    ("both", None), so that the same way over every pair of a class is one series."""
    lo, hi = sorted(gpus)
    return {f"{lo}->{hi}": "i->j", f"{hi}->{lo}": "j->i"}.get(direction or "", direction)


def drifted(points: list[DriftPoint], fraction: float = DEFAULT_FRACTION) -> list[DriftPoint]:
    return [p for p in points if p.ratio < fraction]
