"""The numerics worker process's side (worker.py is the parent's): its entry point, which runs
the jobs the parent's WorkerPool sends (reference, DataParallel on cuda, DDP over gloo/NCCL, the
sim's DataParallel flow and simulated DDP) and sends back plain payloads.

The forkserver / spawn child imports this module by name to find ``worker_main``; it imports
nothing of the parent's side.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import time
from typing import Any, Callable, Dict, Optional

#: Least seconds between two "beat" messages (a training step can take milliseconds).
BEAT_S = 0.2


def numerics_worker_main(conn, rank: int, backend: str, threads: int,
                log_path: Optional[str] = None, parent_pid: Optional[int] = None,
                env: Optional[Dict[str, str]] = None) -> None:
    """Entry point of a worker process of the workers' pool (gputopo/workers/pool.py): jobs
    come in over ``conn``, and ``(kind, job id, rank, payload)`` messages go back on it, until
    the pool's EXIT. Output goes to ``log_path`` (the run folder's workers/) when given; SIGINT
    is left to the parent; the worker exits when the parent is gone and leaves with
    ``os._exit``, so interpreter teardown cannot fail a delivered result."""
    from gputopo.workers.pool import EXIT
    from gputopo.workers.processes import enter_worker, leave

    # (env: the parent's environment now, NCCL_* settings..., not the forkserver's)
    enter_worker(log_path, parent_pid, env)
    # The topology's CUDA indices are in PCI bus order (gputopo.probe.cuda_index).
    os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    import torch

    torch.set_num_threads(max(1, threads))
    if backend == "nccl":
        # fp32 numerics: TF32 would swamp the reduction-order noise the tolerance is made of.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    if log_path:
        print(f"gputopo numerics worker {rank} pid {os.getpid()} backend {backend}", flush=True)
    conn.send(("ready", None, rank, None))
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            break
        if job == EXIT:
            break
        try:
            payload = _run_job(rank, job, backend, _progress_teller(conn, rank, job))
            conn.send(("result", job["id"], rank, payload))
        except BaseException as e:  # noqa: BLE001 - everything goes back to the parent
            import traceback

            traceback.print_exc()
            conn.send(("error", job["id"], rank, f"{type(e).__name__}: {e}"))
    leave(0)  # (a message sent is in the pipe: it outlives the process)


def _progress_teller(conn, rank: int, job: Dict[str, Any]) -> Callable[[str, int], None]:
    """``tell(kind, step)``: "prepared" once the job's data (and sim model) are built, before
    anything touches a GPU, a link or a peer; then "beat" after training steps, at most every
    BEAT_S (or a tenth of the job's timeout). The parent's WorkerPool gives preparation the
    start-up allowance and then waits at most the job's timeout for each next sign of progress.
    The hook on training steps (ways.set_step_hook) is set here, for the job now starting."""
    from . import ways

    every = min(BEAT_S, float(job.get("timeout_s") or BEAT_S) / 10)
    last = [0.0]

    def tell(kind: str, step: int = -1) -> None:
        now = time.monotonic()
        if kind == "beat" and now - last[0] < every:
            return
        last[0] = now
        conn.send((kind, job["id"], rank, step))

    ways.set_step_hook(lambda step: tell("beat", step))
    return tell


def _run_job(rank: int, job: Dict[str, Any], backend: str,
             tell: Optional[Callable[[str, int], None]] = None) -> Dict[str, Any]:
    from .job import NumericsOptions, make_data
    from . import ways

    if tell is None:
        def tell(kind: str, step: int = -1) -> None:  # nobody to tell (in-process use)
            return None
    opts = NumericsOptions(**job["opts"])
    data = make_data(opts)
    kind = job["kind"]
    if kind in ("sim-dp", "sim-ddp"):
        run = _train_sim(opts, data, job, tell)
        return _run_to_payload(run)
    tell("prepared", -1)
    if kind == "cpu-references":  # the one-GPU job and its noise re-runs, on this CPU
        return {"runs": {order: _run_to_payload(ways.train_reference(opts, data, order=order))
                         for order in job["orders"]}}
    if job.get("bus_ids") and backend == "nccl":
        from gputopo.bench.fabrics.cuda import check_bus_ids

        check_bus_ids(job["cuda_devices"], job["bus_ids"])
    if kind == "ddp":
        run = _train_ddp(rank, opts, data, job, backend)
    elif kind == "reference":
        run = ways.train_reference(opts, data, device=job["device"], order=job.get("order", "plain"))
    elif kind == "dp-cuda":
        run = ways.train_dp_cuda(opts, data, tuple(job["cuda_devices"]))
    else:
        raise ValueError(f"unknown job kind {kind!r}")
    return _run_to_payload(run)


#: This worker's sim runs that no fault touched, by what alone they depend on (see
#: :func:`_fault_free_key`): (the pair it was computed on, its WayRun).
_FAULT_FREE_RUNS: Dict[tuple, tuple] = {}


def _train_sim(opts, data, job: Dict[str, Any], tell: Callable[[str, int], None]):
    """DataParallel's flow or simulated DDP over the bench's sim fabric for one pair. Building
    the machine's model (seconds for a big description on a busy CPU) is preparation; the
    simulated transfers, where a hang fault blocks, come after ``tell("prepared")``.

    A job whose transfers no fault of the description can hit computes the same bits on every
    pair with the same routes (its GPUs only choose faults and routes; the data, the model and
    the order of operations come from the options): this worker computes such a run once and
    gives it again for the other pairs, marked ``same_run_as`` (the pair it was computed on)
    with this job's own wall time. On seed-8gpu that is 32 of the 56 jobs (every DDP, and
    DataParallel on the NVLink pairs), which had cost a tenth of the demo's CPU time."""
    from gputopo.bench.fabrics.sim import SimModel, SimOps

    from . import ways
    from .transport import OpsTransport

    t0 = time.perf_counter()
    i, j = job["pair"]
    ops = SimOps((i, j), (i, j), SimModel(job["description"]))
    transport = OpsTransport(ops)
    copy_path, collective_path = ops.peer_route(i, j), ops.collective_route()
    # DataParallel copies (scatter, gather) and goes through NCCL (broadcast, reduce_add);
    # DDP only all-reduces
    routes = (copy_path, collective_path) if job["kind"] == "sim-dp" else (collective_path,)
    used = {(a, b, r) for r in routes for a, b in ((i, j), (j, i))}
    key = _fault_free_key(ops, job, routes, used)
    tell("prepared", -1)
    if key is not None and key in _FAULT_FREE_RUNS:
        pair, run = _FAULT_FREE_RUNS[key]
        return dataclasses.replace(run, wall_s=time.perf_counter() - t0,
                                   extra=dict(run.extra, same_run_as=list(pair)))
    if job["kind"] == "sim-dp":
        run = ways.train_dp_flow(opts, data, (i, j), transport, copy_path=copy_path,
                                 collective_path=collective_path)
    else:
        run = ways.train_ddp_simulated(opts, data, (i, j), transport, collective_path)
    if key is not None and transport.routes <= used:  # (kept only if it went nowhere else)
        _FAULT_FREE_RUNS[key] = ((i, j), run)
    return run


