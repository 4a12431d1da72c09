"""report.html: one self-contained page (inline CSS, PNGs embedded as base64 data URIs, no
scripts, no network), so it opens from disk or as a CI artifact. A simulated run carries a
SIMULATED banner at the top.
"""

from __future__ import annotations

import base64
import json
from html import escape
from pathlib import Path
from typing import List, Sequence

from gputopo.report.history_record import history_points_lines
from gputopo.report.summary import Summary

from .bridge_names import BridgeNamer
from .notes import nccl_tests_statements
from .plots import Plot
from gputopo.report.why.root_causes import evidence_entries, explained_note, root_cause_tags
from .story import StoryItem
from .tables import (class_table, figures_note, findings_table, place_words, nccl_tests_table,
                     pair_table, raw_data_note, simulated_line, story, verdict_line)

FILENAME = "report.html"

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.5em} h2{margin-top:1.6em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.5em 0;font-size:.9em}
th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f0f0f0}
.banner{background:#ffd54f;border:2px solid #e65100;padding:.6em 1em;font-weight:bold;font-size:1.1em}
.error,.broken{color:#b71c1c;font-weight:bold} .warning,.degraded{color:#e65100}
.ok{color:#1b5e20} .info,.not-measured,.not-judged{color:#666}
.finding{margin:.4em 0 .8em 0} .finding ul{margin:.2em 0}
code{font-size:.85em;background:#f6f6f6;padding:0 .2em;word-break:break-all}
img{max-width:100%;border:1px solid #ddd;margin:.3em 0}
.story{list-style:none;padding:0;max-width:75em}
.story>li{border-left:6px solid #999;background:#fafafa;margin:.45em 0;padding:.45em .8em}
.story>li.error{border-color:#b71c1c;font-weight:normal;color:#222} .story>li.warning{border-color:#e65100;color:#222}
.story>li.ok{border-color:#2e7d32;color:#222} .story>li.info{border-color:#90a4ae;color:#444;font-size:.9em}
.story .tag{font-weight:bold;margin-right:.4em} .story ul{margin:.3em 0 0 0}
.story ul.evidence{color:#555;font-size:.85em;margin-top:.4em} .finding .explained{color:#555;font-style:italic}
.note{color:#555;font-size:.85em;max-width:75em}
.plots{display:flex;flex-wrap:wrap;gap:1em;align-items:flex-start}
.plots figure{margin:0;display:table} .plots figure.wide{flex-basis:100%}
figcaption{display:table-caption;caption-side:bottom;font-size:.85em;color:#444;padding:.2em 0 .6em 0}
details{margin:.2em 0} summary{cursor:pointer;color:#444}
"""

#: The word in front of each story point.
STORY_TAGS = {"error": "Problem:", "warning": "Warning:", "ok": "OK:", "info": "Note:"}

_CLASSED = {"error", "warning", "info", "ok", "degraded", "broken", "not-measured", "not-judged"}


def _table(head: List[str], rows: List[List[str]], css_id: str) -> str:
    out = [f'<table id="{css_id}"><thead><tr>' + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr></thead><tbody>"]
    for r in rows:
        cells = []
        for c in r:
            cls = f' class="{c}"' if c in _CLASSED else ""
            cells.append(f"<td{cls}>{escape(str(c))}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def _img(plot: Plot) -> str:
    data = base64.b64encode(Path(plot.path).read_bytes()).decode("ascii")
    wide = ' class="wide"' if plot.name.startswith("loss") else ""
    return (f'<figure{wide}><img alt="{escape(plot.title)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{escape(plot.caption or plot.title)}</figcaption></figure>")


def _detail(d: str) -> str:
    """'why: ...' / 'evidence: ...' with its label in bold."""
    label, sep, rest = d.partition(": ")
    if sep and " " not in label:
        return f"<li><b>{escape(label)}:</b> {escape(rest)}</li>"
    return f"<li>{escape(d)}</li>"


def _story(summary: Summary, items: List[StoryItem]) -> str:
    """Each point: its text, then the likely cause and the remedies, then why and the evidence
    (smaller): a root cause leads, its per-class evidence follows it."""
    out = ['<ul class="story" id="story">']
    named = BridgeNamer()
    tags = root_cause_tags(items)
    for it in items:
        sub = []
        if it.cause:
            sub.append(f"<li><b>likely cause:</b> {escape(named(it.cause) or '')}</li>")
        sub += [f"<li><b>remedy:</b> {escape(r)}</li>" for r in named.all(it.remedies)]
        ev = "".join(_detail(d) for d in it.details)
        tag = tags[id(it)] + ":" if id(it) in tags else STORY_TAGS[it.severity]
        out.append(f'<li class="{it.severity}"><span class="tag {it.severity}">{escape(tag)}</span>'
                   f"{escape(it.text)}" + (f"<ul>{''.join(sub)}</ul>" if sub else "")
                   + (f'<ul class="evidence">{ev}</ul>' if ev else "") + "</li>")
    out.append("</ul>")
    return "\n".join(out)


def _evidence(summary: Summary, items: List[StoryItem]) -> List[str]:
    """Per group of alike findings: where, an example, its evidence; the root cause that explains
    it instead of its cause and remedies again (root_causes.evidence_entries)."""
    parts = ["<h3>Evidence per finding</h3>"]
    named = BridgeNamer()
    for e in evidence_entries(summary, items):
        ex, first = e.explanation, e.explanation.findings[0]
        li = [f"<li>{escape(e.example)}</li>"]
        note = explained_note(e)
        if note:
            li.append(f'<li class="explained">{escape(note)}</li>')
        if e.cause:
            li.append(f"<li><b>likely cause:</b> {escape(named(e.cause) or '')}</li>")
        li += [f"<li><b>remedy:</b> {escape(x)}</li>" for x in named.all(e.remedies)]
        if first.evidence:
            ev = json.dumps(first.evidence, sort_keys=True, default=str)
            label = "evidence" if len(ex.findings) == 1 else f"evidence of {place_words(first)}"
            li.append(f"<li><details><summary>{escape(label)}</summary><code>{escape(ev[:3000])}</code>"
                      "</details></li>")
        parts.append(f'<div class="finding"><span class="{ex.severity}">{escape(ex.kind)}</span> '
                     f"({escape(ex.severity)}) on {escape(ex.where)}<ul>{''.join(li)}</ul></div>")
    return parts


def _note(text) -> str:
    return f'<p class="note">{escape(text)}</p>' if text else ""


def render_html(summary: Summary, plots: Sequence[Plot] = ()) -> str:
    r = summary.run_json()
    title = f"gputopo report: {r['machine'] or 'run'}" + (" (SIMULATED)" if summary.simulated else "")
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"]
    if summary.partial:
        parts.append(f'<div class="banner" id="partial-banner">{escape(summary.partial)}</div>')
    if summary.simulated:
        parts.append(f'<div class="banner" id="simulated-banner">SIMULATED: {escape(simulated_line(summary))}</div>')
    parts.append(f"<h1>{escape(title)}</h1>")
    parts.append(f'<p class="{escape(summary.verdict)}" id="verdict">{escape(verdict_line(summary))}</p>')
    parts.append("<h2>What was found</h2>")
    items = story(summary)
    parts.append(_story(summary, items))
    parts.append(_table(["machine", "fabric", "simulated", "started", "GPUs", "measurements", "folder"],
                        [[str(r["machine"]), str(r["fabric"]), str(r["simulated"]).lower(), str(r["started"]),
                          str(r["gpus"]), str(len(summary.run.measurements)), str(r["path"])]], "run-table"))
    note = figures_note(summary)
    parts.append("<h2>Link classes</h2>")
    head, rows = class_table(summary)
    parts.append(_table(head, rows, "class-table") if rows else "<p>No pairs measured.</p>")
    parts.append(_note(note))
    parts.append("<h2>Findings (worst first)</h2>")
    if summary.findings:
        parts.append(_table(*findings_table(summary.findings), "findings-table"))
        parts.append(_note("Alike findings (same severity, kind and class) share a row; summary.json lists "
                           "each one."))
        parts += _evidence(summary, items)
    else:
        parts.append("<p>No findings.</p>")
    if summary.run.history is not None:
        parts.append('<h2 id="history">Against this machine\'s history</h2><ul>'
                     + "".join(f"<li>{escape(h)}</li>" for h in history_points_lines(summary.run.history)) + "</ul>")
    if plots:
        parts.append('<h2>Plots</h2><div class="plots">')
        parts += [_img(p) for p in plots]
        parts.append("</div>")
    parts.append("<h2>Pairs</h2>")
    head, rows, omitted = pair_table(summary)
    parts.append(_table(head, rows, "pair-table") if rows else "<p>No pairs.</p>")
    if omitted:
        parts.append(f"<p>({omitted} more pairs without findings: see summary.json and results.csv)</p>")
    if rows:
        parts.append(_note((note + " " if note else "") + "DP / DDP: the training-numerics verdict of "
                           "nn.DataParallel and DistributedDataParallel on the pair (nan@N: NaN from step N)."))
    if summary.run.nccl_tests:
        parts.append("<h2>nccl-tests</h2><p>Avg bus bandwidth is nccl-tests' own figure: the mean busbw "
                     "over all sizes (in-place and out-of-place), not the peak.</p>")
        parts.append(_table(*nccl_tests_table(summary), "nccl-tests-table"))
        statements = nccl_tests_statements(summary)
        if statements:
            parts.append("<ul>" + "".join(f"<li>{escape(st)}</li>" for st in statements) + "</ul>")
    if summary.notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{escape(n)}</li>" for n in summary.notes) + "</ul>")
    parts.append(_note(raw_data_note(summary)))
    parts.append("</body></html>")
    return "\n".join(parts)


def write_html(summary: Summary, out_dir, plots: Sequence[Plot] = ()) -> Path:
    path = Path(out_dir) / FILENAME
    path.write_text(render_html(summary, plots), encoding="utf-8")
    return path
