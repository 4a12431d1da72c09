"""Worker processes that run the training job where it must run out of this process.

- **DDP** (cpu fabric: gloo; cuda fabric: NCCL): both workers take part, rank r on the pair's
  r-th GPU (cuda) or on the CPU (cpu), each on its contiguous part of the global batch.
- **reference / noise re-runs / DataParallel on cuda**: worker 0 alone, so that a GPU pair that
  hangs (broken peer-to-peer DMA can hang a copy) or kills the process costs a finding, not the run.
- **sim DataParallel / sim DDP** (one worker): the sim fabric's ``hang`` fault really blocks and
  its ``crash`` fault really aborts the process that moves the bytes (bench/fabrics/sim.py), so
  the ways that move bytes through the simulated links run here too, under the same timeout.

The pool is started once per numerics run and reused pair after pair (start-up is ~2 s per
process with torch, DESIGN.md); a worker that hangs or dies is killed and the pool is restarted
for the next job. Each DDP job gets a fresh process group over a FileStore (no TCP port races).

Exit-time crashes: DDP on gloo occasionally dies with SIGABRT *after* ``destroy_process_group``
(DESIGN.md). Workers delete the DDP module and collect garbage before destroying the group, and
the parent treats a death after every result was delivered as a clean exit.
"""

from __future__ import annotations

import gc
import math
import multiprocessing as mp
import os
import queue
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

#: Seconds a worker may take to start (spawn + import torch) before it counts as hung.
START_TIMEOUT_S = 120.0
POLL_S = 0.05


class WorkerHang(Exception):
    """A job did not finish within its time limit (the workers were killed)."""


class WorkerCrash(Exception):
    """A worker process died, or the job raised, before delivering its result."""


class WorkerStartError(RuntimeError):
    """The workers could not start at all (no job ran): a broken environment, not a finding."""


# ----------------------------------------------------------------------------- in the worker


def _worker_main(rank: int, jobs, results, backend: str, threads: int,
                 log_path: Optional[str] = None, parent_pid: Optional[int] = None,
                 env: Optional[Dict[str, str]] = None) -> None:
    """Entry point of a worker process. Output goes to ``log_path`` (the run folder's workers/)
    when given; SIGINT is left to the parent; the worker exits when the parent is gone and
    leaves with ``os._exit``, so interpreter teardown cannot fail a delivered result."""
    import signal

    from gputopo.bench.worker import _redirect_output, _watch_parent

    if log_path:
        _redirect_output(log_path)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent_pid:
        _watch_parent(parent_pid)
    if env is not None:  # the parent's environment now (NCCL_* settings...), not the forkserver's
        os.environ.clear()
        os.environ.update(env)
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
    results.put(("ready", None, rank, None))
    while True:
        job = jobs.get()
        if job is None:
            break
        try:
            payload = _run_job(rank, job, backend)
            results.put(("result", job["id"], rank, payload))
        except BaseException as e:  # noqa: BLE001 - everything goes back to the parent
            import traceback

            traceback.print_exc()
            results.put(("error", job["id"], rank, f"{type(e).__name__}: {e}"))
    sys.stdout.flush()
    sys.stderr.flush()
    results.close()
    results.join_thread()  # the last result is in the pipe before the process goes
    os._exit(0)


def _run_job(rank: int, job: Dict[str, Any], backend: str) -> Dict[str, Any]:
    from .job import NumericsOptions, make_data
    from . import ways

    opts = NumericsOptions(**job["opts"])
    data = make_data(opts)
    kind = job["kind"]
    if job.get("bus_ids") and backend == "nccl":
        from gputopo.bench.fabrics.cuda import check_bus_ids

        check_bus_ids(job["cuda_devices"], job["bus_ids"])
    if kind in ("sim-dp", "sim-ddp"):
        run = _train_sim(opts, data, job)
    elif kind == "ddp":
        run = _train_ddp(rank, opts, data, job, backend)
    elif kind == "reference":
        run = ways.train_reference(opts, data, device=job["device"], order=job.get("order", "plain"))
    elif kind == "dp-cuda":
        run = ways.train_dp_cuda(opts, data, tuple(job["cuda_devices"]))
    else:
        raise ValueError(f"unknown job kind {kind!r}")
    return _run_to_payload(run)


