"""DataParallel's flow over a transport, the in-process ways, the tolerance and the verdict."""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")

from gputopo.numerics.dp_flow import DataParallelFlow  # noqa: E402
from gputopo.numerics.job import build_model, global_loss, make_data, validate_options  # noqa: E402
from gputopo.numerics.result import NumericsResult, num_from_json, num_to_json  # noqa: E402
from gputopo.numerics.transport import LocalTransport, adapt_transport  # noqa: E402
from gputopo.numerics.verdict import WayRun, judge_way, measure_tolerance  # noqa: E402
from gputopo.numerics.ways import (train_ddp_simulated, train_dp_flow,  # noqa: E402
                                   train_reference)
from gputopo.report.numerics_record import numerics_run_findings  # noqa: E402


class FlipTransport:
    """A stand-in link that flips one random bit in ``rate`` of the elements of peer copies."""

    name = "flip"

    def __init__(self, rate=1e-3, seed=0):
        self.rate = rate
        self.gen = torch.Generator().manual_seed(seed)
        self.paths = []

    def copy(self, t, src, dst, path="p2p"):
        self.paths.append(path)
        out = t.detach().clone().contiguous()
        if path != "p2p" or out.dtype != torch.float32 or not out.numel():
            return out
        idx = (torch.rand(out.numel(), generator=self.gen) < self.rate).nonzero().flatten()
        if idx.numel():
            ints = out.view(-1).view(torch.int32)
            bits = torch.randint(0, 31, (idx.numel(),), generator=self.gen, dtype=torch.int32)
            ints[idx] = ints[idx] ^ torch.bitwise_left_shift(torch.ones_like(bits), bits)
        return out


@pytest.fixture(scope="module")
def mlp():
    opts = validate_options(steps=30)
    data = make_data(opts)
    ref = train_reference(opts, data)
    noise = {o: train_reference(opts, data, order=o) for o in ("swapped", "halves")}
    return opts, data, ref, measure_tolerance(ref, noise)


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_dp_flow_gradients_are_the_reference_gradients(model):
    opts = validate_options(model=model, batch=10, steps=1)
    x, y = make_data(opts)
    ref_model, dp_model = build_model(opts), build_model(opts)
    global_loss(ref_model(x[0]), y[0]).backward()
    transport = LocalTransport()
    flow = DataParallelFlow(dp_model, (0, 1), transport)
    global_loss(flow(x[0]), y[0]).backward()
    for a, b in zip(ref_model.parameters(), dp_model.parameters()):
        assert torch.allclose(a.grad, b.grad, rtol=1e-5, atol=1e-6)
    # broadcast, scatter, gather; backward: gather's scatter and broadcast's reduce
    assert transport.copies == 5
    assert flow.split_sizes == [5, 5]


def test_dp_flow_records_an_uneven_split():
    opts = validate_options(batch=9, steps=2)
    run = train_dp_flow(opts, make_data(opts), (0, 1), LocalTransport())
    assert run.extra["dp_split"] == [5, 4]


def test_clean_ways_match_the_reference(mlp):
    opts, data, ref, tol = mlp
    assert 0 < tol.noise_loss_rel < 1e-5
    assert tol.loss_rel == pytest.approx(10 * tol.noise_loss_rel)
    for run in (train_dp_flow(opts, data, (0, 1), LocalTransport()),
                train_ddp_simulated(opts, data, (0, 1), LocalTransport(), "host")):
        j = judge_way(run, ref, tol)
        assert j.verdict == "ok", (j, tol)
        assert j.max_rel_loss_dev <= tol.loss_rel


def test_corrupting_peer_copies_flag_dataparallel_and_spare_ddp_on_host(mlp):
    opts, data, ref, tol = mlp
    dp = train_dp_flow(opts, data, (0, 4), FlipTransport(seed=1), copy_path="p2p",
                       collective_path="host")
    assert judge_way(dp, ref, tol).verdict in ("nan", "diverged")
    ddp = train_ddp_simulated(opts, data, (0, 4), FlipTransport(seed=2), "host")
    assert judge_way(ddp, ref, tol).verdict == "ok"
    ddp_p2p = train_ddp_simulated(opts, data, (0, 4), FlipTransport(seed=3), "p2p")
    assert judge_way(ddp_p2p, ref, tol).verdict in ("nan", "diverged")


