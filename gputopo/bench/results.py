"""What a bench run returns: the RunResult, the findings read straight off the measurements
(``corrupt``, ``noisy``), and the ``--json`` document.

The runner's findings (``hang``, ``crash``) come with the run; ``corrupt`` is every pair whose
measurements had wrong elements, named by test and data path; ``noisy`` every pair whose samples
spread. The report layer builds on these two (adding host facts, cause and remedies) and adds
the analysis against expected rates (``slow``, ``outlier``...). Missing numbers are JSON ``null``
("not measured"), never NaN.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from gputopo import SCHEMA_VERSION
from gputopo.model import Finding, Measurement, Topology, worst_first
from gputopo.model.finding import where_text
from gputopo.model.measurement import NOISE_THRESHOLD

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
    redone: List[Any] = field(default_factory=list)  # resume_plan.Redo: steps a resume redid
    #: NCCL settings a resume set back to the run's saved ones (run_settings.use_saved_nccl_settings)
    nccl_restored: List[str] = field(default_factory=list)

    @property
    def failed_findings(self) -> List[Finding]:
        return [f for f in self.findings if f.kind in ("corrupt", "hang", "crash")]


# ----------------------------------------------------------------------------- findings


#: Tests whose data is staged through host memory (a peer copy may be too: ``path == "host"``).
STAGED_TESTS_PREFIX = ("p2p.staged", "self.")

LinkClassOf = Callable[[Measurement], Optional[str]]


def path_kind(m: Measurement) -> str:
    """'peer', 'staged' or 'collective': which data path a measurement exercised (NCCL's,
    labelled "nccl", is a collective's whatever route NCCL took)."""
    if m.extra.get("path") == "nccl":
        return "collective"
    if m.extra.get("path") == "host" or m.test.startswith(STAGED_TESTS_PREFIX):
        return "staged"
    if m.test.startswith("collective."):
        return "collective"
    return "peer"


def _recorded_class(m: Measurement) -> Optional[str]:
    return m.link_class


def _by_gpus(measurements: List[Measurement]) -> Dict[Tuple[int, ...], List[Measurement]]:
    by: Dict[Tuple[int, ...], List[Measurement]] = defaultdict(list)
    for m in measurements:
        by[tuple(sorted(m.gpus))].append(m)
    return by


def corrupt_findings(measurements: List[Measurement],
                     link_class_of: LinkClassOf = _recorded_class) -> List[Finding]:
    """One ``corrupt`` finding per pair (or GPU, or collective group) with wrong elements after
    any transfer, gathering every test that returned wrong data on it: the *pattern* is the
    diagnosis (the report adds cause and remedies from it). ``evidence.tests`` has, per test,
    the data path it exercised (``path_kind``); ``link_class_of`` names a measurement's class
    (default: the one it recorded)."""
    out = []
    for gpus, ms in sorted(_by_gpus(measurements).items()):
        bad = [m for m in ms if m.wrong and m.wrong > 0]
        if not bad:
            continue
        lc = link_class_of(bad[0])
        tests: Dict[str, dict] = {}
        for m in bad:
            t = tests.setdefault(m.test, {"wrong": 0, "runs": 0, "sizes": [], "directions": [],
                                          "first_bad_index": None, "path": path_kind(m)})
            t["wrong"] += int(m.wrong)
            t["runs"] += 1
            if m.size_bytes not in t["sizes"]:
                t["sizes"].append(m.size_bytes)
            if m.direction and m.direction not in t["directions"]:
                t["directions"].append(m.direction)
            if t["first_bad_index"] is None and m.first_bad_index is not None:
                t["first_bad_index"] = m.first_bad_index
            count = m.extra.get("count")
            if isinstance(count, int) and count > 0:
                t["max_wrong_fraction"] = max(t.get("max_wrong_fraction", 0.0), round(m.wrong / count, 6))
            route = m.extra.get("path")
            if route and route not in t.setdefault("routes", []):
                t["routes"].append(route)
        bad_paths = {t["path"] for t in tests.values()}
        clean = sorted({m.test for m in ms if m.ok and m.test not in tests})
        clean_paths = {path_kind(m) for m in ms if m.ok and m.test not in tests}
        total = sum(t["wrong"] for t in tests.values())
        msg = f"{where_text(gpus, lc)}: {total} wrong element(s) in {', '.join(sorted(tests))}"
        if "peer" in bad_paths and "staged" not in bad_paths and "staged" in clean_paths:
            msg += "; copies staged through host memory were correct"
        out.append(Finding("corrupt", "error", msg, gpus=list(gpus), link_class=lc,
                           evidence={"total_wrong": total, "tests": tests, "clean_tests": clean}))
    return out


def noisy_findings(measurements: List[Measurement],
                   link_class_of: LinkClassOf = _recorded_class) -> List[Finding]:
    """One ``noisy`` (info) finding per pair whose samples spread (IQR/median above the model's
    NOISE_THRESHOLD): its figures are less certain; nothing is concluded from the spread."""
    out = []
    for gpus, all_ms in sorted(_by_gpus(measurements).items()):
        ms = [m for m in all_ms if m.noisy]
        if not ms:
            continue
        lc = link_class_of(ms[0])
        names = sorted({f"{m.test} {format_size(m.size_bytes)}" for m in ms})
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        out.append(Finding(
            "noisy", "info",
            f"{where_text(gpus, lc)}: {len(ms)} of {len(all_ms)} measurements noisy (IQR/median > "
            f"{NOISE_THRESHOLD:g}): {shown}; repeat them or run with fewer other loads",
            gpus=list(gpus), link_class=lc,
            evidence={"measurements": [{"test": m.test, "direction": m.direction,
                                        "size_bytes": m.size_bytes,
                                        "iqr_over_median": _r(m.iqr_s / m.median_s)}
                                       for m in ms[:20]],
                      "noisy": len(ms), "total": len(all_ms)}))
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
        if m.test.startswith("collective.") and isinstance(nt, dict) and "kind" in nt:
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
