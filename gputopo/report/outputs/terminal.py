"""What the terminal shows after a run or `gputopo report DIR`: the class table and the findings,
worst first, with the likely cause and remedies of the worst ones (rich)."""

from __future__ import annotations

from typing import Dict, List, Optional

from gputopo.report.summary import Summary

from .tables import class_table, gbps, gpus_text, simulated_line, verdict_line

VERDICT_STYLE = {"ok": "green", "degraded": "yellow", "broken": "bold red", "not-measured": "dim"}
SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "dim"}
#: Findings shown with cause and remedies; the rest are one line each.
DETAILED_FINDINGS = 5
#: Longest findings list on the terminal (the reports have all).
MAX_FINDINGS = 40


def group_findings(findings) -> List[List]:
    """Findings of the same severity, kind and link class, in worst-first order of their first."""
    groups: Dict[tuple, List] = {}
    for f in findings:
        groups.setdefault((f.severity, f.kind, f.link_class), []).append(f)
    return list(groups.values())


def print_summary(summary: Summary, console=None, *, max_findings: Optional[int] = MAX_FINDINGS) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = console or Console()
    if summary.simulated:
        console.print(Text(f"SIMULATED: {simulated_line(summary)}", style="bold black on yellow"))
    console.print(Text(verdict_line(summary), style=VERDICT_STYLE.get(summary.verdict, "")))

    head, rows = class_table(summary)
    t = Table(title="Link classes", title_justify="left")
    for h in head:
        t.add_column(h, justify="right" if h not in ("class", "series", "verdict", "worst pair") else "left")
    for r in rows:
        t.add_row(*r[:-1], Text(r[-1], style=VERDICT_STYLE.get(r[-1], "")))
    if rows:
        console.print(t)

    findings = summary.findings
    if not findings:
        console.print("No findings.")
    else:
        groups = group_findings(findings)
        shown = groups if max_findings is None else groups[:max_findings]
        ft = Table(title=f"Findings (worst first; {len(findings)} in all, alike ones grouped)",
                   title_justify="left")
        for h in ("severity", "kind", "GPUs", "class", "finding"):
            ft.add_column(h, overflow="fold")
        for group in shown:
            f = group[0]
            if len(group) == 1:
                where, message = gpus_text(f.gpus), f.message
            else:
                where = f"{len(group)} pairs: " + " ".join(gpus_text(g.gpus) for g in group)
                message = f"e.g. {f.message}"
            ft.add_row(Text(f.severity, style=SEVERITY_STYLE[f.severity]), f.kind, where,
                       f.link_class or "-", message)
        console.print(ft)
        if len(shown) < len(groups):
            console.print(f"... {len(groups) - len(shown)} more groups of findings in report.md / summary.json")
        detailed = 0
        for group in groups:  # one explanation per kind of problem per class
            f = group[0]
            if f.severity == "info" or detailed >= DETAILED_FINDINGS:
                break
            if not (f.cause or f.remedies):
                continue
            detailed += 1
            console.print(Text(f"{f.kind} ({f.link_class or gpus_text(f.gpus)}): ", style=SEVERITY_STYLE[f.severity])
                          + Text(f"likely cause: {f.cause or 'unknown'}"))
            for rem in f.remedies:
                console.print(f"    - {rem}")
    if summary.run.nccl_tests:
        for log in summary.run.nccl_tests:
            console.print(f"nccl-tests {log.get('op')} ({log.get('file')}): peak busbw "
                          f"{gbps(log.get('peak_busbw_gbps'))} GB/s, avg bus bandwidth "
                          f"{log.get('avg_busbw_gbps')} GB/s (nccl-tests' figure: mean over all sizes, not the peak)")
    console.print(f"[dim]report: {summary.run.path}/report.html[/dim]")
