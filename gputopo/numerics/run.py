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

The stages live in their own modules: outcome.py (NumericsRun, WayFailed), fabric_runs.py (the
ways per fabric), judging.py (reference, tolerance, verdict per way), sink.py (records,
run-folder files, done_pairs). This module is the entry point and keeps their public names.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, Sequence

from gputopo.errors import UsageError
from gputopo.model import Topology

from .fabric_runs import (TransportFactory, _run_cpu, _run_cuda, _run_sim_in_process,
                          _run_sim_in_worker, cuda_index_of)
from .job import NumericsOptions
from .judging import BN_BASELINE_NOTE, BN_EXPECTED
from .outcome import NumericsRun, Pair, WayFailed
from .result import WAYS, NumericsResult
from .sink import LOSSES_CSV, _Sink, done_pairs, step_id

__all__ = ["BN_BASELINE_NOTE", "BN_EXPECTED", "DEFAULT_TIMEOUT_S", "FABRICS",
           "LOSSES_CSV", "NumericsRun", "Pair", "TransportFactory", "WayFailed", "cuda_index_of",
           "done_pairs", "run_numerics", "step_id"]

FABRICS = ("cuda", "cpu", "sim")
#: Seconds a way may run before it counts as hung (real fabrics; excludes worker start-up).
DEFAULT_TIMEOUT_S = 120.0


# ----------------------------------------------------------------------------- entry point


def run_numerics(topology: Topology, pairs: Sequence[Pair], fabric: str, description: Any = None,
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
    if fabric not in FABRICS:
        raise UsageError(f"--fabric: unknown fabric {fabric!r}; known: {', '.join(FABRICS)}")
    opts = options or NumericsOptions()
    ways = tuple(w for w in WAYS if w in ways)
    pairs = [(min(i, j), max(i, j)) for i, j in pairs]
    for i, j in pairs:
        try:
            topology.pair(i, j)
        except KeyError:
            raise UsageError(f"--pairs {i},{j}: this machine's topology has no such pair") from None
    out = NumericsRun(options=opts, fabric=fabric)
    sink = _Sink(run_dir, write_events, progress)
    t0 = time.perf_counter()
    if fabric == "sim":
        if transport_factory is not None:
            _run_sim_in_process(topology, pairs, opts, out, sink, ways, transport_factory)
        else:
            if description is None:
                raise UsageError("the sim fabric needs a simulated machine: use --sim NAME")
            _run_sim_in_worker(topology, pairs, opts, out, sink, ways, description, timeout_s,
                               sim_jobs)
    elif fabric == "cpu":
        _run_cpu(topology, pairs, opts, out, sink, ways, timeout_s)
    else:
        _run_cuda(topology, pairs, opts, out, sink, ways, timeout_s)
    for pair in pairs:
        sink.pair_done(out, pair)
    out.wall_s = time.perf_counter() - t0
    sink.write_losses(out.results)
    return out
