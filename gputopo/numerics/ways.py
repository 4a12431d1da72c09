"""The training loops of the three ways that run inside this process.

- :func:`train_reference`: one device, the whole batch (plus the two noise re-runs that measure
  the tolerance: ``order="swapped"`` and ``order="halves"``).
- :func:`train_dp_flow`: DataParallel's flow (dp_flow.py) over a transport (sim and cpu fabrics).
- :func:`train_dp_cuda`: the real ``torch.nn.DataParallel`` over two CUDA devices.
- :func:`train_ddp_simulated`: DDP with two simulated ranks in one process, the gradient
  all-reduce moved through the transport the way NCCL's ring moves it (sim fabric).

Real DDP in two processes (gloo on the cpu fabric, NCCL on cuda) runs in the worker processes
of worker.py / worker_main.py.

Every loop checks each step for a non-finite loss or gradient and records the first one; it never
raises on NaN/Inf, and keeps training to the end so the loss curve is complete.
"""

from __future__ import annotations

import math
import time
from typing import Callable, List, Optional, Sequence, Tuple

import torch

from .dp_flow import DataParallelFlow
from .job import (MomentumSGD, NumericsOptions, all_finite, build_model, flat_params, global_loss,
                  grads_finite, make_optimizer, rank_loss, split_sizes)
from .transport import Transport
from .verdict import WayRun

#: Called with the step number after every training step of every loop in this process, or
#: None. The numerics worker process sets it (worker_main.py) to tell its parent that the job
#: is making progress: the job's timeout then counts seconds without progress, as the bench's
#: does, so a healthy pair on a busy machine is never called hung (a hang sends no more steps).
_on_step: Optional[Callable[[int], None]] = None


def set_step_hook(hook: Optional[Callable[[int], None]]) -> None:
    """Call ``hook(step)`` after every training step from now on (None: stop)."""
    global _on_step
    _on_step = hook


class TrainLog:
    """What one training loop records: the loss of every step, the first step and place a
    non-finite value showed up, and the wall time from its creation (make it just before the
    first step)."""

    def __init__(self):
        self.losses: List[float] = []
        self.step: Optional[int] = None
        self.where: Optional[str] = None
        self.t0 = time.perf_counter()

    def step_done(self, step: int, loss: float, params: Sequence[torch.Tensor],
                  optimizers: Sequence[MomentumSGD]) -> None:
        """After the backward pass of ``step``: record its loss, check it and the gradients,
        step the optimizers, check the updated parameters."""
        self.losses.append(loss)
        self._check(step, loss, params)
        for opt in optimizers:
            opt.step()
        if self.step is None and not all_finite(params):
            self.step, self.where = step, "parameters"
        if _on_step is not None:
            _on_step(step)

    def _check(self, step: int, loss: float, params: Sequence[torch.Tensor]) -> None:
        if self.step is not None:
            return
        if not math.isfinite(loss):
            self.step, self.where = step, "loss"
        elif not grads_finite(params):
            self.step, self.where = step, "gradient"

    def result(self, final_params: torch.Tensor, extra: dict,
               wall_s: Optional[float] = None) -> WayRun:
        """The loop's WayRun; ``wall_s`` defaults to the time since this log was made."""
        return WayRun(losses=self.losses, final_params=final_params,
                      first_nonfinite_step=self.step, nonfinite_in=self.where,
                      wall_s=time.perf_counter() - self.t0 if wall_s is None else wall_s,
                      extra=extra)


def nan_injector(opts: NumericsOptions, rank: int, step_ref: List[int]) -> Optional[Callable]:
    """Self-test hook: the function that puts a NaN into ``rank``'s output gradient at
    ``opts.inject_nan_at_step`` (so that rank's parameter gradients go NaN before the reduction,
    as a broken device's would), or None when no injection is asked for this rank."""
    if opts.inject_nan_at_step is None or rank != opts.inject_nan_rank:
        return None

    def attach(out: torch.Tensor) -> torch.Tensor:
        if step_ref[0] == opts.inject_nan_at_step and out.requires_grad:
            def poison(g):
                g = g.clone()
                g.view(-1)[0] = float("nan")
                return g
            out.register_hook(poison)
        return out

    return attach


# ----------------------------------------------------------------------------- reference


