"""`gputopo history`: the runs recorded for this and other machines, filtered, as a table,
JSON or a plot of a pair's or class's GB/s over time."""

from __future__ import annotations

import datetime as _dt
import json
import re
import time

import click

from gputopo import SCHEMA_VERSION
from gputopo.cli.group import cli
from gputopo.cli.history_hook import history_options, history_path
from gputopo.errors import UsageError

_SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(text: str, now: float | None = None) -> float:
    """``30d``/``12h``/``2w`` ago, or a date / date-time (UTC unless it says otherwise)."""
    m = _SPAN.match(text)
    if m:
        return (now if now is not None else time.time()) - float(m.group(1)) * _UNIT_S[m.group(2)]
    try:
        t = _dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--since {text!r}: give a span (30d, 12h, 2w) or a date (2026-11-01)") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.timezone.utc)
    return t.timestamp()


def parse_pair(text: str) -> tuple[int, int]:
    m = re.match(r"^\s*(\d+)\s*[,\-]\s*(\d+)\s*$", text)
    if not m or m.group(1) == m.group(2):
        raise UsageError(f"--pair {text!r}: write two different GPU indices as I,J (e.g. 5,6)")
    i, j = int(m.group(1)), int(m.group(2))
    return (min(i, j), max(i, j))


def class_option_value(text: str) -> str:
    from gputopo.model import LinkClass

    try:
        lc = LinkClass.parse(text)
    except ValueError:
        raise UsageError(f"--class {text!r}: not a link class (NV#, PIX, PXB, PHB, NODE, SYS)") from None
    return str(lc)


@cli.command()
@click.option("--machine", metavar="NAME", help="Only runs of machines whose hostname or sim name contains NAME.")
@click.option("--since", "since", metavar="SPAN|DATE", help="Only runs since then: 30d, 12h, 2w, or 2026-11-01.")
@click.option("--pair", "pair_text", metavar="I,J", help="Only runs that measured this pair; shows its figures.")
@click.option("--class", "class_text", metavar="CLASS", help="Only runs that measured this link class; shows its figures.")
@click.option("--limit", type=click.IntRange(1, 1_000_000_000), default=None, help="At most this many runs (newest first).")
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON.")
@click.option("--plot", "plot_file", type=click.Path(dir_okay=False),
              help="Draw the --pair's or --class's GB/s over time into this PNG, findings marked.")
@history_options(records=False)
def history(machine, since, pair_text, class_text, limit, as_json, plot_file):
    """List the runs recorded in the history database (every scan, bench, numerics, check,
    cluster and import run is recorded unless --no-history), newest first, with their
    findings; drift and counter-growth findings come from comparing a run with this history.

    \b
    Examples:
      gputopo history --since 30d
      gputopo history --pair 5,6 --plot pair56.png
      gputopo history --class NODE --json
    """
    from gputopo.history.db import open_history
    from gputopo.history.query import RunFilter, list_runs

    if pair_text and class_text:
        raise UsageError("--pair and --class are exclusive: give one")
    if plot_file and not (pair_text or class_text):
        raise UsageError("--plot draws one pair's or class's GB/s: add --pair I,J or --class CLASS")
    if plot_file:
        from gputopo.writable import check_writable_file

        refuse_plot_name(plot_file)
        check_writable_file(plot_file, "--plot")
    flt = RunFilter(machine=machine, since_s=parse_since(since) if since else None,
                    pair=parse_pair(pair_text) if pair_text else None,
                    link_class=class_option_value(class_text) if class_text else None, limit=limit)
    path = history_path()
    assert path is not None  # history has no --no-history
    conn = open_history(path, create=False)
    try:
        runs = list_runs(conn, flt)
    finally:
        conn.close()
    if plot_file:
        from gputopo.report.outputs.history_plot import draw_history

        import os

        os.makedirs(os.path.dirname(os.path.abspath(plot_file)), exist_ok=True)  # as --junit and --out do
        what = f"pair {flt.pair[0]},{flt.pair[1]}" if flt.pair else f"class {flt.link_class}"
        draw_history(list(reversed(runs)), what, plot_file, scope="pair" if flt.pair else "class")
    if as_json:
        click.echo(json.dumps({"schema_version": SCHEMA_VERSION, "database": str(path),
                               "runs": runs}, indent=2))
    else:
        from gputopo.report.history_view import history_lines

        for line in history_lines(runs, str(path)):
            click.echo(line)
    if plot_file:
        click.echo(f"plot: {plot_file}", err=as_json)


#: What --plot writes, by the name's ending: matplotlib takes the format from it, appended
#: ".png" to a name without one (`--plot /dev/full` wrote /dev/full.png and said "plot:
#: /dev/full") and failed on any other ending (`--plot run.json`: rc 4).
PLOT_SUFFIXES = (".png", ".svg", ".pdf")


def refuse_plot_name(plot_file) -> None:
    """UsageError unless --plot names a file of a format the plot is written in."""
    import os

    suffix = os.path.splitext(str(plot_file))[1].lower()
    if suffix not in PLOT_SUFFIXES:
        raise UsageError(f"--plot {plot_file}: give a file name ending in "
                         f"{', '.join(PLOT_SUFFIXES)} (the plot's format comes from it)")
