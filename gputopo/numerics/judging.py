"""Judge one way of a pair against the reference: the reference and its noise re-runs (the
tolerance), a way run and judged (run_and_judge: a hang or crash becomes a record too), and the
reference's own record."""

from __future__ import annotations

import time
from typing import Callable, List, Optional

from .job import NumericsOptions
from .outcome import NumericsRun, Pair, WayFailed
from .result import NumericsResult, num_to_json
from .sink import Sink
from .verdict import Judgement, Tolerance, WayRun, judge_way, measure_tolerance
from .worker import WorkerStartError

BN_EXPECTED = ("BatchNorm statistics are computed per replica on half the batch under "
               "DataParallel and DDP (without SyncBatchNorm), so they differ from one GPU by design")
BN_BASELINE_NOTE = ("judged against the one-GPU job run as two half-batch passes (per-replica "
                    "BatchNorm statistics, as DataParallel and DDP compute them); the difference "
                    "from the whole-batch reference is in extra.vs_whole_batch")


def reference_and_tolerance(train: Callable[[str], WayRun], opts: NumericsOptions):
    """The reference run, the tolerance from its reduction-order re-runs, and for BatchNorm models
    the per-replica baseline (the half-batch re-run) that DataParallel and DDP are judged against.

    With BatchNorm the half-batch re-run is not noise (it changes the statistics, not only the
    summation order), so the tolerance comes from the swapped re-run alone."""
    ref = train("plain")
    if opts.batchnorm:
        per_replica = train("halves")
        return ref, measure_tolerance(ref, {"swapped": train("swapped")}), per_replica
    noise = {order: train(order) for order in ("swapped", "halves")}
    return ref, measure_tolerance(ref, noise), None


def local_data(opts: NumericsOptions):
    """The job's data, made in this process with one torch thread (sim and cpu fabrics)."""
    import torch

    from .job import make_data

    torch.set_num_threads(1)
    return make_data(opts)


def cpu_reference(opts: NumericsOptions, data):
    """The one-GPU reference of ``data`` computed on this CPU, with its tolerance and (BatchNorm)
    per-replica baseline, as reference_and_tolerance returns them (sim and cpu fabrics)."""
    from . import ways as W

    return reference_and_tolerance(lambda order: W.train_reference(opts, data, order=order), opts)


def run_and_judge(out: NumericsRun, sink: Sink, pair: Pair, lc: str, way: str, fabric: str,
                  timing: str, opts: NumericsOptions, ref: Optional[WayRun], tol: Optional[Tolerance],
                  notes: List[str], train: Callable[[], WayRun],
                  per_replica: Optional[WayRun] = None) -> None:
    """Run one way, judge it, record it; a hang or crash becomes a record with that verdict.

    ``per_replica`` (BatchNorm models): the baseline with per-replica statistics to judge against
    instead of ``ref``; the difference from ``ref`` is recorded as expected."""
    t0 = time.perf_counter()
    try:
        run = train()
    except WayFailed as e:
        wall_s = e.wall_s if e.wall_s is not None else time.perf_counter() - t0
        sink.fail(out, pair, lc, way, e, fabric, timing, opts, wall_s=wall_s)
        return
    except WorkerStartError:
        raise  # nothing ran: the environment is broken, not this pair
    except Exception as e:  # noqa: BLE001 - the sim transport's hang/crash faults, or a real error
        kind = "hang" if (isinstance(e, TimeoutError) or "hang" in type(e).__name__.lower()) else "crash"
        sink.fail(out, pair, lc, way, WayFailed(kind, f"{type(e).__name__}: {e}"), fabric, timing,
                  opts, wall_s=time.perf_counter() - t0)
        return
    baseline = "reference"
    if ref is not None and tol is not None:
        j = judge_way(run, per_replica or ref, tol)
        tol_json = tol.to_json()
        if per_replica is not None:
            whole = judge_way(run, ref, tol)
            run.extra["vs_whole_batch"] = {
                "verdict": whole.verdict, "step": whole.step,
                "max_rel_loss_dev": num_to_json(whole.max_rel_loss_dev),
                "max_abs_param_diff": num_to_json(whole.max_abs_param_diff),
                "expected": BN_EXPECTED}
            baseline = "per-replica"
            notes = notes + [BN_BASELINE_NOTE]
    else:  # no reference to compare against: only non-finite values can be judged
        nf = run.first_nonfinite_step
        j = Judgement("nan" if nf is not None else "ok", nf, None, None, nf, None)
        tol_json = {}
        notes = notes + ["no reference run to compare against (it failed): only NaN/Inf judged"]
    rec = NumericsResult(
        gpus=pair, link_class=lc, way=way, verdict=j.verdict, step=j.step, losses=run.losses,
        max_rel_loss_dev=j.max_rel_loss_dev, max_abs_param_diff=j.max_abs_param_diff,
        tolerance=tol_json, fabric=fabric, timing=timing, wall_s=run.wall_s, model=opts.model,
        steps=opts.steps, lr=opts.lr, batch=opts.batch,
        first_nonfinite_step=j.first_nonfinite_step, nonfinite_in=run.nonfinite_in,
        first_deviation_step=j.first_deviation_step,
        dp_split=run.extra.get("dp_split") if way == "dp" else None,
        paths=dict(run.extra.get("paths") or {}), baseline=baseline, notes=list(notes),
        extra={k: v for k, v in run.extra.items() if k not in ("dp_split", "paths")})
    if opts.inject_nan_at_step is not None and way != "reference":
        rec.notes.append(f"self-test: a NaN was injected into rank {opts.inject_nan_rank}'s "
                         f"gradient at step {opts.inject_nan_at_step}")
    sink.add(out, rec)


def reference_record(pair, lc, ref: WayRun, tol: Tolerance, fabric, timing, opts, notes):
    nf = ref.first_nonfinite_step
    return NumericsResult(
        gpus=pair, link_class=lc, way="reference", verdict="nan" if nf is not None else "ok",
        step=nf, losses=ref.losses, max_rel_loss_dev=0.0, max_abs_param_diff=0.0,
        tolerance=tol.to_json(), fabric=fabric, timing=timing, wall_s=ref.wall_s,
        model=opts.model, steps=opts.steps, lr=opts.lr, batch=opts.batch,
        first_nonfinite_step=nf, nonfinite_in=ref.nonfinite_in, notes=list(notes))