def train_reference(opts: NumericsOptions, data, device: str = "cpu", order: str = "plain") -> WayRun:
    """One device, the whole batch. ``order``: "plain"; "swapped" (batch halves swapped);
    "halves" (two half-batch passes, second half first, gradients added) - the noise re-runs."""
    x_all, y_all = data
    model = build_model(opts).to(device)
    model.train()
    opt = make_optimizer(model.parameters(), opts)
    params = list(model.parameters())
    sizes = split_sizes(opts.batch, 2)
    log = TrainLog()
    for step in range(opts.steps):
        x, y = x_all[step].to(device), y_all[step].to(device)
        opt.zero_grad(set_to_none=True)
        if order == "swapped":
            idx = torch.cat([torch.arange(sizes[0], opts.batch), torch.arange(0, sizes[0])]).to(device)
            loss = global_loss(model(x[idx]), y[idx])
            loss.backward()
            value = float(loss.detach())
        elif order == "halves":
            value = 0.0
            for xs, ys in reversed(list(zip(x.split(sizes), y.split(sizes)))):
                part = torch.nn.functional.cross_entropy(model(xs), ys, reduction="sum") / opts.batch
                part.backward()
                value += float(part.detach())
        else:
            loss = global_loss(model(x), y)
            loss.backward()
            value = float(loss.detach())
        log.step_done(step, value, params, [opt])
    if device != "cpu":
        torch.cuda.synchronize(device)
    return log.result(flat_params(model), {"order": order})


# ----------------------------------------------------------------------------- DataParallel


def train_dp_flow(opts: NumericsOptions, data, devices: Tuple[int, int], transport: Transport,
                  copy_path: str = "p2p", collective_path: str = "p2p") -> WayRun:
    """DataParallel's flow over ``transport`` (tensors stay CPU tensors; the transport is the link)."""
    x_all, y_all = data
    model = build_model(opts)
    model.train()
    opt = make_optimizer(model.parameters(), opts)
    params = list(model.parameters())
    step_ref = [0]
    rank = opts.inject_nan_rank
    inject = nan_injector(opts, rank, step_ref)
    flow = DataParallelFlow(model, devices, transport, copy_path=copy_path,
                            collective_path=collective_path,
                            on_replica_output=(lambda k, out: inject(out) if k == rank else out)
                            if inject else None)
    log = TrainLog()
    for step in range(opts.steps):
        step_ref[0] = step
        opt.zero_grad(set_to_none=True)
        loss = global_loss(flow(x_all[step]), y_all[step])
        loss.backward()
        log.step_done(step, float(loss.detach()), params, [opt])
    return log.result(flat_params(model), {"dp_split": list(flow.split_sizes), "paths": flow.paths})


def train_dp_cuda(opts: NumericsOptions, data, cuda_devices: Tuple[int, int]) -> WayRun:
    """The real ``torch.nn.DataParallel(model, device_ids=[ci, cj])``, output on ci.

    How DataParallel split the batch is read from inside the replicas (a forward pre-hook is
    shared by the replicas DataParallel makes), not computed on the side."""
    ci, cj = cuda_devices
    dev0 = torch.device("cuda", ci)
    x_all, y_all = data
    model = build_model(opts).to(dev0)
    model.train()
    dp = torch.nn.DataParallel(model, device_ids=[ci, cj], output_device=ci)
    opt = make_optimizer(model.parameters(), opts)
    params = list(model.parameters())
    split_seen: dict = {}
    step_ref = [0]
    inject = nan_injector(opts, opts.inject_nan_rank, step_ref)
    poisoned_device = (ci, cj)[opts.inject_nan_rank]

    def record_split(_module, args):
        if step_ref[0] == 0 and args:
            split_seen[args[0].device.index] = int(args[0].shape[0])

    def maybe_poison(_module, _args, out):
        if inject is not None and out.device.index == poisoned_device:
            return inject(out)
        return out

    h1 = model.register_forward_pre_hook(record_split)
    h2 = model.register_forward_hook(maybe_poison)
    log = TrainLog()
    try:
        for step in range(opts.steps):
            step_ref[0] = step
            opt.zero_grad(set_to_none=True)
            loss = global_loss(dp(x_all[step].to(dev0)), y_all[step].to(dev0))
            loss.backward()
            log.step_done(step, float(loss.detach()), params, [opt])
        torch.cuda.synchronize(dev0)
    finally:
        h1.remove()
        h2.remove()
    dp_split = [split_seen[d] for d in (ci, cj) if d in split_seen]
    return log.result(flat_params(model),
                      {"dp_split": dp_split,
                       "paths": {"broadcast": "nccl", "scatter": "cuda-copy",
                                 "gather": "cuda-copy", "reduce_add": "nccl"}})


