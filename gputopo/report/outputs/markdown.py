"""report.md: the run's verdict, findings with causes and remedies, class table, per-pair
table, nccl-tests results, and links to the PNG plots beside it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List

from gputopo.report.summary import Summary

from .plots import Plot
from .tables import (class_table, explanations, findings_table, gpus_text, nccl_tests_table, pair_table,
                     simulated_line, verdict_line)

FILENAME = "report.md"


def _cell(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def md_table(head: List[str], rows: List[List[str]]) -> str:
    out = ["| " + " | ".join(_cell(h) for h in head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def render_markdown(summary: Summary, plots: List[Plot] = ()) -> str:
    r = summary.run_json()
    lines = [f"# gputopo report: {r['machine'] or 'run'}", ""]
    if summary.simulated:
        lines += [f"> **SIMULATED**: {simulated_line(summary)}.", ""]
    lines += [f"**{verdict_line(summary)}**", "",
              md_table(["machine", "fabric", "simulated", "started", "GPUs", "measurements", "folder"],
                       [[str(r["machine"]), str(r["fabric"]), str(r["simulated"]).lower(), str(r["started"]),
                         str(r["gpus"]), str(len(summary.run.measurements)), str(r["path"])]]), ""]
    lines += ["## Link classes", ""]
    head, rows = class_table(summary)
    lines += [md_table(head, rows) if rows else "No pairs measured.", ""]
    lines += ["## Findings (worst first)", ""]
    if summary.findings:
        lines += [md_table(*findings_table(summary.findings)), ""]
        lines += ["### Causes and remedies", ""]
        for ex in explanations(summary.findings):
            first = ex.findings[0]
            lines.append(f"- **{ex.kind}** ({ex.severity}) on {ex.where}")
            if len(ex.findings) == 1:
                lines.append(f"  - {first.message}")
            if ex.cause:
                lines.append(f"  - likely cause: {ex.cause}")
            for rem in ex.remedies:
                lines.append(f"  - remedy: {rem}")
            if first.evidence:
                label = "evidence" if len(ex.findings) == 1 else f"evidence (GPUs {gpus_text(first.gpus)})"
                lines.append(f"  - {label}: `{json.dumps(first.evidence, sort_keys=True, default=str)[:600]}`")
        lines.append("")
    else:
        lines += ["No findings.", ""]
    head, rows, omitted = pair_table(summary)
    lines += ["## Pairs", ""]
    lines += [md_table(head, rows) if rows else "No pairs.", ""]
    if omitted:
        lines += [f"({omitted} more pairs without findings: see summary.json and results.csv)", ""]
    if summary.run.nccl_tests:
        lines += ["## nccl-tests", "",
                  "Avg bus bandwidth is nccl-tests' own figure: the mean busbw over all sizes (and both "
                  "in-place and out-of-place), not the peak.", ""]
        lines += [md_table(*nccl_tests_table(summary)), ""]
    if plots:
        lines += ["## Plots", ""]
        for p in plots:
            lines += [f"### {p.title}", "", f"![{p.title}]({p.name})", ""]
    if summary.notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in summary.notes] + [""]
    lines += ["Raw data: measurements.jsonl (every sample), results.csv (one row per measurement), "
              "summary.json (findings, class and pair tables).", ""]
    return "\n".join(lines)


def write_markdown(summary: Summary, out_dir, plots: List[Plot] = ()) -> Path:
    path = Path(out_dir) / FILENAME
    path.write_text(render_markdown(summary, plots), encoding="utf-8")
    return path
