"""`gputopo report DIR` (re-render a run) and `gputopo diff A B` (regressions between runs)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from gputopo import SCHEMA_VERSION
from gputopo.cli.group import cli
from gputopo.cli.options import console, finish
from gputopo.cli.strict import FiniteFloat

run_dir_arg = click.argument("run_dir", type=click.Path(file_okay=False))


@cli.command()
@run_dir_arg
@click.option("--no-plots", is_flag=True, help="Skip the PNG heatmaps and loss curves (faster).")
@click.option("--json", "as_json", is_flag=True, help="Print summary.json instead of the tables.")
def report(run_dir, no_plots, as_json):
    """Re-render a run folder: summary.json, results.csv, report.md, report.html, heatmaps.

    The raw files (measurements.jsonl, events.jsonl, numerics.jsonl) are never changed, so a
    report can be re-rendered at any time, e.g. after upgrading gputopo.
    """
    import contextlib
    import os

    from gputopo.report.render import render_run
    from gputopo.runfolder.layout import MEASUREMENTS_JSONL, RUN_JSON
    from gputopo.runfolder.writer import run_folder_lock

    with contextlib.ExitStack() as held:
        is_run = any(os.path.isfile(os.path.join(run_dir, f)) for f in (RUN_JSON, MEASUREMENTS_JSONL))
        if is_run:  # two re-renders at once deleted each other's plots (rc 4); no lock file in a non-run
            try:
                held.enter_context(run_folder_lock(run_dir))
            except OSError:  # a read-only folder: the lock file cannot be made; render_run says why
                pass
        render_run(run_dir, console=None if as_json else console(), plots=not no_plots)
        if as_json:
            click.echo((Path(run_dir) / "summary.json").read_text())


@cli.command()
@click.argument("dir_a", type=click.Path(file_okay=False))
@click.argument("dir_b", type=click.Path(file_okay=False))
@click.option("--threshold", type=FiniteFloat(0, 1), default=0.10, show_default=True,
              help="Flag a bandwidth drop larger than this fraction.")
@click.option("--json", "as_json", is_flag=True)
def diff(dir_a, dir_b, threshold, as_json):
    """Compare two runs (A = before, B = after): bandwidth drops per pair and class, new
    findings, findings gone. Exit 1 when B regressed."""
    from gputopo.report.diff import diff_runs

    d = diff_runs(dir_a, dir_b, threshold=threshold)
    if as_json:
        click.echo(json.dumps({"schema_version": SCHEMA_VERSION, **d.to_json()}, indent=2))
    else:
        click.echo(d.text())
    finish(1 if d.has_regressions else 0)
