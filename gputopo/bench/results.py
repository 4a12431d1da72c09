"""What a bench run returns: the RunResult, the findings read straight off the measurements
(``corrupt``, ``noisy``), and the ``--json`` document.

The runner's findings (``hang``, ``crash``) come with the run; ``corrupt`` is every pair whose
measurements had wrong elements, named by test and direction; the report layer adds the
analysis against expected rates (``slow``, ``outlier``...). Missing numbers are JSON ``null``
("not measured"), never NaN.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from gputopo import SCHEMA_VERSION
from gputopo.model import Finding, Measurement, Topology, worst_first

from .options import BenchOptions, format_size


@dataclass
class RunResult:
    """A finished (or interrupted) bench run. ``findings`` are worst first."""

    run_dir: Path
    topology: Topology
    fabric: str
    simulated: bool
    machine: str
    options: BenchOptions
    measurements: List[Measurement] = field(default_factory=list)
    findings: List[Finding] = field(default_factory=list)
    interrupted: bool = False
    concurrent: bool = False
    elapsed_s: float = 0.0
    steps_total: int = 0
    steps_run: int = 0
    steps_skipped: int = 0
    worker_pids: List[int] = field(default_factory=list)

    @property
    def failed_findings(self) -> List[Finding]:
        return [f for f in self.findings if f.kind in ("corrupt", "hang", "crash")]


# ----------------------------------------------------------------------------- findings


def _where(gpus, link_class) -> str:
    g = ",".join(map(str, gpus))
    w = f"GPUs {g}" if len(gpus) > 1 else f"GPU {g}"
    return f"{w} ({link_class})" if link_class else w


def corrupt_findings(measurements: List[Measurement]) -> List[Finding]:
    """One ``corrupt`` finding per pair (or GPU) with wrong elements after any transfer."""
    bad: Dict[Tuple[int, ...], List[Measurement]] = defaultdict(list)
    for m in measurements:
        if m.wrong:
            bad[tuple(m.gpus)].append(m)
    out = []
    for gpus, ms in sorted(bad.items()):
        ms.sort(key=lambda m: (m.test, m.direction or "", m.size_bytes))
        tests = sorted({m.test for m in ms})
        paths = sorted({str(m.extra.get("path")) for m in ms if m.extra.get("path")})
        worst = max(ms, key=lambda m: m.wrong)
        lc = ms[0].link_class
        msg = (f"{_where(gpus, lc)}: wrong elements after {', '.join(tests)} "
               f"(worst {worst.wrong} of {worst.size_bytes // 4} in {worst.test} "
               f"{worst.direction or ''} at {format_size(worst.size_bytes)}, "
               f"first bad index {worst.first_bad_index})")
        if paths:
            msg += f"; path: {', '.join(paths)}"
        out.append(Finding(
            kind="corrupt", severity="error", message=msg, gpus=list(gpus), link_class=lc,
            evidence={"tests": [{"test": m.test, "direction": m.direction,
                                 "size_bytes": m.size_bytes, "wrong": m.wrong,
                                 "first_bad_index": m.first_bad_index,
                                 "wrong_samples": m.extra.get("wrong_samples"),
                                 "samples": m.n, "path": m.extra.get("path")} for m in ms],
                      "paths": paths, "clean_tests": sorted(
                          {x.test for x in measurements if tuple(x.gpus) == gpus and not x.wrong}
                          - set(tests))}))
    return out


def noisy_findings(measurements: List[Measurement]) -> List[Finding]:
    """One ``noisy`` (info) finding per pair whose samples spread: IQR/median > 0.1."""
    noisy: Dict[Tuple[int, ...], List[Measurement]] = defaultdict(list)
    total: Dict[Tuple[int, ...], int] = defaultdict(int)
    for m in measurements:
        total[tuple(m.gpus)] += 1
        if m.noisy:
            noisy[tuple(m.gpus)].append(m)
    out = []
    for gpus, ms in sorted(noisy.items()):
        names = sorted({f"{m.test} {format_size(m.size_bytes)}" for m in ms})
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        out.append(Finding(
            kind="noisy", severity="info", gpus=list(gpus), link_class=ms[0].link_class,
            message=(f"{_where(gpus, ms[0].link_class)}: {len(ms)} of {total[gpus]} measurements "
                     f"noisy (IQR/median > 0.1): {shown}; repeat them or run with fewer "
                     "other loads"),
            evidence={"measurements": [{"test": m.test, "direction": m.direction,
                                        "size_bytes": m.size_bytes,
                                        "iqr_over_median": _r(m.iqr_s / m.median_s)}
                                       for m in ms]}))
    return out


def derived_findings(measurements: List[Measurement]) -> List[Finding]:
    return corrupt_findings(measurements) + noisy_findings(measurements)


# ----------------------------------------------------------------------------- per pair


def _r(x: Optional[float], nd: int = 3) -> Optional[float]:
    if x is None or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return round(float(x), nd)


def _peak(ms: List[Measurement], test: str, direction: Optional[str], metric: str = "algbw"):
    """The value at the largest size measured for ``test`` (and ``direction``)."""
    cand = [m for m in ms if m.test == test and (direction is None or m.direction == direction)
            and m.samples_s]
    if not cand:
        return None
    m = max(cand, key=lambda m: m.size_bytes)
    return m.algbw_gbps if metric == "algbw" else m.busbw_gbps


def _latency(ms: List[Measurement], direction: str):
    cand = [m for m in ms if m.test == "p2p.latency" and m.direction == direction and m.samples_s]
    if not cand:
        return None
    return min(cand, key=lambda m: m.size_bytes).median_us


def pair_summary(gpus: Tuple[int, ...], link_class: Optional[str],
                 ms: List[Measurement]) -> Dict[str, Any]:
    """One pair's headline numbers (GB/s at the largest size measured, latency at the smallest)."""
    i, j = gpus
    fwd, back = f"{i}->{j}", f"{j}->{i}"
    coll = {}
    for name in ("all_reduce", "all_gather", "reduce_scatter", "broadcast"):
        coll[name] = _r(_peak(ms, f"collective.{name}", None, "busbw"))
    dp = {}
    for name in ("broadcast_coalesced", "scatter", "gather", "reduce_add"):
        dp[name] = {d: _r(_peak(ms, f"dp.{name}", d)) for d in (fwd, back)}
    sizes = [m.size_bytes for m in ms if m.test == "p2p.copy"]
    return {
        "gpus": [i, j], "link_class": link_class,
        "size_bytes": max(sizes) if sizes else None,
        "p2p_gbps": {fwd: _r(_peak(ms, "p2p.copy", fwd)), back: _r(_peak(ms, "p2p.copy", back))},
        "staged_gbps": {fwd: _r(_peak(ms, "p2p.staged", fwd)),
                        back: _r(_peak(ms, "p2p.staged", back))},
        "bidir_gbps": _r(_peak(ms, "p2p.copy_bidir", "both")),
        "latency_us": {fwd: _r(_latency(ms, fwd), 2), back: _r(_latency(ms, back), 2)},
        "dp_gbps": dp,
        "busbw_gbps": coll,
        "wrong": sum(m.wrong for m in ms),
        "wrong_by_test": {t: sum(m.wrong for m in ms if m.test == t)
                          for t in sorted({m.test for m in ms if m.wrong})},
        "noisy": sum(1 for m in ms if m.noisy),
        "measurements": len(ms),
    }