def _train_sim(opts, data, job: Dict[str, Any]):
    """DataParallel's flow or simulated DDP over the bench's sim fabric for one pair."""
    from gputopo.bench.fabrics.sim import SimModel, SimOps

    from . import ways
    from .transport import OpsTransport

    i, j = job["pair"]
    ops = SimOps((i, j), (i, j), SimModel(job["description"]))
    transport = OpsTransport(ops)
    if job["kind"] == "sim-dp":
        return ways.train_dp_flow(opts, data, (i, j), transport, copy_path=ops.peer_route(i, j),
                                  collective_path=ops.collective_route())
    return ways.train_ddp_simulated(opts, data, (i, j), transport, ops.collective_route())


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
        # DESIGN.md: without this, ~4 % of gloo runs abort at exit after destroy_process_group.
        del ddp, opt, model
        gc.collect()
        dist.destroy_process_group()
    return log.result(final, {"ddp_split": sizes, "backend": backend, "rank": rank,
                              "paths": {"all_reduce": backend}}, wall_s=wall)


# ----------------------------------------------------------------------------- in the parent


@dataclass
class JobResult:
    """Per rank that ran the job: its payload (losses, final_params list, ...)."""

    payloads: Dict[int, Dict[str, Any]]
    wall_s: float


class WorkerPool:
    """``size`` spawned worker processes (2 for DDP, 1 for the sim) and their queues; restarted
    after a hang or a crash. ``backend``: "gloo", "nccl" or "sim"."""

    def __init__(self, backend: str, threads: int = 1, size: int = 2,
                 log_dir: Optional[str] = None):
        self.backend = backend
        self.size = size
        self.threads = threads
        self.log_dir = log_dir
        if log_dir:
            os.makedirs(log_dir, exist_ok=True)
        self._ctx = _mp_context()
        self._procs: List[Any] = []
        self._jobs: List[Any] = []
        self._results = None
        self._next_id = 0
        self._tmp = tempfile.TemporaryDirectory(prefix="gputopo-numerics-")
        self.starts = 0

    # --- lifecycle
    @property
    def restarts(self) -> int:
        """How many times the workers had to be started again after a hang or a crash."""
        return max(0, self.starts - 1)

    def _start(self) -> None:
        from gputopo.bench.runner import starting_workers

        self.starts += 1
        # Ctrl-C waits until every worker is started (and so known, to be killed)
        with starting_workers(self._ctx):
            self._results = self._ctx.Queue()
            self._jobs = [self._ctx.Queue() for _ in range(self.size)]
            env = dict(os.environ)
            self._procs = [self._ctx.Process(target=_worker_main, name=f"gputopo-numerics-{r}",
                                             args=(r, self._jobs[r], self._results, self.backend,
                                                   self.threads, self._log_path(r), os.getpid(),
                                                   env),
                                             daemon=True)
                           for r in range(self.size)]
            for p in self._procs:
                p.start()
        ready = set()
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            while len(ready) < self.size:
                msg = self._get(deadline, ranks=tuple(range(self.size)), what="start")
                if msg[0] == "ready":
                    ready.add(msg[2])
        except (WorkerHang, WorkerCrash) as e:
            raise WorkerStartError(f"numerics worker processes could not start: {e}") from None

    def _log_path(self, rank: int) -> Optional[str]:
        if not self.log_dir:
            return None
        return os.path.join(self.log_dir, f"numerics-{self.backend}{rank}.{self.starts}.log")

    def log_tail(self, rank: int) -> str:
        """The end of a worker's current log (quoted in crash messages)."""
        path = self._log_path(rank)
        if not path:
            return ""
        try:
            from gputopo.bench.runner import tail

            return tail(path, lines=8, max_chars=1500)
        except ImportError:  # pragma: no cover
            return ""

    def _alive(self) -> bool:
        return len(self._procs) == self.size and all(p.is_alive() for p in self._procs)

    def kill(self) -> None:
        """Stop both workers now (after a hang/crash); the next job starts fresh ones."""
        started = [p for p in self._procs if p.pid is not None]
        for p in started:
            if p.is_alive():
                p.kill()
        for p in started:
            p.join(timeout=5)
        for q in self._jobs:
            # a job its killed worker never read stays in the pipe; one larger than the pipe
            # buffer (the sim description of a big machine) left the queue's feeder thread
            # blocked, and the interpreter waited for it at exit forever
            q.cancel_join_thread()
        self._procs = []
        self._results = None

    def close(self) -> None:
        """Ask the workers to exit; an exit-time crash here is not a failure (all results are in)."""
        started = [p for p in self._procs if p.pid is not None]
        for q, p in zip(self._jobs, self._procs):
            if p.pid is not None and p.is_alive():
                try:
                    q.put(None)
                except (OSError, ValueError):
                    pass
        for p in started:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
        self._procs = []
        self._tmp.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- jobs
    def _get(self, deadline: float, ranks, what: str):
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise WorkerHang(f"{what}: no answer within the time limit")
            try:
                return self._results.get(timeout=min(POLL_S * 4, left))
            except queue.Empty:
                dead = [r for r in ranks if r < len(self._procs) and not self._procs[r].is_alive()]
                if dead:
                    codes = {r: self._procs[r].exitcode for r in dead}
                    # A last message may have been queued just before the process died.
                    try:
                        return self._results.get(timeout=0.5)
                    except queue.Empty:
                        pass
                    how = ", ".join(_exit_text(c) for c in codes.values())
                    last = " | ".join(line for r in dead for line in self.log_tail(r).splitlines()[-3:])
                    self.kill()
                    raise WorkerCrash(f"{what}: worker process {', '.join(map(str, dead))} died ({how})"
                                      + (f"; log: {last}" if last else ""))

    def run(self, job: Dict[str, Any], ranks: Tuple[int, ...], timeout_s: float) -> JobResult:
        """Run ``job`` on the workers ``ranks`` and wait for all of them, at most ``timeout_s``
        (after start-up). Raises WorkerHang or WorkerCrash; the pool is then restarted lazily."""
        if not self._alive():
            if self._procs:
                self.kill()
            self._start()
        self._next_id += 1
        job = dict(job, id=self._next_id, timeout_s=timeout_s,
                   store=os.path.join(self._tmp.name, f"store-{self._next_id}"))
        t0 = time.perf_counter()
        for r in ranks:
            self._jobs[r].put(job)
        deadline = time.monotonic() + timeout_s
        payloads: Dict[int, Dict[str, Any]] = {}
        errors: Dict[int, str] = {}
        while len(payloads) + len(errors) < len(ranks):
            kind, jid, rank, payload = self._get(deadline, ranks, what=job["kind"])
            if jid != job["id"]:
                continue  # a stale message from a job that was given up on
            if kind == "result":
                payloads[rank] = payload
            elif kind == "error":
                errors[rank] = payload
        if errors:
            # The other rank may now wait in a collective forever: start afresh next time.
            self.kill()
            raise WorkerCrash("; ".join(f"rank {r}: {e}" for r, e in sorted(errors.items())))
        return JobResult(payloads=payloads, wall_s=time.perf_counter() - t0)


