"""What a bench run returns: the RunResult and the ``--json`` document.

A run returns what it measured and which steps hung or crashed (StepFailure facts); the
findings of both are made by the report layer (gputopo.report.measured_findings.bench_findings),
which judges, and the ``--json`` document shows the ones its caller passes. Missing numbers are
JSON ``null`` ("not measured"), never NaN.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gputopo import SCHEMA_VERSION
from gputopo.model import Finding, Measurement, Topology, worst_first
from gputopo.model.collectives import BENCH_COLLECTIVES, is_collective
from gputopo.model.step_failure import StepFailure

from .options import BenchOptions


@dataclass
class RunResult:
    """A finished (or interrupted) bench run: its measurements, and its steps that hung or
    crashed (``failures``, an earlier part's of a resumed run first)."""

    run_dir: Path
    topology: Topology
    fabric: str
    simulated: bool
    machine: str
    options: BenchOptions
    measurements: List[Measurement] = field(default_factory=list)
    failures: List[StepFailure] = field(default_factory=list)
    #: Findings an earlier part of a resumed run wrote into events.jsonl (a run folder from
    #: before step failures were recorded as facts): read back, not judged again.
    recorded_findings: List[Finding] = field(default_factory=list)
    interrupted: bool = False
    concurrent: bool = False
    elapsed_s: float = 0.0
    steps_total: int = 0
    steps_run: int = 0
    steps_skipped: int = 0
    worker_pids: List[int] = field(default_factory=list)
    redone: List[Any] = field(default_factory=list)  # runfolder.resume.Redo: steps a resume redid
    #: NCCL settings a resume set back to the run's saved ones (runfolder.settings.use_saved_nccl_settings)
    nccl_restored: List[str] = field(default_factory=list)


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


def checked_wrong(ms: List[Measurement]) -> Optional[int]:
    """Wrong elements over ``ms``; None when no transfer completed (nothing was compared, so
    there is no count: a pair that hung shows '-', not '#wrong 0')."""
    if not any(m.error is None for m in ms):
        return None
    return sum(m.wrong for m in ms)


def pair_summary(gpus: Tuple[int, ...], link_class: Optional[str],
                 ms: List[Measurement]) -> Dict[str, Any]:
    """One pair's headline numbers (GB/s at the largest size measured, latency at the smallest)."""
    i, j = gpus
    fwd, back = f"{i}->{j}", f"{j}->{i}"
    coll = {}
    for c in BENCH_COLLECTIVES:
        coll[c.name] = _r(_peak(ms, c.test, None, "busbw"))
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
        "nccl_transport": pair_transport(ms),
        "wrong": checked_wrong(ms),
        "wrong_by_test": {t: sum(m.wrong for m in ms if m.test == t)
                          for t in sorted({m.test for m in ms if m.wrong})},
        "noisy": sum(1 for m in ms if m.noisy),
        "measurements": len(ms),
    }


def pair_transport(ms: List[Measurement]) -> Optional[Dict[str, Any]]:
    """What NCCL used for the pair's collectives (nccl_transport.py), None when not recorded."""
    for m in ms:
        nt = (m.extra or {}).get("nccl_transport")
        if is_collective(m.test) and isinstance(nt, dict) and "kind" in nt:
            return nt
    return None


def self_summary(gpu: int, ms: List[Measurement]) -> Dict[str, Any]:
    return {"gpu": gpu,
            "h2d_gbps": _r(_peak(ms, "self.h2d", None)),
            "d2h_gbps": _r(_peak(ms, "self.d2h", None)),
            "d2d_gbps": _r(_peak(ms, "self.d2d", None)),
            "wrong": checked_wrong(ms), "measurements": len(ms)}


def group_by_gpus(result: RunResult):
    pairs: Dict[Tuple[int, ...], List[Measurement]] = defaultdict(list)
    for m in result.measurements:
        pairs[tuple(m.gpus)].append(m)
    return pairs


def bench_document(result: RunResult, findings: Sequence[Finding] = ()) -> Dict[str, Any]:
    """The ``gputopo bench --json`` document; ``findings``: the report's judgement of the run
    (its caller asks gputopo.report for them), shown worst first."""
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
        "findings": [f.to_json() for f in worst_first(list(findings))],
        "measurements": len(result.measurements),
    }
