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

A way that hangs or crashes becomes a ``hang``/``crash`` finding (and a record with that
verdict); the run goes on with the next way and pair. NaN/Inf are findings, never exceptions.
Results are appended to ``numerics.jsonl`` in the run folder as they complete, hang/crash
findings to ``events.jsonl``, and the loss curves to ``numerics_losses.csv`` at the end.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from gputopo.bench.runlog import EVENTS_JSONL, NUMERICS_JSONL, append_jsonl, read_jsonl
from gputopo.errors import NoHardwareError, UsageError
from gputopo.model import Finding, Topology
from gputopo.model.values import is_value

from .findings import BAD_VERDICTS, OTHER_WAY, record_finding
from .job import NumericsOptions
from .paths import pair_paths
from .result import WAY_NAMES, WAYS, NumericsResult, num_to_json
from .worker import WorkerStartError
from .verdict import FAILED_VERDICTS, Judgement, Tolerance, WayRun, judge, measure_tolerance

FABRICS = ("cuda", "cpu", "sim")
#: Seconds a way may run before it counts as hung (real fabrics; excludes worker start-up).
DEFAULT_TIMEOUT_S = 120.0
LOSSES_CSV = "numerics_losses.csv"

Pair = Tuple[int, int]
TransportFactory = Callable[[int, int], Any]

BN_EXPECTED = ("BatchNorm statistics are computed per replica on half the batch under "
               "DataParallel and DDP (without SyncBatchNorm), so they differ from one GPU by design")
BN_BASELINE_NOTE = ("judged against the one-GPU job run as two half-batch passes (per-replica "
                    "BatchNorm statistics, as DataParallel and DDP compute them); the difference "
                    "from the whole-batch reference is in extra.vs_whole_batch")


class WayFailed(Exception):
    """A way produced no numbers: ``kind`` is "hang" or "crash"."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


@dataclass
class NumericsRun:
    """Everything one numerics run produced."""

    options: NumericsOptions
    fabric: str
    results: List[NumericsResult] = field(default_factory=list)
    findings: List[Finding] = field(default_factory=list)
    #: Tolerance per scope: "run" (sim/cpu: one CPU job for every pair) or "i,j" (cuda).
    tolerances: Dict[str, Tolerance] = field(default_factory=dict)
    wall_s: float = 0.0
    notes: List[str] = field(default_factory=list)

    def verdicts(self) -> Dict[Pair, Dict[str, str]]:
        """{(i, j): {way: verdict}}."""
        out: Dict[Pair, Dict[str, str]] = {}
        for r in self.results:
            out.setdefault(tuple(r.gpus), {})[r.way] = r.verdict
        return out

    def tolerance_lines(self) -> List[str]:
        return [(f"{scope}: " if scope != "run" else "") + tol.describe()
                for scope, tol in self.tolerances.items()]

    def to_json(self) -> Dict[str, Any]:
        return {"fabric": self.fabric, "options": self.options.to_json(),
                "tolerances": {k: t.to_json() for k, t in self.tolerances.items()},
                "results": [r.to_json() for r in self.results],
                "findings": [f.to_json() for f in self.findings],
                "wall_s": self.wall_s, "notes": list(self.notes)}


# ----------------------------------------------------------------------------- entry point


def run_numerics(topology: Topology, pairs: Sequence[Pair], fabric: str, description: Any = None,
                 options: Optional[NumericsOptions] = None, *,
                 transport_factory: Optional[TransportFactory] = None,
                 run_dir: Optional[str] = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                 progress: Optional[Callable[[NumericsResult], None]] = None,
                 ways: Sequence[str] = WAYS, write_events: bool = True) -> NumericsRun:
    """Run the numerics check on ``pairs`` (NVML indices) of ``topology`` over ``fabric``.

    ``description``: the sim Description (sim fabric; used to build the fault-applying transport
    when ``transport_factory`` is not given). ``transport_factory(i, j)`` returns the transport
    for a pair (see transport.py; a bench fabric ``Ops`` is accepted). ``run_dir``: the run folder
    to append ``numerics.jsonl`` (and hang/crash findings to ``events.jsonl`` when
    ``write_events``) to. ``progress(result)`` is called as each record completes.
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
            _run_sim_in_worker(topology, pairs, opts, out, sink, ways, description, timeout_s)
    elif fabric == "cpu":
        _run_cpu(topology, pairs, opts, out, sink, ways, timeout_s)
    else:
        _run_cuda(topology, pairs, opts, out, sink, ways, timeout_s)
    for pair in pairs:
        sink.pair_done(out, pair)
    _warn_if_chaotic(out)
    out.wall_s = time.perf_counter() - t0
    sink.write_losses(out.results)
    return out