def _mp_context():
    """The bench runner's multiprocessing context (forkserver with torch preloaded: a worker
    costs a fork, not an interpreter start), or spawn where that is not available."""
    try:
        from gputopo.bench.runner import mp_context

        return mp_context()
    except ImportError:  # pragma: no cover - the bench is part of the package
        return mp.get_context("spawn")


def _exit_text(code) -> str:
    """'exit code 1' or 'killed by SIGABRT' for a process's exitcode."""
    if isinstance(code, int) and code < 0:
        import signal

        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def payload_to_run(payload: Dict[str, Any]):
    """Turn a worker's payload back into a WayRun."""
    import torch

    from .verdict import WayRun

    return WayRun(losses=[float(v) for v in payload["losses"]],
                  final_params=torch.tensor(payload["final_params"], dtype=torch.float32),
                  first_nonfinite_step=payload["first_nonfinite_step"],
                  nonfinite_in=payload["nonfinite_in"], wall_s=payload["wall_s"],
                  extra=dict(payload.get("extra") or {}))


def rank_param_gap(a: Dict[str, Any], b: Dict[str, Any]) -> float:
    """Largest |difference| between two ranks' final parameters (DDP keeps them identical)."""
    gap = 0.0
    for x, y in zip(a["final_params"], b["final_params"]):
        d = abs(x - y)
        if not math.isfinite(d):
            return math.inf
        gap = max(gap, d)
    return gap