def self_summary(gpu: int, ms: List[Measurement]) -> Dict[str, Any]:
    return {"gpu": gpu,
            "h2d_gbps": _r(_peak(ms, "self.h2d", None)),
            "d2h_gbps": _r(_peak(ms, "self.d2h", None)),
            "d2d_gbps": _r(_peak(ms, "self.d2d", None)),
            "wrong": sum(m.wrong for m in ms), "measurements": len(ms)}


def group_by_gpus(result: RunResult):
    pairs: Dict[Tuple[int, ...], List[Measurement]] = defaultdict(list)
    for m in result.measurements:
        pairs[tuple(m.gpus)].append(m)
    return pairs


def bench_document(result: RunResult) -> Dict[str, Any]:
    """The ``gputopo bench --json`` document."""
    by = group_by_gpus(result)
    topo = result.topology
    pairs = []
    for p in result.options.pairs:
        try:
            lc = str(topo.link_class(*p))
        except KeyError:
            lc = None
        pairs.append(pair_summary(tuple(p), lc, by.get(tuple(p), [])))
    selfs = [self_summary(g, by.get((g,), [])) for g in result.options.self_gpus]
    timings = sorted({m.timing for m in result.measurements})
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "bench",
        "machine": result.machine,
        "fabric": result.fabric,
        "simulated": result.simulated,
        "timing": timings,
        "concurrent": result.concurrent,
        "interrupted": result.interrupted,
        "run_dir": str(result.run_dir),
        "preset": result.options.preset,
        "sizes_bytes": list(result.options.effective.sizes_bytes),
        "elapsed_s": _r(result.elapsed_s, 2),
        "pairs": pairs,
        "self": selfs,
        "findings": [f.to_json() for f in worst_first(result.findings)],
        "measurements": len(result.measurements),
    }