# ----------------------------------------------------------------------------- sim and cpu

Train = Callable[[Pair], WayRun]


def _run_on_cpu_compute(topology, pairs, opts, out: NumericsRun, sink: "_Sink", ways, fabric: str,
                        data, dp_train: Train, ddp_train: Train,
                        dp_notes: List[str], ddp_notes: List[str]) -> None:
    """sim and cpu: every device is this CPU, so the reference (and its tolerance) is computed
    once for the run; DataParallel and DDP run per pair through ``dp_train`` / ``ddp_train``."""
    from . import ways as W

    ref, tol, per_replica = _reference_and_tolerance(
        lambda order: W.train_reference(opts, data, order=order), opts)
    out.tolerances["run"] = tol
    timing = "modeled" if fabric == "sim" else "wall"
    for pair in pairs:
        lc = str(topology.link_class(*pair))
        if "reference" in ways:
            note = (f"computed once for the run: on the {fabric} fabric one device's job is the "
                    "same CPU computation for every pair")
            sink.add(out, _reference_record(pair, lc, ref, tol, fabric, timing, opts, [note]))
        if "dp" in ways:
            _judged(out, sink, pair, lc, "dp", fabric, timing, opts, ref, tol, dp_notes,
                    lambda p=pair: dp_train(p), per_replica)
        if "ddp" in ways:
            _judged(out, sink, pair, lc, "ddp", fabric, timing, opts, ref, tol, ddp_notes,
                    lambda p=pair: ddp_train(p), per_replica)


_SIM_DDP_NOTE = ("two ranks simulated in one process; the gradient all-reduce moves through the "
                 "simulated links as NCCL's 2-rank ring would, on the path NCCL picks for the pair")


def _local_data(opts):
    import torch

    from .job import make_data

    torch.set_num_threads(1)
    return make_data(opts)


def _run_sim_in_worker(topology, pairs, opts, out, sink, ways, description, timeout_s) -> None:
    """The sim fabric as `gputopo numerics --sim` runs it: the ways that move bytes run in a worker
    process, because the sim's hang fault blocks and its crash fault aborts that process."""
    from .worker import WorkerCrash, WorkerHang, WorkerPool, payload_to_run

    pool = WorkerPool("sim", threads=1, size=1, log_dir=sink.log_dir)

    def runner(kind: str, way: str) -> Train:
        def train(pair: Pair) -> WayRun:
            job = {"kind": kind, "pair": list(pair), "description": description,
                   "opts": opts.to_json()}
            try:
                res = pool.run(job, ranks=(0,), timeout_s=timeout_s)
            except WorkerHang as e:
                raise WayFailed("hang", f"{WAY_NAMES[way]} did not finish within {timeout_s:g} s "
                                        f"(simulated transfers): {e}")
            except WorkerCrash as e:
                raise WayFailed("crash", f"{WAY_NAMES[way]} (simulated transfers): {e}")
            return payload_to_run(res.payloads[0])
        return train

    with _pool_closed(pool, out, "sim worker"):
        _run_on_cpu_compute(topology, pairs, opts, out, sink, ways, "sim", _local_data(opts),
                            runner("sim-dp", "dp"), runner("sim-ddp", "ddp"), [], [_SIM_DDP_NOTE])


