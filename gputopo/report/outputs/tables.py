"""The tables every output shows, as header + rows of text, so the terminal, Markdown and HTML
reports say the same thing in the same words; and the story told above them (`story`): which
link classes or GPUs are broken, how, the likely cause and what to do, then what is fine.

This module builds the tables and is the public entry for the rest: cell_text.py (the text of
one cell), notes.py (the one-line notes beside the tables), why/explain.py (causes and remedies once
per group) and story.py (the story).
"""

from __future__ import annotations

from typing import Dict, List, Tuple

from gputopo.model import Finding
from gputopo.bench.nccl_transport import transport_cell
from gputopo.report.summary import Summary

from .cell_text import count_cell, gbps, gpus_text, group_findings, group_where, pct, place_words
from gputopo.report.why.diagnosis import NESTED, nested_groups
from gputopo.report.why.explain import Explanation, explanations
from .notes import (RAW_FILES, TIMING_WORDS, figures_note, headline_facts, raw_data_note, simulated_line,
                    timing_text, verdict_line)
from .story import KIND_WORDS, VERDICT_WORDS, WAY_WORDS, StoryItem, pairs_text, story

__all__ = ["KIND_WORDS", "MAX_PAIR_ROWS", "RAW_FILES", "TIMING_WORDS", "VERDICT_WORDS", "WAY_WORDS", "Explanation",
           "StoryItem", "Table", "class_table", "count_cell", "explanations", "figures_note", "findings_table",
           "gbps", "gpus_text", "group_findings", "group_where", "place_words", "headline_facts", "nccl_tests_table",
           "numerics_steps", "pair_table", "pairs_text", "pct", "raw_data_note", "simulated_line",
           "story", "timing_text", "verdict_line", "way_cell"]

#: Longest per-pair table in report.md / report.html; the full table is in summary.json.
MAX_PAIR_ROWS = 600

Table = Tuple[List[str], List[List[str]]]


def class_table(summary: Summary) -> Table:
    head = ["class", "pairs", "measured", "series", "median GB/s", "min GB/s", "theoretical GB/s",
            "efficiency", "worst pair", "#wrong", "errors", "warnings", "verdict"]
    rows = []
    for c in summary.classes:
        j = c.to_json()
        rows.append([c.link_class, str(c.pairs), str(c.pairs_measured), c.series or "-", gbps(c.median_gbps),
                     gbps(c.min_gbps), gbps(c.expected_gbps), pct(c.efficiency), gpus_text(c.worst_pair),
                     count_cell(c.wrong), str(j["findings"].get("error", 0)), str(j["findings"].get("warning", 0)),
                     c.verdict])
    return head, rows


def findings_table(findings: List[Finding]) -> Table:
    """One row per group of alike findings (same severity, kind and class), each localised
    finding first with the groups it explains nested under it; summary.json has each finding on
    its own."""
    head = ["severity", "kind", "class", "GPUs", "finding"]
    rows = []
    for depth, group in nested_groups(findings, group_findings):
        f = group[0]
        rows.append([f.severity, (NESTED if depth else "") + f.kind, f.link_class or "-", group_where(group),
                     f.message if len(group) == 1 else f"e.g. {f.message}"])
    return head, rows


def pair_table(summary: Summary, limit: int = MAX_PAIR_ROWS) -> Tuple[List[str], List[List[str]], int]:
    """(header, rows, omitted): pairs with findings first, then by GPUs, at most ``limit`` rows."""
    head = ["GPUs", "class", "series", "GB/s", "theoretical", "efficiency", "#wrong", "DP", "DDP",
            "NCCL via", "findings", "verdict"]
    pairs = [p for p in summary.pairs if len(p.gpus) == 2] + [p for p in summary.pairs if len(p.gpus) > 2]
    flagged = [p for p in pairs if p.findings]
    rest = [p for p in pairs if not p.findings]
    chosen = (flagged + rest)[:limit]
    chosen_set = {id(p) for p in chosen}
    ordered = [p for p in pairs if id(p) in chosen_set]
    steps = numerics_steps(summary)
    rows = []
    for p in ordered:
        rows.append([gpus_text(p.gpus), p.link_class or "?", p.headline_series or "-", gbps(p.headline_gbps),
                     gbps(p.expected.gbps), pct(p.efficiency), count_cell(p.wrong_or_none), way_cell(p, "dp", steps),
                     way_cell(p, "ddp", steps), transport_cell(p.nccl_transport),
                     ", ".join(sorted({f.kind for f in p.findings})) or "-",
                     p.verdict])
    return head, rows, len(pairs) - len(chosen)


def numerics_steps(summary: Summary) -> Dict[tuple, int]:
    """{(gpus, way): step} of the numerics records that went bad at a step."""
    out = {}
    for rec in summary.run.numerics:
        if rec.get("step") is not None and rec.get("verdict") not in (None, "ok"):
            out[(tuple(sorted(rec.get("gpus") or [])), rec.get("way"))] = rec["step"]
    return out


def way_cell(p, way: str, steps: Dict[tuple, int]) -> str:
    """A pair's numerics verdict of one way, with the step it went bad: 'ok', 'nan@10', '-'."""
    v = p.numerics.get(way)
    if v is None:
        return "-"
    step = steps.get((tuple(p.gpus), way))
    return v if step is None or v == "ok" else f"{v}@{step}"


def nccl_tests_table(summary: Summary) -> Table:
    head = ["file", "op", "ranks", "sizes", "peak busbw GB/s (size)", "avg bus bandwidth (nccl-tests)",
            "#wrong", "out of bounds"]
    rows = []
    for log in summary.run.nccl_tests:
        peak = log.get("peak_busbw_gbps")
        library = " ".join(str(x) for x in (log.get("library"), log.get("nccl_version")) if x)
        wrong = ("not checked (validation off)" if log.get("validated") is False
                 else str(log["wrong"]) if log.get("wrong") is not None else "n/a")
        rows.append([str(log.get("file", "?")) + (f" ({log.get('tool') or 'nccl-tests'}, {library})" if library else ""),
                     str(log.get("op", "?")), str(log.get("ranks") or "?"),
                     str(log.get("sizes", "?")),
                     f"{gbps(peak)} ({log.get('peak_size_bytes', '?')} B)",
                     f"{log.get('avg_busbw_gbps')} (mean over all sizes)",
                     wrong, str(log.get("out_of_bounds", "n/a"))])
    return head, rows
