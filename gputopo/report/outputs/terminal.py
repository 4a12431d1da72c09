"""What the terminal shows after a run or `gputopo report DIR` (rich): the verdict and the story
first (what is broken where, the likely cause, what to do, what is fine), then the class table
and the findings, worst first, alike ones grouped, with the cause and remedies of any the story
did not tell."""

from __future__ import annotations

from typing import Optional, Set

from gputopo.console import literal_console
from gputopo.fit_table import Column, fitted_table, left_out_note
from gputopo.model.finding_kinds import is_data_trouble
from gputopo.report.expected_basis import ABOVE_REFERENCE, AS_EXPECTED, NO_REFERENCE
from gputopo.report.import_numbering import GPU_NUMBERS, TOPO_FILE
from gputopo.report.kernel_log_findings import KERNEL_LOG_NOTE
from gputopo.report.single_gpu import ONE_GPU
from gputopo.report.summary import Summary

from .bridge_names import BridgeNamer
from gputopo.report.why.root_causes import root_cause_tags
from gputopo.report.why.diagnosis import NESTED, nested_groups
from .wrap import hanging
from .tables import (class_table, explanations, figures_note, gbps, group_findings, group_where, simulated_line,
                     story, verdict_line)

VERDICT_STYLE = {"ok": "green", "degraded": "yellow", "broken": "bold red", "not-measured": "dim",
                 "not-judged": "dim"}
SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "dim", "ok": "green"}
STORY_TAGS = {"error": "PROBLEM", "warning": "WARNING", "ok": "OK", "info": "note"}
#: The class table's columns: the class, #wrong and the verdict stay whole at any width; the
#: figures a user can read in report.md leave first on a narrow terminal.
CLASS_COLUMNS = {
    "class": Column("class", keep=True), "pairs": Column("pairs", "right", drop=3),
    "measured": Column("measured", "right", drop=6), "series": Column("series", drop=5),
    "median GB/s": Column("median GB/s", "right", drop=1), "min GB/s": Column("min GB/s", "right", drop=7),
    "theoretical GB/s": Column("theoretical GB/s", "right", drop=8), "efficiency": Column("efficiency", "right", drop=2),
    "worst pair": Column("worst pair", drop=4), "#wrong": Column("#wrong", "right", keep=True),
    "errors": Column("errors", "right", drop=9), "warnings": Column("warnings", "right", drop=10),
    "verdict": Column("verdict", keep=True),
}
#: Narrower than this, findings are listed one folded entry each instead of a table whose
#: message column would be a few words wide.
FINDINGS_TABLE_MIN_WIDTH = 110
#: Findings shown with cause and remedies; the rest are one line each.
DETAILED_FINDINGS = 5
#: Longest findings list on the terminal (the reports have all).
MAX_FINDINGS = 40