@contextlib.contextmanager
def _pool_closed(pool, out, what: str):
    """Close a numerics worker pool (None: no pool was needed) when its pairs are done; on
    Ctrl-C kill the workers at once rather than wait for their job to end. The number of worker
    starts goes into the notes."""
    try:
        yield pool
    except KeyboardInterrupt:
        if pool is not None:
            pool.kill()
        raise
    finally:
        if pool is not None:
            out.notes.append(f"{what} started {pool.starts} time(s)")
            pool.close()


def _run_sim_in_process(topology, pairs, opts, out, sink, ways, factory: TransportFactory) -> None:
    """The sim fabric over caller-given transports, in this process (tests, embedding)."""
    from . import ways as W
    from .transport import OpsTransport, adapt_transport

    data = _local_data(opts)

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

    data = _local_data(opts)
    pool = WorkerPool("gloo", threads=1, log_dir=sink.log_dir) if "ddp" in ways else None

    def dp_train(pair):
        return W.train_dp_flow(opts, data, pair, LocalTransport(), copy_path="in-process",
                               collective_path="in-process")

    def ddp_train(pair):
        try:
            res = pool.run({"kind": "ddp", "opts": opts.to_json()}, ranks=(0, 1), timeout_s=timeout_s)
        except WorkerHang as e:
            raise WayFailed("hang", f"DDP (gloo) did not finish within {timeout_s:g} s: {e}")
        except WorkerCrash as e:
            raise WayFailed("crash", f"DDP (gloo): {e}")
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
    from gputopo.bench.visible import worker_cuda_map

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
        except WorkerHang as e:
            raise WayFailed("hang", f"{WAY_NAMES[way]} did not finish within {timeout_s:g} s: {e}")
        except WorkerCrash as e:
            raise WayFailed("crash", f"{WAY_NAMES[way]}: {e}")

    pool = WorkerPool("nccl", threads=1, log_dir=sink.log_dir)
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
                ref, tol, per_replica = _reference_and_tolerance(reference_run, opts)
                out.tolerances[f"{i},{j}"] = tol
                if "reference" in ways:
                    sink.add(out, _reference_record((i, j), lc, ref, tol, "cuda", "wall", opts,
                                                    [f"GPU {i} (cuda:{ci}) alone"]))
            except WayFailed as e:
                if "reference" in ways:
                    sink.fail(out, (i, j), lc, "reference", e, "cuda", "wall", opts)
            if "dp" in ways:
                def dp_run(ci=ci, cj=cj):
                    job = {"kind": "dp-cuda", "opts": opts.to_json(), "cuda_devices": [ci, cj],
                           "bus_ids": [bus_of[i], bus_of[j]]}
                    return payload_to_run(call(job, (0,), "dp").payloads[0])

                _judged(out, sink, (i, j), lc, "dp", "cuda", "wall", opts, ref, tol,
                        [f"torch.nn.DataParallel(device_ids=[{ci}, {cj}])"], dp_run, per_replica)
            if "ddp" in ways:
                def ddp_run(ci=ci, cj=cj):
                    job = {"kind": "ddp", "opts": opts.to_json(), "cuda_devices": [ci, cj],
                           "bus_ids": [bus_of[i], bus_of[j]]}
                    res = call(job, (0, 1), "ddp")
                    run = payload_to_run(res.payloads[0])
                    run.extra["rank_param_gap"] = num_to_json(
                        rank_param_gap(res.payloads[0], res.payloads[1]))
                    return run

                nccl_env = {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
                _judged(out, sink, (i, j), lc, "ddp", "cuda", "wall", opts, ref, tol,
                        [f"DistributedDataParallel over NCCL, ranks on cuda:{ci} and cuda:{cj}"]
                        + ([f"NCCL environment: {nccl_env}"] if nccl_env else []), ddp_run,
                        per_replica)


# ----------------------------------------------------------------------------- judging


def _reference_and_tolerance(train: Callable[[str], WayRun], opts: NumericsOptions):
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


def _judged(out: NumericsRun, sink: "_Sink", pair: Pair, lc: str, way: str, fabric: str,
            timing: str, opts: NumericsOptions, ref: Optional[WayRun], tol: Optional[Tolerance],
            notes: List[str], train: Callable[[], WayRun],
            per_replica: Optional[WayRun] = None) -> None:
    """Run one way, judge it, record it; a hang or crash becomes a finding and a record.

    ``per_replica`` (BatchNorm models): the baseline with per-replica statistics to judge against
    instead of ``ref``; the difference from ``ref`` is recorded as expected."""
    t0 = time.perf_counter()
    try:
        run = train()
    except WayFailed as e:
        sink.fail(out, pair, lc, way, e, fabric, timing, opts, wall_s=time.perf_counter() - t0)
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
        j = judge(run, per_replica or ref, tol)
        tol_json = tol.to_json()
        if per_replica is not None:
            whole = judge(run, ref, tol)
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


def _reference_record(pair, lc, ref: WayRun, tol: Tolerance, fabric, timing, opts, notes):
    nf = ref.first_nonfinite_step
    return NumericsResult(
        gpus=pair, link_class=lc, way="reference", verdict="nan" if nf is not None else "ok",
        step=nf, losses=ref.losses, max_rel_loss_dev=0.0, max_abs_param_diff=0.0,
        tolerance=tol.to_json(), fabric=fabric, timing=timing, wall_s=ref.wall_s,
        model=opts.model, steps=opts.steps, lr=opts.lr, batch=opts.batch,
        first_nonfinite_step=nf, nonfinite_in=ref.nonfinite_in, notes=list(notes))


# ----------------------------------------------------------------------------- findings

#: Reduction-order noise above this (relative loss) means the job itself is chaotic at these
#: settings (normal fp32 noise of this job is ~1e-7): divergence then says little.
CHAOTIC_NOISE = 1e-4


def _warn_if_chaotic(out: NumericsRun) -> None:
    for scope, tol in out.tolerances.items():
        if tol.noise_loss_rel > CHAOTIC_NOISE:
            where = "" if scope == "run" else f" (GPUs {scope})"
            out.findings.append(Finding(
                "noisy", "warning",
                f"numerics{where}: re-running the one-GPU job with only the fp32 summation order "
                f"changed moves the loss by {tol.noise_loss_rel:.1e} (relative): the job is "
                f"chaotic at lr {out.options.lr:g}, so the tolerance is wide and only NaN/Inf "
                "are meaningful; lower --lr",
                evidence={"test": "numerics", "noise_loss_rel": tol.noise_loss_rel,
                          "tolerance_loss_rel": tol.loss_rel, "lr": out.options.lr},
                remedies=["lower --lr"]))



def finding_for(rec: NumericsResult, others: Dict[str, NumericsResult]) -> Optional[Finding]:
    """The finding a record makes, if any (findings.py): nan/diverged (with way and step), hang,
    crash; with a quick cause where the ways alone tell it (the report adds the host's)."""
    f = record_finding(rec.to_json(), {way: o.to_json() for way, o in others.items()})
    if f is None or f.kind not in BAD_VERDICTS:
        return f
    other = others.get(OTHER_WAY.get(rec.way, ""))
    if rec.way == "reference":
        return dataclasses.replace(f, cause="the one-GPU job itself is unstable: the model or "
                                            "learning rate, not the interconnect",
                                   remedies=["lower --lr"])
    if rec.way == "dp" and other is not None and other.verdict == "ok":
        return dataclasses.replace(f, cause=(
            "DataParallel's raw peer copies corrupt data between these GPUs while NCCL "
            f"(DDP, path {other.paths.get('all_reduce', '?')}) trains fine: the PCIe "
            "peer-to-peer path is likely broken (IOMMU DMA translation or ACS redirect)"),
            remedies=["use DistributedDataParallel instead of DataParallel",
                      "boot with iommu=pt (or disable the IOMMU)",
                      "disable PCIe ACS redirect on the bridges between the GPUs",
                      "NCCL_P2P_DISABLE=1 keeps NCCL off the peer path"])
    return f


def step_id(pair) -> str:
    """The id of a pair's numerics in events.jsonl, like the bench's step ids ("dp:5-6")."""
    return f"numerics:{pair[0]}-{pair[1]}"


def done_pairs(run_dir) -> List[Pair]:
    """Pairs whose three ways are all recorded in ``run_dir``'s numerics.jsonl (for --resume)."""
    seen: Dict[Pair, set] = {}
    for _, rec in read_jsonl(os.path.join(str(run_dir), NUMERICS_JSONL)):
        pair = tuple(sorted(rec.get("gpus") or ()))
        if len(pair) == 2:
            seen.setdefault(pair, set()).add(rec.get("way"))
    return sorted(p for p, ways in seen.items() if set(WAYS) <= ways)


class _Sink:
    """Collects records and findings, appends them to the run folder as they complete."""

    def __init__(self, run_dir: Optional[str], write_events: bool, progress):
        self.run_dir = run_dir
        self.write_events = write_events
        self.progress = progress
        self.log_dir = os.path.join(run_dir, "workers") if run_dir else None
        if run_dir:
            os.makedirs(run_dir, exist_ok=True)

    def _append(self, name: str, doc: Dict[str, Any]) -> None:
        if self.run_dir:
            append_jsonl(os.path.join(self.run_dir, name), doc, allow_nan=False)

    def add(self, out: NumericsRun, rec: NumericsResult) -> None:
        out.results.append(rec)
        self._append(NUMERICS_JSONL, rec.to_json())
        others = {r.way: r for r in out.results if r.gpus == rec.gpus and r is not rec}
        f = finding_for(rec, others)
        if f is not None:
            out.findings.append(f)
            if f.kind in ("hang", "crash") and self.write_events:
                self._append(EVENTS_JSONL, {"type": "finding", **f.to_json(),
                                            "step": step_id(rec.gpus)})
        if rec.way == "ddp":  # a DP finding made before DDP ran can now name DDP's verdict
            self._refresh_dp_finding(out, rec)
        if self.progress is not None:
            self.progress(rec)

    def pair_done(self, out: NumericsRun, pair) -> None:
        """A "step-done" event per pair, as the bench's runner writes for its steps."""
        if not self.write_events:
            return
        failed = any(r.verdict in FAILED_VERDICTS for r in out.results if tuple(r.gpus) == tuple(pair))
        self._append(EVENTS_JSONL, {"type": "step-done", "step": step_id(pair),
                                    "status": "failed" if failed else "ok"})

    def _refresh_dp_finding(self, out: NumericsRun, ddp: NumericsResult) -> None:
        for k, f in enumerate(out.findings):
            if f.gpus == list(ddp.gpus) and f.evidence.get("way") == "dp" and f.kind in ("nan", "diverged"):
                dp = next(r for r in out.results if r.gpus == ddp.gpus and r.way == "dp")
                out.findings[k] = finding_for(dp, {"ddp": ddp}) or f

    def fail(self, out: NumericsRun, pair, lc, way, err: WayFailed, fabric, timing, opts,
             wall_s: float = 0.0) -> None:
        rec = NumericsResult(gpus=pair, link_class=lc, way=way, verdict=err.kind, step=None,
                             losses=[], max_rel_loss_dev=None, max_abs_param_diff=None,
                             tolerance={}, fabric=fabric, timing=timing, wall_s=wall_s,
                             model=opts.model, steps=opts.steps, lr=opts.lr, batch=opts.batch,
                             error=str(err))
        self.add(out, rec)

    def write_losses(self, results: List[NumericsResult]) -> None:
        """Loss curves, one row per pair, way and step (step 0 first); 'nan'/'inf' as written."""
        if not self.run_dir or not results:
            return
        with open(os.path.join(self.run_dir, LOSSES_CSV), "w", encoding="utf-8") as f:
            f.write("gpus,link_class,way,step,loss\n")
            for r in results:
                g = "-".join(map(str, r.gpus))
                for step, loss in enumerate(r.losses):
                    v = num_to_json(loss)
                    f.write(f"{g},{r.link_class},{r.way},{step},{v if isinstance(v, str) else repr(v)}\n")
