"""The cpu fabric: the reference and DDP over gloo in 2 real processes must agree within the
measured tolerance, and a NaN put into one rank's gradients must be reported at its step."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("torch")

from gputopo.numerics import run_numerics, validate_options  # noqa: E402
from gputopo.sim.scan import scan_simulated  # noqa: E402
from gputopo.report.numerics_record import numerics_run_findings  # noqa: E402


@pytest.fixture(scope="module")
def topo():
    return scan_simulated("seed-8gpu-healthy")  # only the pair labels matter on the cpu fabric


@pytest.mark.slow
def test_ddp_over_gloo_matches_the_reference(topo, tmp_path):
    run = run_numerics(topo, [(0, 1), (5, 6)], "cpu", options=validate_options(steps=30),
                       run_dir=str(tmp_path), timeout_s=120)
    assert numerics_run_findings(run) == []
    tol = run.tolerances["run"]
    for rec in run.results:
        assert rec.verdict == "ok", rec.summary()
        assert rec.fabric == "cpu" and rec.timing == "wall"
        if rec.way == "ddp":
            assert rec.max_rel_loss_dev <= tol.loss_rel
            assert rec.max_abs_param_diff <= tol.param_abs
            assert rec.extra["rank_param_gap"] == 0.0
            assert rec.extra["backend"] == "gloo"
    assert "gloo workers started 1 time(s)" in run.notes  # one pool for every pair


@pytest.mark.slow
def test_nan_injected_into_one_ranks_gradients_is_reported_at_its_step(topo):
    opts = validate_options(steps=20, inject_nan_at_step=7, inject_nan_rank=1)
    run = run_numerics(topo, [(5, 6)], "cpu", options=opts, ways=("reference", "ddp"), timeout_s=120)
    ddp = next(r for r in run.results if r.way == "ddp")
    assert (ddp.verdict, ddp.step, ddp.nonfinite_in) == ("nan", 7, "gradient")
    assert all(math.isfinite(v) for v in ddp.losses[:8]) and math.isnan(ddp.losses[8])
    assert any("self-test" in n for n in ddp.notes)
    (f,) = numerics_run_findings(run)
    assert (f.kind, f.evidence["way"], f.evidence["step"], f.gpus) == ("nan", "ddp", 7, [5, 6])
