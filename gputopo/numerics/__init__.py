"""DP-vs-DDP training numerics on GPU pairs (issue 4): the check that catches the docs/architecture.md story
the way users meet it, loss going NaN under DataParallel on some pairs only.

Public API (no torch at import time)::

    from gputopo.numerics import validate_options, run_numerics
    opts = validate_options(steps=50, lr=0.05, model="mlp")       # UsageError on bad values
    run = run_numerics(topology, [(5, 6)], "sim", description, opts, run_dir=folder)
    run.results   # NumericsResult per pair and way ("reference", "dp", "ddp"), each with its
                  # verdict (ok, nan, diverged, hang, crash); the findings they make are
                  # gputopo.report.numerics_record.numerics_run_findings(run)
    run.tolerance_lines()  # the measured tolerance, to print
"""

from .job import MODELS, NumericsOptions, split_sizes, validate_options
from .result import WAYS, NumericsResult
from .run import DEFAULT_TIMEOUT_S, NumericsRun, run_numerics

__all__ = ["DEFAULT_TIMEOUT_S", "MODELS", "NumericsOptions", "NumericsResult", "NumericsRun",
           "WAYS", "run_numerics", "split_sizes", "validate_options"]
