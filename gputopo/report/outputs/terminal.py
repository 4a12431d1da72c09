"""What the terminal shows after a run or `gputopo report DIR` (rich): the verdict and the story
first (what is broken where, the likely cause, what to do, what is fine), then the class table
and the findings, worst first, alike ones grouped, with the cause and remedies of any the story
did not tell."""

from __future__ import annotations

from typing import Optional

from gputopo.console import literal_console
from gputopo.report.summary import Summary

from .bridge_names import BridgeNamer
from .diagnosis import NESTED, nested_groups
from .wrap import hanging
from .tables import (class_table, explanations, figures_note, gbps, group_findings, group_where, simulated_line,
                     story, verdict_line)

VERDICT_STYLE = {"ok": "green", "degraded": "yellow", "broken": "bold red", "not-measured": "dim"}
SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "dim", "ok": "green"}
STORY_TAGS = {"error": "PROBLEM", "warning": "WARNING", "ok": "OK", "info": "note"}
#: Findings shown with cause and remedies; the rest are one line each.
DETAILED_FINDINGS = 5
#: Longest findings list on the terminal (the reports have all).
MAX_FINDINGS = 40


def print_summary(summary: Summary, console=None, *, max_findings: Optional[int] = MAX_FINDINGS) -> None:
    from rich.table import Table
    from rich.text import Text

    console = console or literal_console()
    if summary.partial:
        console.print(Text(summary.partial, style="bold black on yellow"))
    if summary.simulated:
        console.print(Text(f"SIMULATED: {simulated_line(summary)}", style="bold black on yellow"))
    console.print(Text(verdict_line(summary), style=VERDICT_STYLE.get(summary.verdict, "")))
    points = story(summary)
    told = set()
    named = BridgeNamer()  # a bridge list is spelled out once on the terminal
    for it in points:
        if it.severity == "info":
            continue  # the figures note goes under the class table
        hanging(console, Text(f"{STORY_TAGS[it.severity]} ", style=SEVERITY_STYLE[it.severity]), it.text)
        for d in it.details:  # "why: ...", "underneath: ...": wrapped under the text after the label
            label, sep, rest = d.partition(": ")
            if not sep or " " in label:  # not a "label: text" line
                label, rest = "", d
            hanging(console, Text(f"    {label}{sep if label else ''}", style="dim"), Text(rest, style="dim"))
        if it.cause:
            hanging(console, "    likely cause: ", named(it.cause))
        for rem in named.all(it.remedies):
            hanging(console, "    - ", rem)
        told.update(id(f) for f in it.findings)

    head, rows = class_table(summary)
    t = Table(title="Link classes", title_justify="left")
    for h in head:
        t.add_column(h, justify="right" if h not in ("class", "series", "verdict", "worst pair") else "left")
    for r in rows:
        t.add_row(*r[:-1], Text(r[-1], style=VERDICT_STYLE.get(r[-1], "")))
    if rows:
        console.print(t)
        note = figures_note(summary)
        if note:
            console.print(Text(note, style="dim"))

    findings = summary.findings
    if not findings:
        console.print("No findings.")
    else:
        groups = nested_groups(findings, group_findings)
        shown = groups if max_findings is None else groups[:max_findings]
        ft = Table(title=f"Findings (worst first, each culprit above what it explains; {len(findings)} in all, "
                   "alike ones grouped)",
                   title_justify="left")
        for h in ("severity", "kind", "GPUs", "class", "finding"):
            ft.add_column(h, overflow="fold")
        for depth, group in shown:
            f = group[0]
            message = f.message if len(group) == 1 else f"e.g. {f.message}"
            ft.add_row(Text(f.severity, style=SEVERITY_STYLE[f.severity]), (NESTED if depth else "") + f.kind,
                       group_where(group),
                       f.link_class or "-", message)
        console.print(ft)
        if len(shown) < len(groups):
            console.print(f"... {len(groups) - len(shown)} more groups of findings in report.md / summary.json")
        detailed = 0
        for ex in explanations(findings):  # the causes the story above did not tell, worst first
            if detailed >= DETAILED_FINDINGS:
                break
            if not (ex.cause or ex.remedies) or all(id(f) in told for f in ex.findings):
                continue
            detailed += 1
            console.print(Text(f"{ex.kind} ({ex.where}):", style=SEVERITY_STYLE[ex.severity]))
            hanging(console, "    likely cause: ", named(ex.cause) or "unknown")
            for rem in named.all(ex.remedies):
                hanging(console, "    - ", rem)
    if summary.run.nccl_tests:
        for log in summary.run.nccl_tests:
            avg = log.get("avg_busbw_gbps")
            avg_text = (f"{avg} GB/s (nccl-tests' figure: mean over all sizes, not the peak)" if avg is not None
                        else "not printed (the log has no footer)")
            console.print(f"nccl-tests {log.get('op')} ({log.get('file')}): peak busbw "
                          f"{gbps(log.get('peak_busbw_gbps'))} GB/s, avg bus bandwidth {avg_text}")
    console.print(Text(f"report: {summary.run.path}/report.html", style="dim"))
