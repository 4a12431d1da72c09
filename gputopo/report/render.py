"""Render a run folder: analyse it and write every output beside the raw data.

Used by `gputopo report DIR` (re-render any time; the raw files are never changed) and by the
bench at the end of a run. Outputs: summary.json, results.csv, report.md, report.html, PNGs.
"""

from __future__ import annotations

from pathlib import Path

from gputopo.writable import check_writable_dir, refuse_odd_outputs

from .outputs.plots import start_plots
from .cluster_view import rewrite_cluster_markdown
from .run_folder import load_run
from .summary import Summary, summarize

#: Files a render writes (and replaces on a re-render).
OUTPUT_FILES = ("summary.json", "results.csv", "report.md", "report.html", "heatmap_gbps.png",
                "heatmap_efficiency.png", "heatmap_link_class.png", "heatmap_numerics.png",
                "loss_curves.png")


def render_run(run_dir, *, console=None, plots: bool = True) -> Summary:
    """Analyse ``run_dir``, write all outputs into it, return the Summary.

    When ``console`` (a rich Console) is given, the class table and findings are printed to it.
    Raises UsageError if ``run_dir`` is not a run folder.
    """
    from .outputs.html import write_html
    from .outputs.markdown import write_markdown
    from .outputs.results_csv import write_results_csv
    from .outputs.summary_json import write_summary_json

    run_dir = Path(run_dir)
    summary = summarize(load_run(run_dir))
    check_writable_dir(run_dir, "report: run folder")  # before any old plot is deleted
    refuse_odd_outputs(run_dir, OUTPUT_FILES, "report: run folder")  # a FIFO there: a write that waits forever
    for name in OUTPUT_FILES:  # a re-render must not leave a stale plot from an earlier one
        if name.endswith(".png"):
            (run_dir / name).unlink(missing_ok=True)
    under_way = start_plots(summary, run_dir) if plots else None
    try:
        write_summary_json(summary, run_dir)  # (while a child process may still draw)
        write_results_csv(summary, run_dir)
    except BaseException:
        if under_way is not None:
            under_way.cancel()
        raise
    made = under_way.result() if under_way is not None else []
    write_markdown(summary, run_dir, made)
    rewrite_cluster_markdown(run_dir, summary.findings)  # a cluster run keeps its own report.md
    write_html(summary, run_dir, made)
    if console is not None:
        from .outputs.terminal import print_summary

        print_summary(summary, console)
    return summary