def is_data_line(it) -> bool:
    """A story item of what the run's data lacks (``Data: ...``): said even where it is info."""
    return any(is_data_trouble(f.kind) for f in it.findings)


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
    told: Set[int] = set()  # id() of the findings the story told
    named = BridgeNamer()  # a bridge list is spelled out once on the terminal
    tags = root_cause_tags(points)
    for it in points:
        if it.severity == "info" and not is_data_line(it):
            continue  # the figures note goes under the class table (what an import could not read is said)
        # as report.html: the root cause first, its likely cause and remedies once, then the
        # reasoning and the per-class evidence under it
        tag = tags.get(id(it), STORY_TAGS[it.severity]).upper()
        hanging(console, Text(f"{tag} ", style=SEVERITY_STYLE[it.severity]), it.text)
        if it.cause:
            hanging(console, "    likely cause: ", named(it.cause))
        for rem in named.all(it.remedies):
            hanging(console, "    - ", rem)
        for d in it.details:  # "why: ...", "evidence: ...": wrapped under the text after the label
            label, sep, rest = d.partition(": ")
            if not sep or " " in label:  # not a "label: text" line
                label, rest = "", d
            hanging(console, Text(f"    {label}{sep if label else ''}", style="dim"), Text(rest, style="dim"))
        told.update(id(f) for f in it.findings)

    head, rows = class_table(summary)
    if rows and not any(c.pairs_measured for c in summary.classes):
        # a run of GPUs alone (--self, or a one-GPU machine): a table of "not-measured" classes
        # would only repeat that no pair was measured
        console.print("Link classes: not judged (no GPU pair was measured in this run).")
    elif rows:
        styled = [[*r[:-1], Text(r[-1], style=VERDICT_STYLE.get(r[-1], ""))] for r in rows]
        t, left_out = fitted_table([CLASS_COLUMNS[h] for h in head], styled, console.width,
                                   title="Link classes", title_justify="left")
        console.print(t)
        if left_out:
            console.print(Text(left_out_note(left_out), style="dim"))
        note = figures_note(summary)
        if note:
            console.print(Text(note, style="dim"))

    findings = summary.findings
    if not findings:
        console.print("No findings.")
    else:
        groups = nested_groups(findings, group_findings)
        shown = groups if max_findings is None else groups[:max_findings]
        title = (f"Findings (worst first, each culprit above what it explains; {len(findings)} in all, "
                 "alike ones grouped)")
        if console.width >= FINDINGS_TABLE_MIN_WIDTH:
            ft = Table(title=title, title_justify="left")
            for h in ("severity", "kind", "GPUs", "class", "finding"):
                ft.add_column(h, overflow="fold")
            for depth, group in shown:
                f = group[0]
                message = f.message if len(group) == 1 else f"e.g. {f.message}"
                ft.add_row(Text(f.severity, style=SEVERITY_STYLE[f.severity]), (NESTED if depth else "") + f.kind,
                           group_where(group),
                           f.link_class or "-", message)
            console.print(ft)
        else:  # a narrow terminal: one folded entry per row, the text under its own first letter
            console.print(Text(title, style="bold"))
            for depth, group in shown:
                f = group[0]
                message = f.message if len(group) == 1 else f"e.g. {f.message}"
                lead = Text.assemble(("  " * depth + f"{f.severity.upper():7} ", SEVERITY_STYLE[f.severity]),
                                     (f"{f.kind} ", "bold"))
                hanging(console, lead, f"[{group_where(group)}; {f.link_class or '-'}] {message}")
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
            library = log.get("library") or "NCCL"
            nccl = f", {library} {log['nccl_version']}" if log.get("nccl_version") else (
                f", {library}" if log.get("library") else "")
            console.print(f"{log.get('tool') or 'nccl-tests'} {log.get('op')} ({log.get('file')}{nccl}): peak busbw "
                          f"{gbps(log.get('peak_busbw_gbps'))} GB/s, avg bus bandwidth {avg_text}", markup=False)
            for label, lines in (("inferred", log.get("inferred")), ("not known", log.get("unknown"))):
                for line in lines or []:
                    hanging(console, f"    {label}: ", line)
    for note in summary.notes:  # the series that reached their published figure, with its source
        if note.startswith(AS_EXPECTED):
            hanging(console, Text(AS_EXPECTED, style="green"), note.removeprefix(AS_EXPECTED))
        elif note.startswith(ABOVE_REFERENCE):  # ... or far above it (the figure may not fit)
            hanging(console, Text(ABOVE_REFERENCE, style="yellow"), note.removeprefix(ABOVE_REFERENCE))
        elif note.startswith(NO_REFERENCE):  # ... and those no published figure applies to, and why
            hanging(console, Text(NO_REFERENCE, style="dim"), note.removeprefix(NO_REFERENCE))
        elif note.startswith(TOPO_FILE):  # what reading an import's --topo file said (cut, no legend)
            hanging(console, Text("note: ", style="dim"), note)
        elif note.startswith(GPU_NUMBERS):  # which --topo GPU each imported device is, and why
            hanging(console, Text(GPU_NUMBERS, style="dim"), note.removeprefix(GPU_NUMBERS))
        elif note.startswith(KERNEL_LOG_NOTE):  # an imported kernel log's driver lines that are no finding
            hanging(console, Text(KERNEL_LOG_NOTE, style="dim"), note.removeprefix(KERNEL_LOG_NOTE))
        elif note.startswith(ONE_GPU):  # an imported pair tool's output of one GPU: no pair was measured
            hanging(console, Text(ONE_GPU, style="yellow"), note.removeprefix(ONE_GPU))
    console.print(Text(f"report: {summary.run.path}/report.html", style="dim"))
