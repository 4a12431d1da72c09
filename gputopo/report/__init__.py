"""Measurements -> findings per pair and per link class -> terminal / JSON / CSV / MD / HTML / plots.

Entry points: gputopo.report.render.render_run(run_dir, console=None) -> Summary (writes every
output into the run folder), gputopo.report.summary.summarize_dir(run_dir) -> Summary (pure),
gputopo.report.diff.diff_runs(dir_a, dir_b, threshold=0.1) -> RunDiff. Nothing heavy is
imported here.
"""