def test_dp_paths_follow_pytorch(mlp):
    opts, data, _, _ = mlp
    t = FlipTransport(rate=0)
    run = train_dp_flow(validate_options(steps=1), make_data(validate_options(steps=1)), (0, 4), t,
                        copy_path="p2p", collective_path="host")
    assert run.extra["paths"] == {"broadcast": "host", "scatter": "p2p", "gather": "p2p",
                                  "reduce_add": "host"}
    assert t.paths == ["p2p", "host", "p2p", "p2p", "host"]


@pytest.mark.parametrize("way", ["dp", "ddp"])
def test_injected_nan_is_reported_at_its_step(mlp, way):
    _, _, ref, tol = mlp
    opts = validate_options(steps=30, inject_nan_at_step=11)
    data = make_data(opts)
    if way == "dp":
        run = train_dp_flow(opts, data, (0, 1), LocalTransport())
    else:
        run = train_ddp_simulated(opts, data, (0, 1), LocalTransport(), "p2p")
    j = judge_way(run, ref, tol)
    assert (j.verdict, j.step, run.nonfinite_in) == ("nan", 11, "gradient")
    assert all(math.isfinite(v) for v in run.losses[:12])
    assert math.isnan(run.losses[12])


def _run(losses, params=(0.0, 0.0), nonfinite=None):
    return WayRun(losses=list(losses), final_params=torch.tensor(params), first_nonfinite_step=nonfinite)


def test_verdicts_on_synthetic_runs():
    ref = _run([2.0, 1.5, 1.0, 0.8])
    tol = measure_tolerance(ref, {"swapped": _run([2.0, 1.5, 1.0000001, 0.8])})
    assert judge_way(_run([2.0, 1.5, 1.0, 0.8]), ref, tol).verdict == "ok"
    j = judge_way(_run([2.0, 1.5, 1.01, 0.9]), ref, tol)
    assert (j.verdict, j.step, j.first_deviation_step) == ("diverged", 2, 2)
    j = judge_way(_run([2.0, 1.6, float("nan"), float("nan")]), ref, tol)
    assert (j.verdict, j.step, j.first_deviation_step) == ("nan", 2, 1)
    j = judge_way(_run([2.0, 1.5, 1.0, 0.8], nonfinite=1), ref, tol)  # NaN gradient, loss still fine
    assert (j.verdict, j.step) == ("nan", 1)
    j = judge_way(_run([2.0, 1.5, 1.0, 0.8], params=(0.0, 1.0)), ref, tol)  # only the parameters
    assert (j.verdict, j.step) == ("diverged", 4)
    j = judge_way(_run([2.0, float("inf"), 1.0, 0.8]), ref, tol)
    assert (j.verdict, j.step) == ("nan", 1)


def test_tolerance_never_zero():
    ref = _run([2.0, 1.0])
    tol = measure_tolerance(ref, {"swapped": _run([2.0, 1.0])})
    assert tol.noise_loss_rel == 0.0
    assert tol.loss_rel > 0 and tol.param_abs > 0
    assert "tolerance" in tol.describe()


def test_records_are_strict_json_with_non_finite_numbers():
    rec = NumericsResult(gpus=(5, 6), link_class="NODE", way="dp", verdict="nan", step=3,
                         losses=[2.0, float("nan"), float("inf")], max_rel_loss_dev=float("inf"),
                         max_abs_param_diff=None, tolerance={}, fabric="sim", timing="modeled",
                         wall_s=0.1, dp_split=[32, 32])
    text = json.dumps(rec.to_json(), allow_nan=False)
    back = NumericsResult.from_json(json.loads(text))
    assert back.losses[0] == 2.0 and math.isnan(back.losses[1]) and back.losses[2] == math.inf
    assert back.max_rel_loss_dev == math.inf and back.max_abs_param_diff is None
    assert (back.gpus, back.way, back.verdict, back.step) == ((5, 6), "dp", "nan", 3)
    assert num_to_json(float("-inf")) == "-inf" and num_from_json("nan") != num_from_json("nan")
    assert "nan from step 3" in back.summary()


def test_adapt_transport_accepts_a_copy_without_path():
    class Plain:
        def copy(self, t, src, dst):
            return t.clone()

    t = adapt_transport(Plain())
    assert torch.equal(t.copy(torch.ones(3), 0, 1, path="host"), torch.ones(3))
    with pytest.raises(TypeError):
        adapt_transport(object())


def _topology():
    from gputopo.sim.scan import scan_simulated

    return scan_simulated("seed-8gpu-healthy")


