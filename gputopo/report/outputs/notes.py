"""The one-line notes every output shows beside its tables: SIMULATED, what the GB/s figures
are and where their time came from, the verdict with its finding counts, and the raw files of
the run folder a reader may want next.
"""

from __future__ import annotations

from typing import Dict, List, Optional

from gputopo.model.finding_kinds import is_data_trouble
from gputopo.report.summary import Summary

from gputopo.report.why.root_causes import verdict_counts
from gputopo.model.sizes import size_text


def simulated_line(summary: Summary) -> str:
    """Follows the word SIMULATED wherever a person sees the run."""
    return (f"machine '{summary.run.machine}' is simulated: figures come from a modeled link "
            "model and injected faults, not from real GPUs")


# --- what the GB/s figures are ----------------------------------------------------------------

#: Where the time behind a GB/s figure came from, in words.
TIMING_WORDS = {"modeled": "the simulated machine's link model, not a clock",
                "wall": "wall clock", "cuda-events": "CUDA events"}


def headline_facts(summary: Summary) -> Dict[str, List[str]]:
    """What the pairs' GB/s figures are: series, metric, sizes and time sources (unique, sorted)."""
    series, metric, sizes, timing = set(), set(), set(), set()
    for p in summary.pairs:
        s = p.headline_series
        if not s:
            continue
        d = p.series[s]
        series.add(s)
        metric.add(d.get("metric") or "algbw")
        if isinstance(d.get("size_bytes"), int):
            sizes.add(d["size_bytes"])
        if d.get("timing"):
            timing.add(d["timing"])
    return {"series": sorted(series), "metric": sorted(metric),
            "sizes": [size_text(x) for x in sorted(sizes)], "timing": sorted(timing)}


def timing_text(timings: List[str], words: bool = True) -> str:
    if not words:
        return ", ".join(timings) or "n/a"
    return ", ".join(f"{t} ({TIMING_WORDS[t]})" if t in TIMING_WORDS else t for t in timings) or "n/a"


def figures_note(summary: Summary) -> Optional[str]:
    """One sentence beside the tables: what GB/s means here and where its time came from."""
    h = headline_facts(summary)
    if not h["series"]:
        return None
    return (f"GB/s: {'/'.join(h['metric'])} of {', '.join(h['series'])} at the largest error-free size "
            f"({', '.join(h['sizes'])}), the slower direction of each pair (GB = 1e9 bytes); theoretical: "
            "the link's rate (NVLink version x links, PCIe generation x width of the narrower end); "
            f"efficiency = GB/s / theoretical. Time source: {timing_text(h['timing'])}."
            + (" On the cpu fabric CPU processes stand in for the GPUs: these are not GPU link rates, and no "
               "efficiency is judged." if any(m.of_stand_ins for m in summary.run.measurements) else ""))


# --- the verdict and the raw files ------------------------------------------------------------

def verdict_line(summary: Summary) -> str:
    counts: Dict[str, int] = {}
    for f in summary.findings:
        counts[f.severity] = counts.get(f.severity, 0) + 1
    parts = [f"{counts[s]} {s}{'s' if counts[s] != 1 else ''}" for s in ("error", "warning", "info") if counts.get(s)]
    problems = verdict_counts(summary)  # root causes first: "1 root cause (49 errors in 24 pairs, ...)"
    line = f"verdict: {summary.verdict}" + (f": {problems}" if problems else
                                            f" ({', '.join(parts)})" if parts else " (no findings)")
    judged = summary.judged.line(summary.verdict)  # what was judged, what not and why (judged.py)
    if judged:
        line += f"; {judged}"
    if any(is_data_trouble(f.kind) and f.severity != "info" for f in summary.findings):
        line += "; the run's data is incomplete or invalid (see 'Data:')"
    return line


#: The raw files of a run folder a reader may want next, with what each holds.
RAW_FILES = (("measurements.jsonl", "every measurement with its raw samples"),
             ("results.csv", "one row per measurement"),
             ("numerics.jsonl", "the training runs per pair and way"),
             ("numerics_losses.csv", "their loss per step"),
             ("summary.json", "findings, class and pair tables"))


def raw_data_note(summary: Summary) -> str:
    folder = summary.run.path
    have = [f"{name} ({what})" for name, what in RAW_FILES
            if name in ("results.csv", "summary.json") or (folder / name).exists()]
    return "Raw data in the run folder: " + "; ".join(have) + "."


def nccl_tests_statements(summary: Summary) -> List[str]:
    """What each imported nccl-tests log left out, in words: what was inferred and how (a
    header, the collective, the rank count), and what stays unknown (its GPUs and hosts)."""
    out = []
    for log in summary.run.nccl_tests:
        for label, lines in (("inferred", log.get("inferred")), ("not known", log.get("unknown"))):
            out += [f"{log.get('file', '?')}: {label}: {line}" for line in lines or []]
    return out
