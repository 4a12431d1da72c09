"""report.md: the run's verdict, findings with causes and remedies, class table, per-pair
table, nccl-tests results, and links to the PNG plots beside it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Sequence

from gputopo.report.history_record import history_points_lines
from gputopo.report.summary import Summary

from .bridge_names import BridgeNamer
from .notes import nccl_tests_statements
from .plots import Plot
from gputopo.report.why.root_causes import evidence_entries, explained_note, root_cause_tags
from .tables import (class_table, figures_note, findings_table, place_words, nccl_tests_table,
                     pair_table, raw_data_note, simulated_line, story, verdict_line)

#: The word in front of each story point.
STORY_TAGS = {"error": "**Problem:**", "warning": "**Warning:**", "ok": "OK:", "info": "Note:"}

FILENAME = "report.md"


def _cell(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def md_table(head: List[str], rows: List[List[str]]) -> str:
    out = ["| " + " | ".join(_cell(h) for h in head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def render_markdown(summary: Summary, plots: Sequence[Plot] = ()) -> str:
    r = summary.run_json()
    lines = [f"# gputopo report: {r['machine'] or 'run'}", ""]
    if summary.partial:
        lines += [f"> **{summary.partial}**", ""]
    if summary.simulated:
        lines += [f"> **SIMULATED**: {simulated_line(summary)}.", ""]
    lines += [f"**{verdict_line(summary)}**", "", "## What was found", ""]
    named = BridgeNamer()
    items = story(summary)
    tags = root_cause_tags(items)
    for it in items:  # the point, its likely cause and remedies, then why and the evidence
        tag = f"**{tags[id(it)]}:**" if id(it) in tags else STORY_TAGS[it.severity]
        lines.append(f"- {tag} {it.text}")
        if it.cause:
            lines.append(f"  - likely cause: {named(it.cause)}")
        lines += [f"  - remedy: {r}" for r in named.all(it.remedies)]
        lines += [f"  - {d}" for d in it.details]
    lines += ["", md_table(["machine", "fabric", "simulated", "started", "GPUs", "measurements", "folder"],
                       [[str(r["machine"]), str(r["fabric"]), str(r["simulated"]).lower(), str(r["started"]),
                         str(r["gpus"]), str(len(summary.run.measurements)), str(r["path"])]]), ""]
    lines += ["## Link classes", ""]
    head, rows = class_table(summary)
    lines += [md_table(head, rows) if rows else "No pairs measured.", ""]
    note = figures_note(summary)
    if note:
        lines += [note, ""]
    lines += ["## Findings (worst first)", ""]
    if summary.findings:
        lines += [md_table(*findings_table(summary.findings)), "",
                  "Alike findings (same severity, kind and class) share a row; summary.json lists each one.", ""]
        lines += ["### Evidence per finding", ""]
        named = BridgeNamer()
        for e in evidence_entries(summary, items):
            ex, first = e.explanation, e.explanation.findings[0]
            lines.append(f"- **{ex.kind}** ({ex.severity}) on {ex.where}")
            lines.append(f"  - {e.example}")
            note = explained_note(e)
            if note:
                lines.append(f"  - _{note}_")
            if e.cause:
                lines.append(f"  - likely cause: {named(e.cause)}")
            lines += [f"  - remedy: {rem}" for rem in named.all(e.remedies)]
            if first.evidence:
                label = "evidence" if len(ex.findings) == 1 else f"evidence of {place_words(first)}"
                lines.append(f"  - {label}: `{json.dumps(first.evidence, sort_keys=True, default=str)[:600]}`")
        lines.append("")
    else:
        lines += ["No findings.", ""]
    if summary.run.history is not None:
        lines += ["## Against this machine's history", ""]
        lines += [f"- {h}" for h in history_points_lines(summary.run.history)] + [""]
    if plots:
        lines += ["## Plots", ""]
        for p in plots:
            lines += [f"### {p.title}", "", f"![{p.title}]({p.name})", ""]
            if p.caption:
                lines += [p.caption, ""]
    head, rows, omitted = pair_table(summary)
    lines += ["## Pairs", ""]
    lines += [md_table(head, rows) if rows else "No pairs.", ""]
    if omitted:
        lines += [f"({omitted} more pairs without findings: see summary.json and results.csv)", ""]
    if rows:
        lines += ["DP / DDP: the training-numerics verdict of nn.DataParallel and DistributedDataParallel on "
                  "the pair (nan@N: NaN from step N). " + (note or ""), ""]
    if summary.run.nccl_tests:
        lines += ["## nccl-tests", "",
                  "Avg bus bandwidth is nccl-tests' own figure: the mean busbw over all sizes (and both "
                  "in-place and out-of-place), not the peak.", ""]
        lines += [md_table(*nccl_tests_table(summary)), ""]
        lines += [f"- {st}" for st in nccl_tests_statements(summary)] + ([""] if nccl_tests_statements(summary) else [])
    if summary.notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in summary.notes] + [""]
    lines += [raw_data_note(summary), ""]
    return "\n".join(lines)


def write_markdown(summary: Summary, out_dir, plots: Sequence[Plot] = ()) -> Path:
    path = Path(out_dir) / FILENAME
    path.write_text(render_markdown(summary, plots), encoding="utf-8")
    return path