def test_run_numerics_over_a_given_transport_in_process():
    from gputopo.numerics import run_numerics

    topo = _topology()
    bad = {(0, 4)}
    run = run_numerics(topo, [(0, 4), (6, 7)], "sim", options=validate_options(steps=30),
                       transport_factory=lambda i, j: FlipTransport(rate=1e-3 if (i, j) in bad else 0))
    v = run.verdicts()
    assert v[(6, 7)] == {"reference": "ok", "dp": "ok", "ddp": "ok"}
    assert v[(0, 4)]["dp"] in ("nan", "diverged") and v[(0, 4)]["ddp"] == "ok"  # SYS: DDP via host
    (f,) = numerics_run_findings(run)
    assert f.gpus == [0, 4] and f.evidence["way"] == "dp" and f.link_class == "SYS"


def test_a_chaotic_job_is_called_out():
    from gputopo.numerics import run_numerics

    run = run_numerics(_topology(), [(6, 7)], "sim", options=validate_options(lr=10),
                       transport_factory=lambda i, j: LocalTransport(), ways=("reference",))
    (f,) = numerics_run_findings(run)
    assert f.kind == "noisy" and f.severity == "warning" and "--lr" in f.message


def test_diverged_names_the_step_where_the_curves_part():
    """A corrupted copy nudges the loss by 3e-5 at step 0 (beyond the fp32-noise tolerance,
    invisible on a plot) and the run only runs away at step 42. The verdict names step 42, where
    the curves part (off by more than PART_REL, and staying off); the first step beyond the
    tolerance stays as first_deviation_step. Seen on seed-8gpu: 'diverged@0' on curves identical
    until step 42."""
    from gputopo.numerics.verdict import PART_REL

    ref_losses = [2.0 - 0.02 * k for k in range(50)]
    ref = _run(ref_losses)
    tol = measure_tolerance(ref, {"swapped": _run([x * (1 + 2e-7) for x in ref_losses])})
    nudged = [x * (1 + 3e-5) for x in ref_losses[:42]] + [1e35] * 8
    j = judge_way(_run(nudged), ref, tol)
    assert (j.verdict, j.step, j.first_deviation_step) == ("diverged", 42, 0)
    # never parts by PART_REL: the first step beyond the tolerance is the step named
    small = [x * (1 + PART_REL / 10) if k >= 7 else x for k, x in enumerate(ref_losses)]
    j = judge_way(_run(small), ref, tol)
    assert (j.verdict, j.step, j.first_deviation_step) == ("diverged", 7, 7)
    # a large deviation beyond the tolerance and PART_REL at once: the same step
    big = ref_losses[:5] + [x * 1.5 for x in ref_losses[5:]]
    assert judge_way(_run(big), ref, tol).step == 5
    # a one-step 2 % blip at 24 while the run only runs away at 43: the curves part at 43
    blip = list(nudged)
    blip[24] = ref_losses[24] * 1.02
    blip[42] = ref_losses[42] * (1 + 3e-5)
    assert judge_way(_run(blip), ref, tol).step == 43
    # a lone spike (the loss value of one step) that never lasts: the spike's step
    spike = [x * (1 + 3e-5) for x in ref_losses]
    spike[2] = 1e34
    assert judge_way(_run(spike), ref, tol).step == 2


def test_a_worker_payload_is_judged_as_the_tensors_it_came_from():
    """Judging is numpy (so the parent of a sim run never imports torch): a WayRun rebuilt from
    a worker's payload gets the very verdict and differences its torch original gets."""
    from gputopo.numerics.verdict import max_abs_diff
    from gputopo.numerics.worker import payload_to_run
    from gputopo.numerics.worker_main import _run_to_payload

    ref = _run([2.0, 1.5, 1.0, 0.8], params=(0.5, -0.25))
    noisy = _run([2.0, 1.5, 1.0000001, 0.8], params=(0.5, -0.2500001))
    bad = _run([2.0, 1.5, 1.01, 0.9], params=(0.5, float("nan")))
    tol = measure_tolerance(ref, {"swapped": noisy})
    tol2 = measure_tolerance(payload_to_run(_run_to_payload(ref)),
                             {"swapped": payload_to_run(_run_to_payload(noisy))})
    assert (tol.loss_rel, tol.param_abs) == (tol2.loss_rel, tol2.param_abs)
    for run in (ref, noisy, bad):
        back = payload_to_run(_run_to_payload(run))
        assert judge_way(back, ref, tol) == judge_way(run, ref, tol)
    assert max_abs_diff(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.5])) == 0.5
    assert max_abs_diff(torch.tensor([1.0]), torch.tensor([1.0, 2.0])) == float("inf")
    assert max_abs_diff(torch.tensor([float("inf")]), torch.tensor([1.0])) == float("inf")
