"""The findings read straight off a run's measurements: ``corrupt`` (every pair whose
measurements had wrong elements, named by test and data path) and ``noisy`` (every pair whose
samples spread).

Judging lives in gputopo.report (house rule: measuring code returns measurements); a bench
run's own findings (:func:`bench_findings`: these, and its steps that hung or crashed) are
what its caller shows at its end, and the report builds on them (integrity_findings.py adds
host facts, cause and remedies; bandwidth_findings.py the link classes from the topology).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Callable, Dict, List, Optional, Tuple

from gputopo.bench.options import format_size
from gputopo.bench.results import RunResult
from gputopo.model import Finding, Measurement, worst_first
from gputopo.model.finding import where_text
from gputopo.model.measurement import NOISE_THRESHOLD

from .step_failures import step_failure_findings

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
        where = where_text(gpus, lc) if gpus else "the whole job (its GPUs not named)"
        msg = f"{where}: {total} wrong element(s) in {', '.join(sorted(tests))}"
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


def bench_findings(result: RunResult) -> List[Finding]:
    """A bench run's findings by themselves, worst first: those an earlier part of a resumed run
    recorded, its steps that hung or crashed (step_failures.py), and what its measurements make
    (``corrupt``, ``noisy``). The run's report adds the host facts, causes and the rest."""
    return worst_first(list(result.recorded_findings) + step_failure_findings(result.failures)
                       + corrupt_findings(result.measurements) + noisy_findings(result.measurements))


def _r(x: Optional[float], nd: int = 3) -> Optional[float]:
    if x is None or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return round(float(x), nd)