# ----------------------------------------------------------------------------- DDP, simulated ranks


def ring_all_reduce_2(buffers: List[torch.Tensor], devices: Tuple[int, int], transport: Transport,
                      path: str) -> List[torch.Tensor]:
    """Sum two ranks' flat buffers as NCCL's ring does for 2 ranks: reduce-scatter (each rank
    receives the other's half of its chunk and adds), then all-gather (the summed chunks are
    exchanged). Every exchanged chunk goes through ``transport`` on ``path``."""
    b0, b1 = buffers
    d0, d1 = devices
    n = b0.numel()
    h = (n + 1) // 2
    s0 = b0[:h] + transport.copy(b1[:h].contiguous(), d1, d0, path=path)   # rank 0 owns chunk 0
    s1 = b1[h:] + transport.copy(b0[h:].contiguous(), d0, d1, path=path)   # rank 1 owns chunk 1
    out0 = torch.cat([s0, transport.copy(s1.contiguous(), d1, d0, path=path)])
    out1 = torch.cat([transport.copy(s0.contiguous(), d0, d1, path=path), s1])
    return [out0, out1]


def train_ddp_simulated(opts: NumericsOptions, data, devices: Tuple[int, int], transport: Transport,
                        path: str) -> WayRun:
    """DDP with two ranks simulated in this process. As DDP: rank 0's parameters are broadcast to
    rank 1 at construction; each rank runs its contiguous part of the global batch; gradients
    (one bucket) are divided by the world size and all-reduced; each rank steps its own
    optimizer. Reported loss per step is the mean of the ranks' losses (= the global mean)."""
    x_all, y_all = data
    world = 2
    models = [build_model(opts), build_model(opts)]
    for m in models:
        m.train()
    # DDP's constructor: broadcast rank 0's parameters and buffers to rank 1.
    with torch.no_grad():
        state0 = list(models[0].parameters()) + list(models[0].buffers())
        state1 = list(models[1].parameters()) + list(models[1].buffers())
        for a, b in zip(state0, state1):
            b.copy_(transport.copy(a.detach().clone(), devices[0], devices[1], path=path))
    opts_ = [make_optimizer(m.parameters(), opts) for m in models]
    params = [list(m.parameters()) for m in models]
    step_ref = [0]
    injectors = [nan_injector(opts, r, step_ref) for r in range(world)]
    sizes = split_sizes(opts.batch, world)
    log = TrainLog()
    for step in range(opts.steps):
        step_ref[0] = step
        xs, ys = x_all[step].split(sizes), y_all[step].split(sizes)
        rank_losses = []
        for r in range(world):
            opts_[r].zero_grad(set_to_none=True)
            if r >= len(xs):  # batch smaller than the world: this rank has no samples
                for p in params[r]:
                    p.grad = torch.zeros_like(p)
                rank_losses.append(0.0)
                continue
            out = models[r](xs[r])
            inject = injectors[r]
            if inject is not None:
                out = inject(out)
            loss = rank_loss(out, ys[r], opts.batch, world)
            loss.backward()
            rank_losses.append(float(loss.detach()))
        buckets = []
        for r in range(world):
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params[r]]
            buckets.append(torch.cat([g.reshape(-1) for g in grads]) / world)
        reduced = ring_all_reduce_2(buckets, devices, transport, path)
        for r in range(world):
            offset = 0
            for p in params[r]:
                k = p.numel()
                p.grad = reduced[r][offset:offset + k].view_as(p).clone()
                offset += k
        log.step_done(step, sum(rank_losses) / world, params[0] + params[1], opts_)
    replica_gap = float((flat_params(models[0]) - flat_params(models[1])).abs().max())
    return log.result(flat_params(models[0]),
                      {"ddp_split": sizes, "paths": {"all_reduce": path},
                       "rank_param_gap": replica_gap if math.isfinite(replica_gap) else "nan",
                       "ranks": "simulated in one process"})
