"""The tables every output shows, as header + rows of text, so the terminal, Markdown and HTML
reports say the same thing in the same words.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from gputopo.model import Finding
from gputopo.report.summary import Summary

#: Longest per-pair table in report.md / report.html; the full table is in summary.json.
MAX_PAIR_ROWS = 600

Table = Tuple[List[str], List[List[str]]]


def gbps(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:.3g}"


def pct(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def gpus_text(g) -> str:
    return ",".join(map(str, g)) if g else "-"


def class_table(summary: Summary) -> Table:
    head = ["class", "pairs", "measured", "series", "median GB/s", "min GB/s", "theoretical GB/s",
            "efficiency", "worst pair", "#wrong", "errors", "warnings", "verdict"]
    rows = []
    for c in summary.classes:
        j = c.to_json()
        rows.append([c.link_class, str(c.pairs), str(c.pairs_measured), c.series or "-", gbps(c.median_gbps),
                     gbps(c.min_gbps), gbps(c.expected_gbps), pct(c.efficiency), gpus_text(c.worst_pair),
                     str(c.wrong), str(j["findings"].get("error", 0)), str(j["findings"].get("warning", 0)),
                     c.verdict])
    return head, rows


def findings_table(findings: List[Finding]) -> Table:
    head = ["severity", "kind", "GPUs", "class", "finding"]
    return head, [[f.severity, f.kind, gpus_text(f.gpus), f.link_class or "-", f.message] for f in findings]


def pair_table(summary: Summary, limit: int = MAX_PAIR_ROWS) -> Tuple[List[str], List[List[str]], int]:
    """(header, rows, omitted): pairs with findings first, then by GPUs, at most ``limit`` rows."""
    head = ["GPUs", "class", "series", "GB/s", "theoretical", "efficiency", "#wrong", "DP", "DDP",
            "findings", "verdict"]
    pairs = [p for p in summary.pairs if len(p.gpus) == 2] + [p for p in summary.pairs if len(p.gpus) > 2]
    flagged = [p for p in pairs if p.findings]
    rest = [p for p in pairs if not p.findings]
    chosen = (flagged + rest)[:limit]
    chosen_set = {id(p) for p in chosen}
    ordered = [p for p in pairs if id(p) in chosen_set]
    rows = []
    for p in ordered:
        rows.append([gpus_text(p.gpus), p.link_class or "?", p.headline_series or "-", gbps(p.headline_gbps),
                     gbps(p.expected.gbps), pct(p.efficiency), str(p.wrong), p.numerics.get("dp", "-"),
                     p.numerics.get("ddp", "-"), ", ".join(sorted({f.kind for f in p.findings})) or "-",
                     p.verdict])
    return head, rows, len(pairs) - len(chosen)


def nccl_tests_table(summary: Summary) -> Table:
    head = ["file", "op", "ranks", "sizes", "peak busbw GB/s (size)", "avg bus bandwidth (nccl-tests)",
            "#wrong", "out of bounds"]
    rows = []
    for log in summary.run.nccl_tests:
        peak = log.get("peak_busbw_gbps")
        rows.append([str(log.get("file", "?")), str(log.get("op", "?")), str(log.get("ranks", "?")),
                     str(log.get("sizes", "?")),
                     f"{gbps(peak)} ({log.get('peak_size_bytes', '?')} B)",
                     f"{log.get('avg_busbw_gbps')} (mean over all sizes)",
                     str(log.get("wrong", "n/a")), str(log.get("out_of_bounds", "n/a"))])
    return head, rows


def simulated_line(summary: Summary) -> str:
    """Follows the word SIMULATED wherever a person sees the run."""
    return (f"machine '{summary.run.machine}' is simulated: figures come from a modeled link "
            "model and injected faults, not from real GPUs")


@dataclass
class Explanation:
    """Findings that share kind, severity, cause and remedies: explained once, pairs listed."""

    kind: str
    severity: str
    cause: Optional[str]
    remedies: List[str]
    findings: List[Finding] = field(default_factory=list)

    @property
    def where(self) -> str:
        parts = []
        for f in self.findings:
            w = f"GPUs {gpus_text(f.gpus)}" if f.gpus else "machine"
            parts.append(w + (f" ({f.link_class})" if f.link_class else ""))
        return ", ".join(dict.fromkeys(parts))


def explanations(findings: List[Finding]) -> List[Explanation]:
    """Warnings and errors grouped by (kind, severity, cause, remedies), worst first."""
    groups: Dict[tuple, Explanation] = {}
    for f in findings:
        if f.severity == "info":
            continue
        key = (f.kind, f.severity, f.cause, tuple(f.remedies))
        if key not in groups:
            groups[key] = Explanation(f.kind, f.severity, f.cause, list(f.remedies))
        groups[key].findings.append(f)
    return list(groups.values())


def verdict_line(summary: Summary) -> str:
    counts = {}
    for f in summary.findings:
        counts[f.severity] = counts.get(f.severity, 0) + 1
    parts = [f"{counts[s]} {s}{'s' if counts[s] != 1 else ''}" for s in ("error", "warning", "info") if counts.get(s)]
    return f"verdict: {summary.verdict}" + (f" ({', '.join(parts)})" if parts else " (no findings)")
