"""Run the DP-vs-DDP numerics check on GPU pairs: three ways per pair, judged, recorded.

For each pair (i, j) the same deterministic job (job.py) runs as

- ``reference``: one GPU (i), the whole batch;
- ``dp``: DataParallel over [i, j], the same global batch;
- ``ddp``: DistributedDataParallel, 2 ranks, each its contiguous part of the batch;

and each way is judged against the reference with a tolerance measured from fp32
reduction-order noise (verdict.py). Per fabric:

======  ==========================  ==============================  ============================
fabric  reference (+ noise re-runs)  dp                              ddp
======  ==========================  ==============================  ============================
sim     in process, once per run    dp_flow over the sim transport  2 simulated ranks, all-reduce
        (no transfers: the same on  (scatter/gather raw copies,     through the transport on the
        every pair)                 broadcast/reduce on NCCL's path) path NCCL picks for the class
cpu     in process, once per run    dp_flow over plain in-process   gloo, 2 real processes
                                    copies (emulated, no link)
cuda    worker 0 on GPU i, per pair real nn.DataParallel in worker  NCCL, 2 real processes
======  ==========================  ==============================  ============================

On the sim, DataParallel and DDP run in a worker process (worker.py): the sim's ``hang`` fault
really blocks, and its ``crash`` fault really aborts, the process that moves the bytes. Callers
that pass ``transport_factory`` (tests, embedding) run them in this process instead.

A way that hangs or crashes becomes a record with that verdict; the run goes on with the next
way and pair. NaN/Inf are verdicts, never exceptions. Results are appended to ``numerics.jsonl``
in the run folder as they complete (a step-done line per pair to ``events.jsonl``), and the
loss curves to ``numerics_losses.csv`` at the end. The findings the records make (nan,
diverged, hang, crash, a chaotic job's noisy) are the report's: gputopo.report.numerics_record.

This module is the entry point and runs the ways per fabric (the table above); the stages it
uses live in their own modules: outcome.py (NumericsRun, WayFailed), judging.py (reference,
tolerance, verdict per way), sink.py (records, run-folder files, done_pairs), sim_jobs.py (the
sim's ways in worker processes), worker.py (the gloo and NCCL worker pool).
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from gputopo.bench.fabrics.fabric import FABRIC_NAMES, Fabric, fabric_named
from gputopo.workers.processes import despite_ctrl_c
from gputopo.errors import NoHardwareError, UsageError
from gputopo.model import Topology
from gputopo.model.values import is_value

from .job import NumericsOptions
from .judging import cpu_reference, local_data, reference_and_tolerance, reference_record, run_and_judge
from .outcome import NumericsRun, Pair, WayFailed
from .paths import pair_paths
from .result import WAY_NAMES, WAYS, NumericsResult, num_to_json
from .sink import Sink
from .verdict import WayRun

FABRICS = FABRIC_NAMES
#: Seconds a way may run before it counts as hung (real fabrics; excludes worker start-up).
DEFAULT_TIMEOUT_S = 120.0

#: What builds a pair's transport for the sim fabric in this process: ``factory(i, j)``.
TransportFactory = Callable[[int, int], Any]
Train = Callable[[Pair], WayRun]


# ----------------------------------------------------------------------------- entry point


def run_numerics(topology: Topology, pairs: Sequence[Pair], fabric: Union[str, Fabric], description: Any = None,
                 options: Optional[NumericsOptions] = None, *,
                 transport_factory: Optional[TransportFactory] = None,
                 run_dir: Optional[str] = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                 progress: Optional[Callable[[NumericsResult], None]] = None,
                 ways: Sequence[str] = WAYS, write_events: bool = True,
                 sim_jobs: Any = None) -> NumericsRun:
    """Run the numerics check on ``pairs`` (NVML indices) of ``topology`` over ``fabric``.

    ``description``: the sim Description (sim fabric; used to build the fault-applying transport
    when ``transport_factory`` is not given). ``transport_factory(i, j)`` returns the transport
    for a pair (see transport.py; a bench fabric ``Ops`` is accepted). ``run_dir``: the run folder
    to append ``numerics.jsonl`` (and a step-done line per pair to ``events.jsonl`` when
    ``write_events``) to. ``progress(result)`` is called as each record completes.
    ``sim_jobs``: the sim's DataParallel/DDP jobs already started (sim_jobs.SimJobs, from
    jobs.py, beside the bench); this run then owns them and closes them.
    """
    chosen = fabric_named(fabric)  # UsageError for an unknown one
    fabric = chosen.name
    opts = options or NumericsOptions()
    ways = tuple(w for w in WAYS if w in ways)
    pairs = [(min(i, j), max(i, j)) for i, j in pairs]
    for i, j in pairs:
        try:
            topology.pair(i, j)
        except KeyError:
            raise UsageError(f"--pairs {i},{j}: this machine's topology has no such pair") from None
    out = NumericsRun(options=opts, fabric=fabric)
    sink = Sink(run_dir, write_events, progress)
    t0 = time.perf_counter()
    if chosen.simulated:
        if transport_factory is not None:
            _run_sim_in_process(topology, pairs, opts, out, sink, ways, transport_factory)
        else:
            if description is None:
                raise UsageError("the sim fabric needs a simulated machine: use --sim NAME")
            _run_sim_in_worker(topology, pairs, opts, out, sink, ways, description, timeout_s,
                               sim_jobs)
    elif chosen.stands_in:
        _run_cpu(topology, pairs, opts, out, sink, ways, timeout_s)
    else:
        _run_cuda(topology, pairs, opts, out, sink, ways, timeout_s)
    for pair in pairs:
        sink.pair_done(out, pair)
    out.wall_s = time.perf_counter() - t0
    sink.write_losses(out.results)
    return out


# ----------------------------------------------------------------------------- the ways per fabric


def _run_on_cpu_compute(topology, pairs, opts, out: NumericsRun, sink: Sink, ways, fabric: str,
                        data, dp_train: Train, ddp_train: Train,
                        dp_notes: List[str], ddp_notes: List[str], computed=None) -> None:
    """sim and cpu: every device is this CPU, so the reference (and its tolerance) is computed
    once for the run (``computed``: already, as reference_and_tolerance returns it); DataParallel
    and DDP run per pair through ``dp_train`` / ``ddp_train``."""
    ref, tol, per_replica = computed or cpu_reference(opts, data)
    out.tolerances["run"] = tol
    timing = fabric_named(fabric).timing  # modeled (sim), wall (cpu)
    for pair in pairs:
        lc = str(topology.link_class(*pair))
        if "reference" in ways:
            note = (f"computed once for the run: on the {fabric} fabric one device's job is the "
                    "same CPU computation for every pair")
            sink.add(out, reference_record(pair, lc, ref, tol, fabric, timing, opts, [note]))
        if "dp" in ways:
            run_and_judge(out, sink, pair, lc, "dp", fabric, timing, opts, ref, tol, dp_notes,
                          functools.partial(dp_train, pair), per_replica)
        if "ddp" in ways:
            run_and_judge(out, sink, pair, lc, "ddp", fabric, timing, opts, ref, tol, ddp_notes,
                          functools.partial(ddp_train, pair), per_replica)


_SIM_DDP_NOTE = ("two ranks simulated in one process; the gradient all-reduce moves through the "
                 "simulated links as NCCL's 2-rank ring would, on the path NCCL picks for the pair")


def _run_sim_in_worker(topology, pairs, opts, out, sink, ways, description, timeout_s,
                       jobs=None) -> None:
    """The sim fabric as `gputopo numerics --sim` runs it: the ways that move bytes run in worker
    processes (sim_jobs.py, several at once), because the sim's hang fault blocks and its crash
    fault aborts the process that runs them. ``jobs``: those jobs already started (and now
    owned here), else they start now."""
    from .sim_jobs import SimJobs

    if jobs is None:
        jobs = SimJobs(description, opts, timeout_s, sink.log_dir, pairs, ways)
    try:
        _run_on_cpu_compute(topology, pairs, opts, out, sink, ways, "sim", None,  # (data: in the workers)
                            jobs.train("dp"), jobs.train("ddp"), [], [_SIM_DDP_NOTE], jobs.reference())
    except BaseException:
        despite_ctrl_c(jobs.kill)  # Ctrl-C, or no worker could start: nothing more to wait for
        raise
    finally:
        _closed(jobs.close, out)


def _closed(close: Callable[[], List[str]], out) -> None:
    """``close()`` the workers to the end even through a Ctrl-C (then raised once they are
    all joined), its notes added to ``out``."""
    notes: List[str] = []
    if despite_ctrl_c(lambda: notes.extend(close())):
        raise KeyboardInterrupt
    out.notes.extend(notes)


@contextlib.contextmanager
def _pool_closed(pool, out, what: str):
    """Close a numerics worker pool (None: no pool was needed) when its pairs are done; on
    Ctrl-C kill the workers at once rather than wait for their job to end. The number of worker
    starts goes into the notes."""
    try:
        yield pool
    except KeyboardInterrupt:
        if pool is not None:
            despite_ctrl_c(pool.kill)
        raise
    finally:
        if pool is not None:
            fresh = getattr(pool, "peer_starts", 0)
            out.notes.append(f"{what} started {pool.starts} time(s)"
                             + (f" ({fresh} of them fresh workers so that no GPU held more than "
                                "8 peer mappings at once, CUDA's limit)" if fresh else ""))
            if despite_ctrl_c(pool.close):
                raise KeyboardInterrupt


def _run_sim_in_process(topology, pairs, opts, out, sink, ways, factory: TransportFactory) -> None:
    """The sim fabric over caller-given transports, in this process (tests, embedding)."""
    from . import ways as W
    from .transport import OpsTransport, adapt_transport

    data = local_data(opts)

    def routes(transport, i, j) -> Dict[str, str]:
        ops = transport.ops if isinstance(transport, OpsTransport) else None
        if ops is not None and hasattr(ops, "peer_route") and hasattr(ops, "collective_route"):
            return {"copy": ops.peer_route(i, j), "nccl": ops.collective_route()}
        return pair_paths(topology, i, j)

    def dp_train(pair):
        t = adapt_transport(factory(*pair))
        r = routes(t, *pair)
        return W.train_dp_flow(opts, data, pair, t, copy_path=r["copy"], collective_path=r["nccl"])

    def ddp_train(pair):
        t = adapt_transport(factory(*pair))
        return W.train_ddp_simulated(opts, data, pair, t, routes(t, *pair)["nccl"])

    _run_on_cpu_compute(topology, pairs, opts, out, sink, ways, "sim", data, dp_train, ddp_train,
                        [], [_SIM_DDP_NOTE])


def _run_cpu(topology, pairs, opts, out, sink, ways, timeout_s) -> None:
    """cpu fabric: DDP over gloo in 2 real processes; DataParallel emulated in process."""
    from . import ways as W
    from .transport import LocalTransport
    from .worker import WorkerCrash, WorkerHang, WorkerPool, payload_to_run, rank_param_gap

    data = local_data(opts)
    pool = WorkerPool("gloo", threads=1, log_dir=sink.log_dir) if "ddp" in ways else None

    def dp_train(pair):
        return W.train_dp_flow(opts, data, pair, LocalTransport(), copy_path="in-process",
                               collective_path="in-process")

    def ddp_train(pair):
        if pool is None:  # made above whenever the ddp way is asked for
            raise RuntimeError("DDP asked for without its worker pool")
        try:
            res = pool.run({"kind": "ddp", "opts": opts.to_json()}, ranks=(0, 1), timeout_s=timeout_s)
        except (WorkerHang, WorkerCrash) as e:
            raise WayFailed.of("DDP (gloo)", e.outcome) from e
        run = payload_to_run(res.payloads[0])
        run.extra["rank_param_gap"] = num_to_json(rank_param_gap(res.payloads[0], res.payloads[1]))
        return run

    dp_notes = ["emulated: DataParallel's documented flow (broadcast, scatter, gather, reduce_add) "
                "over plain in-process copies; no GPU link is involved on the cpu fabric"]
    with _pool_closed(pool, out, "gloo workers"):
        _run_on_cpu_compute(topology, pairs, opts, out, sink, ways, "cpu", data, dp_train, ddp_train,
                            dp_notes, ["DistributedDataParallel over gloo in 2 CPU processes"])


# ----------------------------------------------------------------------------- cuda


def cuda_index_of(topology: Topology, gpu: int, env=None) -> int:
    """The CUDA index NVML GPU ``gpu`` has in a numerics worker (which runs with
    CUDA_DEVICE_ORDER=PCI_BUS_ID), or UsageError when CUDA cannot see it: never another GPU's
    number (gputopo.bench.visible)."""
    from gputopo.bench.visible import mig_refusal, worker_cuda_map

    refusal = mig_refusal(topology, [gpu], env)
    if refusal:
        raise UsageError(refusal)
    idx = worker_cuda_map(topology, env).get(gpu)
    if not isinstance(idx, int):
        raise UsageError(f"GPU {gpu} is not visible to CUDA ({getattr(idx, 'reason', idx)}); "
                         "unset CUDA_VISIBLE_DEVICES or pick visible GPUs")
    return int(idx)


def _run_cuda(topology, pairs, opts, out, sink, ways, timeout_s) -> None:
    cuda_of = {g: cuda_index_of(topology, g) for p in pairs for g in p}  # usage errors first
    bus_of = {g: topology.gpu(g).pci_bus_id if is_value(topology.gpu(g).pci_bus_id) else None
              for g in cuda_of}

    import torch

    from .worker import WorkerCrash, WorkerHang, WorkerPool, payload_to_run, rank_param_gap

    if not torch.cuda.is_available():
        raise NoHardwareError("the cuda fabric needs CUDA GPUs and this torch sees none")

    def call(job, ranks, way):
        try:
            return pool.run(job, ranks=ranks, timeout_s=timeout_s)
        except (WorkerHang, WorkerCrash) as e:
            raise WayFailed.of(WAY_NAMES[way], e.outcome) from e

    from gputopo.workers.peer_mappings import nvswitch_gpus

    # CUDA's 8 peer mappings per device hold on non-NVSwitch systems only (workers/peer_mappings.py)
    exempt = [cuda_of[g] for g in nvswitch_gpus(topology) if g in cuda_of]
    pool = WorkerPool("nccl", threads=1, log_dir=sink.log_dir, peer_exempt=exempt)
    with _pool_closed(pool, out, "NCCL workers"):
        for i, j in pairs:
            lc = str(topology.link_class(i, j))
            ci, cj = cuda_of[i], cuda_of[j]
            device = f"cuda:{ci}"

            def reference_run(order, device=device, ci=ci, bus=bus_of[i]):
                job = {"kind": "reference", "opts": opts.to_json(), "device": device, "order": order,
                       "cuda_devices": [ci], "bus_ids": [bus]}
                return payload_to_run(call(job, (0,), "reference").payloads[0])

            ref = tol = per_replica = None
            try:
                ref, tol, per_replica = reference_and_tolerance(reference_run, opts)
                out.tolerances[f"{i},{j}"] = tol
                if "reference" in ways:
                    sink.add(out, reference_record((i, j), lc, ref, tol, "cuda", "wall", opts,
                                                   [f"GPU {i} (cuda:{ci}) alone"]))
            except WayFailed as e:
                if "reference" in ways:
                    sink.fail(out, (i, j), lc, "reference", e, "cuda", "wall", opts)
            if "dp" in ways:
                def dp_run(ci=ci, cj=cj, bi=bus_of[i], bj=bus_of[j]):
                    job = {"kind": "dp-cuda", "opts": opts.to_json(), "cuda_devices": [ci, cj],
                           "bus_ids": [bi, bj]}
                    return payload_to_run(call(job, (0,), "dp").payloads[0])

                run_and_judge(out, sink, (i, j), lc, "dp", "cuda", "wall", opts, ref, tol,
                              [f"torch.nn.DataParallel(device_ids=[{ci}, {cj}])"], dp_run, per_replica)
            if "ddp" in ways:
                def ddp_run(ci=ci, cj=cj, bi=bus_of[i], bj=bus_of[j]):
                    job = {"kind": "ddp", "opts": opts.to_json(), "cuda_devices": [ci, cj],
                           "bus_ids": [bi, bj]}
                    res = call(job, (0, 1), "ddp")
                    run = payload_to_run(res.payloads[0])
                    run.extra["rank_param_gap"] = num_to_json(
                        rank_param_gap(res.payloads[0], res.payloads[1]))
                    return run

                from gputopo.bench.worker_env import worker_env

                # what the workers ran with (they set the few variables that change the run)
                nccl_env = {k: v for k, v in worker_env(os.environ)[0].items()
                            if k.startswith("NCCL_")}
                run_and_judge(out, sink, (i, j), lc, "ddp", "cuda", "wall", opts, ref, tol,
                              [f"DistributedDataParallel over NCCL, ranks on cuda:{ci} and cuda:{cj}"]
                              + ([f"NCCL environment: {nccl_env}"] if nccl_env else []), ddp_run,
                              per_replica)
