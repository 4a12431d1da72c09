"""The text `gputopo history` prints: one line per run, newest first, then (with --pair or
--class) its headline figures and its warnings and errors, indented under it."""

from __future__ import annotations

from typing import Any

from .history_findings import when

#: Findings shown per run (the rest are counted): a run of a broken machine can have hundreds.
MAX_FINDINGS_SHOWN = 6


def _machine(r: dict[str, Any]) -> str:
    return f"{r['hostname']} (SIMULATED {r['sim_name']})" if r["simulated"] else r["hostname"]


def _figure(f: dict[str, Any]) -> str:
    gbps = "failed" if f["gbps"] is None else f"{f['gbps']:.2f} GB/s {f['metric']}"
    wrong = "" if f["wrong"] is None else f", #wrong {f['wrong']}"
    d = f" {f['direction']}" if f["direction"] else ""
    pair = ",".join(map(str, f["gpus"] or []))
    return f"    {f['series']}{d} on {pair} ({f['link_class'] or '?'}): {gbps}{wrong} ({f['timing']})"


def _judged(r: dict[str, Any]) -> str:
    """' (12 of 14 series judged)' where the run's verdict judged part of its series (its stored
    judged record, report/judged.py); '' otherwise or for runs recorded before it was stored."""
    j = r.get("judged")
    if not isinstance(j, dict) or not j.get("series") or not j.get("series_not_judged"):
        return ""
    return f" ({j.get('series_judged')} of {j.get('series')} series judged)"


def history_lines(runs: list[dict[str, Any]], database: str) -> list[str]:
    if not runs:
        return [f"no runs recorded in {database} match"]
    lines = [(f"{len(runs)} run(s) in {database}, newest first (time source: wall clock, or a "
              "simulated machine's clock)")]
    for r in runs:
        counts: dict[str, int] = {}
        for f in r["findings"]:
            counts[f["severity"]] = counts.get(f["severity"], 0) + 1
        found = ", ".join(f"{n} {s}{'s' if n > 1 else ''}" for s, n in sorted(counts.items())) or "no findings"
        clock = " (sim clock)" if r["time_source"] == "sim-clock" else ""
        lines.append(f"#{r['id']} {when(r['time_s'])}{clock}  {_machine(r)}  {r['command']}"
                     f"{' ' + r['verdict'] if r['verdict'] else ''}{_judged(r)}  {found}"
                     f"{'  ' + r['run_dir'] if r['run_dir'] else ''}")
        lines += [_figure(f) for f in sorted(r["figures"], key=lambda f: (f["series"], f["gpus"] or []))]
        shown = [f for f in r["findings"] if f["severity"] != "info"
                 and (f["origin"] == "history" or r["figures"])]
        for f in shown[:MAX_FINDINGS_SHOWN]:
            lines.append(f"    {f['severity'].upper()} {f['kind']}: {f['message']}")
        if len(shown) > MAX_FINDINGS_SHOWN:
            lines.append(f"    ... {len(shown) - MAX_FINDINGS_SHOWN} more (--json lists all)")
    return lines
