"""report.html: one self-contained page (inline CSS, PNGs embedded as base64 data URIs, no
scripts, no network), so it opens from disk or as a CI artifact. A simulated run carries a
SIMULATED banner at the top.
"""

from __future__ import annotations

import base64
import json
from html import escape
from pathlib import Path
from typing import List

from gputopo.report.summary import Summary

from .plots import Plot
from .tables import (class_table, explanations, findings_table, gpus_text, nccl_tests_table, pair_table,
                     simulated_line, verdict_line)

FILENAME = "report.html"

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.5em} h2{margin-top:1.6em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.5em 0;font-size:.9em}
th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f0f0f0}
.banner{background:#ffd54f;border:2px solid #e65100;padding:.6em 1em;font-weight:bold;font-size:1.1em}
.error,.broken{color:#b71c1c;font-weight:bold} .warning,.degraded{color:#e65100}
.ok{color:#1b5e20} .info,.not-measured{color:#666}
.finding{margin:.4em 0 .8em 0} .finding ul{margin:.2em 0}
code{font-size:.85em;background:#f6f6f6;padding:0 .2em;word-break:break-all}
img{max-width:100%;border:1px solid #ddd;margin:.3em 0}
"""

_CLASSED = {"error", "warning", "info", "ok", "degraded", "broken", "not-measured"}


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
    return (f'<figure><img alt="{escape(plot.title)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{escape(plot.title)}</figcaption></figure>")


def render_html(summary: Summary, plots: List[Plot] = ()) -> str:
    r = summary.run_json()
    title = f"gputopo report: {r['machine'] or 'run'}" + (" (SIMULATED)" if summary.simulated else "")
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"]
    if summary.simulated:
        parts.append(f'<div class="banner" id="simulated-banner">SIMULATED: {escape(simulated_line(summary))}</div>')
    parts.append(f"<h1>{escape(title)}</h1>")
    parts.append(f'<p class="{escape(summary.verdict)}">{escape(verdict_line(summary))}</p>')
    parts.append(_table(["machine", "fabric", "simulated", "started", "GPUs", "measurements", "folder"],
                        [[str(r["machine"]), str(r["fabric"]), str(r["simulated"]).lower(), str(r["started"]),
                          str(r["gpus"]), str(len(summary.run.measurements)), str(r["path"])]], "run-table"))
    parts.append("<h2>Link classes</h2>")
    head, rows = class_table(summary)
    parts.append(_table(head, rows, "class-table") if rows else "<p>No pairs measured.</p>")
    parts.append("<h2>Findings (worst first)</h2>")
    if summary.findings:
        parts.append(_table(*findings_table(summary.findings), "findings-table"))
        parts.append("<h3>Causes and remedies</h3>")
        for ex in explanations(summary.findings):
            first = ex.findings[0]
            items = []
            if len(ex.findings) == 1:
                items.append(f"<li>{escape(first.message)}</li>")
            if ex.cause:
                items.append(f"<li>likely cause: {escape(ex.cause)}</li>")
            items += [f"<li>remedy: {escape(x)}</li>" for x in ex.remedies]
            if first.evidence:
                ev = json.dumps(first.evidence, sort_keys=True, default=str)
                label = "evidence" if len(ex.findings) == 1 else f"evidence (GPUs {gpus_text(first.gpus)})"
                items.append(f"<li>{escape(label)}: <code>{escape(ev[:1500])}</code></li>")
            parts.append(f'<div class="finding"><span class="{ex.severity}">{escape(ex.kind)}</span> '
                         f"({escape(ex.severity)}) on {escape(ex.where)}<ul>{''.join(items)}</ul></div>")
    else:
        parts.append("<p>No findings.</p>")
    parts.append("<h2>Pairs</h2>")
    head, rows, omitted = pair_table(summary)
    parts.append(_table(head, rows, "pair-table") if rows else "<p>No pairs.</p>")
    if omitted:
        parts.append(f"<p>({omitted} more pairs without findings: see summary.json and results.csv)</p>")
    if summary.run.nccl_tests:
        parts.append("<h2>nccl-tests</h2><p>Avg bus bandwidth is nccl-tests' own figure: the mean busbw "
                     "over all sizes (in-place and out-of-place), not the peak.</p>")
        parts.append(_table(*nccl_tests_table(summary), "nccl-tests-table"))
    if plots:
        parts.append("<h2>Plots</h2>")
        parts += [_img(p) for p in plots]
    if summary.notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{escape(n)}</li>" for n in summary.notes) + "</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_html(summary: Summary, out_dir, plots: List[Plot] = ()) -> Path:
    path = Path(out_dir) / FILENAME
    path.write_text(render_html(summary, plots), encoding="utf-8")
    return path