def _fault_free_key(ops, job: Dict[str, Any], routes: tuple, used) -> Optional[tuple]:
    """What a sim job's result depends on when no fault can touch it: its kind, its routes in
    their roles (they are recorded with it: DataParallel's (copies, NCCL), DDP's (all_reduce,))
    and its options; None when a fault of the description hits one of the transfers ``used``
    (source, destination, route) it may make."""
    if any(ops.model.faults(a, b, route) for a, b, route in used):
        return None
    return (job["kind"], routes, json.dumps(job["opts"], sort_keys=True),
            str(getattr(job["description"], "name", "")))


def _run_to_payload(run) -> Dict[str, Any]:
    return {"losses": list(run.losses), "final_params": run.final_params.tolist(),
            "first_nonfinite_step": run.first_nonfinite_step, "nonfinite_in": run.nonfinite_in,
            "wall_s": run.wall_s, "extra": run.extra}


def _train_ddp(rank: int, opts, data, job: Dict[str, Any], backend: str):
    import datetime

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from .job import build_model, flat_params, make_optimizer, rank_loss, split_sizes
    from .ways import TrainLog, nan_injector

    world = 2
    if backend == "nccl":
        dev = int(job["cuda_devices"][rank])
        torch.cuda.set_device(dev)
        device = torch.device("cuda", dev)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, init_method=f"file://{job['store']}", rank=rank,
                            world_size=world,
                            timeout=datetime.timedelta(seconds=max(1.0, job["timeout_s"])))
    model = ddp = opt = None
    try:
        model = build_model(opts).to(device)
        model.train()
        ddp = DDP(model, device_ids=[device.index] if backend == "nccl" else None)
        opt = make_optimizer(ddp.parameters(), opts)
        params = list(model.parameters())
        sizes = split_sizes(opts.batch, world)
        step_ref = [0]
        inject = nan_injector(opts, rank, step_ref)
        x_all, y_all = data
        log = TrainLog()
        for step in range(opts.steps):
            step_ref[0] = step
            x = x_all[step].split(sizes)[rank].to(device)
            y = y_all[step].split(sizes)[rank].to(device)
            opt.zero_grad(set_to_none=True)
            out = ddp(x)
            if inject is not None:
                out = inject(out)
            loss = rank_loss(out, y, opts.batch, world)
            loss.backward()  # DDP all-reduces the gradients here
            logged = loss.detach().clone()
            dist.all_reduce(logged)  # the global loss, as a training script would log it
            log.step_done(step, float(logged) / world, params, [opt])
        if backend == "nccl":
            torch.cuda.synchronize(device)
        wall = time.perf_counter() - log.t0
        final = flat_params(model)
    finally:
        # docs/architecture.md: without this, ~4 % of gloo runs abort at exit after destroy_process_group.
        del ddp, opt, model
        gc.collect()
        dist.destroy_process_group()
    return log.result(final, {"ddp_split": sizes, "backend": backend, "rank": rank,
                              "paths": {"all_reduce": backend}}, wall_s=wall)
