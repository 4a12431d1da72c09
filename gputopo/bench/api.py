"""The bench layer's entry point for the CLI: :func:`run_bench` and what it needs.

    from gputopo.bench.api import (BenchOptions, run_bench, select_pairs, parse_sizes,
                                   parse_tests, parse_gpus, parse_pairs, select_class_pairs,
                                   bench_document, render_summary, make_progress)

``run_bench(topology, options, fabric, description)`` plans the steps, writes the run folder
(run.json, topology.json, measurements.jsonl line by line, events.jsonl, workers/*.log), runs
the steps in worker processes and returns a :class:`RunResult` with every measurement and the
steps that hung or crashed (StepFailure facts); gputopo.report judges them
(report/measured_findings.py's ``bench_findings``).
It never raises for a hung or crashed step; it raises UsageError for bad options and
NoHardwareError when ``--fabric cuda`` finds no usable CUDA device. Ctrl-C returns a result
with ``interrupted=True`` (the folder stays a valid partial run; ``--resume`` finishes it).
Nothing here imports torch; only worker processes do.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Dict, List, Optional, Union

from gputopo.errors import UsageError
from gputopo.model import Finding, Measurement, Topology, is_value
from gputopo.model.step_failure import STEP_FAILED, StepFailure
from gputopo.runfolder.layout import APPENDED, EVENTS_JSONL, LOSSES_CSV
from gputopo.runfolder.reader import read_jsonl
from gputopo.runfolder.resume import (clear_cut_lines, plan_resume, read_progress, read_run_info,
                                      refuse_non_bench, resume_line)
from gputopo.runfolder.settings import NCCL_ENV_KEY, NUMERICS_KEY, nccl_settings, use_saved_nccl_settings
from gputopo.runfolder.writer import RunLog, claim_out_dir, errors_belong_to, new_run_dir, run_folder_lock
from gputopo.writable import check_writable_dir, refuse_odd_outputs

from .fabrics.fabric import Fabric, fabric_named, fill_figures_of
from .options import (FABRICS, PRESETS, TEST_GROUPS, BenchOptions, Preset, all_pairs,
                      format_size, parse_fabric, parse_gpus, parse_link_class, parse_pairs,
                      parse_size, parse_sizes, parse_tests, select_class_pairs, select_pairs)
from gputopo.workers.peer_mappings import PEER_LIMIT, PEER_LIMIT_KEY, nvswitch_gpus, peer_limit_record
from .plan import count_cases, measurement_key, plan_steps
from .results import RunResult, bench_document
from .runner import NullProgress, Runner
from .summary import make_progress, render_summary
from .worker_env import WORKER_ENV_KEY, override_line, worker_env

__all__ = [
    "BenchOptions", "FABRICS", "PRESETS", "Preset", "RunResult", "TEST_GROUPS", "all_pairs",
    "bench_document", "cpu_topology", "format_size", "make_progress", "parse_fabric",
    "parse_gpus", "parse_link_class", "parse_pairs", "parse_size", "parse_sizes", "parse_tests",
    "read_run_info", "render_summary", "resume_options", "run_bench", "select_class_pairs",
    "select_pairs",
]

#: Options taken from the command line even when resuming (the rest come from run.json).
_RUNTIME_FIELDS = ("timeout_s", "progress", "resume_dir", "sim_workers", "argv", "retry_hung")


def resume_options(run_dir, current: Optional[BenchOptions] = None) -> BenchOptions:
    """The options a run folder was started with, for ``--resume`` (UsageError if not a run)."""
    info = read_run_info(run_dir)
    try:
        stored = BenchOptions.from_json(info.get("options") or {})
    except (TypeError, ValueError) as e:
        raise UsageError(f"--resume {run_dir}: run.json has unreadable options ({e})") from None
    if current is not None:
        stored = replace(stored, **{k: getattr(current, k) for k in _RUNTIME_FIELDS})
    stored.resume_dir = str(run_dir)
    return stored


def cpu_topology(n_gpus: int = 2, machine: str = "cpu-fabric") -> Topology:
    """A machine of ``n_gpus`` stand-in "GPUs" for ``--fabric cpu`` without ``--sim``: one
    worker process each; every pair is PHB (through the host, which is what the bytes cross)."""
    from gputopo.model import Gpu, LinkClass, Pair

    if n_gpus < 1:
        raise UsageError("--fabric cpu needs at least one stand-in GPU")
    return Topology(gpus=[Gpu(k) for k in range(n_gpus)],
                    pairs=[Pair((i, j), LinkClass("PHB")) for i in range(n_gpus)
                           for j in range(i + 1, n_gpus)],
                    source="cpu", simulated=False, machine=machine)


def _validate(topology: Topology, options: BenchOptions) -> None:
    n = len(topology.gpus)
    known = {p.gpus for p in topology.pairs}
    for p in options.pairs:
        if p not in known:
            raise UsageError(f"--pairs {p[0]},{p[1]}: no such pair on this machine ({n} GPUs)")
    for g in options.self_gpus:
        if g not in topology.indices:
            raise UsageError(f"--self: GPU {g} does not exist on this machine ({n} GPUs)")
    if not options.pairs and not options.self_gpus:
        raise UsageError("nothing to measure: no GPU pair selected and no --self")
    for t in options.tests:
        if t not in TEST_GROUPS:
            raise UsageError(f"--tests: unknown test {t!r}; known: {', '.join(TEST_GROUPS)}")
    if options.timeout_s <= 0:
        raise UsageError("--timeout must be positive")


def _check_memory(topology: Topology, options: BenchOptions, fabric: Union[str, Fabric]) -> None:
    """Refuse sizes that cannot fit before anything runs (memory_check.py)."""
    fabric = fabric_named(fabric)
    from .memory_check import check_sizes_fit, host_available_bytes

    eff = options.effective
    largest = max(tuple(eff.sizes_bytes) + tuple(eff.latency_sizes_bytes))
    gpu_free = None
    if fabric.memory == "gpu":
        from gputopo.probe.gpu_memory import gpu_free_bytes

        used = {g for p in options.pairs for g in p} | set(options.self_gpus)
        gpu_free = gpu_free_bytes(topology, sorted(used))
    workers = fabric.pool_size(options.sim_workers)
    check_sizes_fit(largest, fabric, workers, host_free=host_available_bytes(),
                    gpu_free=gpu_free)


def worker_config(topology: Topology, fabric: Union[str, Fabric], description, timeout_s: float,
                   threads: int) -> dict:
    """What every worker process starts from. Its environment is this process's, with the
    variables that change what is timed set on the cuda fabric (worker_env.py)."""
    fabric = fabric_named(fabric)
    gpus = {}
    for g in topology.gpus:
        gpus[g.nvml_index] = {
            "pci_bus_id": g.pci_bus_id if is_value(g.pci_bus_id) else None,
        }
    env = worker_env(os.environ)[0] if fabric.real_gpus else dict(os.environ)
    # the fabric's name (a worker rebuilds the Fabric through fabrics/fabric.py's fabric_named)
    return {"fabric": fabric.name, "description": description if fabric.simulated else None,
            "env": env, "parent_pid": os.getpid(), "threads": threads,
            "gpus": gpus, "pg_timeout_s": max(60.0, 2 * timeout_s)}


def run_bench(topology: Topology, options: BenchOptions, fabric: Union[str, Fabric], description=None,
              progress=None, numerics_options: Optional[dict] = None,
              on_started: Optional[Callable[[Path, BenchOptions], None]] = None,
              meanwhile: Optional[Callable[[], None]] = None) -> RunResult:
    """Measure ``options.pairs`` (and ``options.self_gpus``) of ``topology`` on ``fabric``.

    ``description`` is the simulated machine (gputopo.sim.description.Description) and is
    required for ``fabric="sim"``. ``numerics_options`` (the numerics phase's, as JSON; None:
    no numerics) and the NCCL settings go into run.json; a resume runs with the saved NCCL ones.
    ``on_started(run_dir, options)`` is called once the run folder and the options (a resume's
    from run.json) are settled, just before the steps run (jobs.py starts the sim's numerics
    there, beside them). ``meanwhile()``, when there are steps to run, is called once the
    worker processes' forkserver has been started and is importing torch (a second or so on
    one core, while this process would only wait): jobs.py imports what the report will need
    there. ``progress`` is a hook with start/advance/stop (see
    :func:`make_progress`); None shows a rich progress bar when ``options.progress`` is true
    and stdout is a terminal.
    """
    t0 = time.monotonic()
    fabric = fabric_named(fabric)
    if fabric.simulated and description is None:
        raise UsageError("--fabric sim needs a simulated machine: use --sim NAME")
    prior_done: Dict[str, str] = {}
    prior_ms: List[Measurement] = []
    prior_findings: List[Finding] = []
    prior_failures: List[StepFailure] = []
    cut_notes: List[str] = []
    with contextlib.ExitStack() as lock:
        return _run_bench(topology, options, fabric, description, progress, t0, lock,
                          prior_done, prior_ms, prior_findings, prior_failures, cut_notes,
                          numerics_options, on_started, meanwhile)


def _prior_failures(run_dir) -> List[StepFailure]:
    """The bench step failures an earlier part of a resumed run recorded in its events.jsonl
    (a numerics way's failure there is the numerics' result, not a step of the bench)."""
    out = []
    for _, rec in read_jsonl(Path(run_dir) / EVENTS_JSONL):
        if rec.get("type") == STEP_FAILED:
            with contextlib.suppress(KeyError, TypeError, ValueError):
                failure = StepFailure.from_event(rec)
                if not failure.numerics:
                    out.append(failure)
    return out


def _run_bench(topology, options, fabric, description, progress, t0, lock,
               prior_done, prior_ms, prior_findings, prior_failures, cut_notes, numerics_options,
               on_started=None, meanwhile=None) -> RunResult:
    """run_bench's body, with ``lock`` (an ExitStack) holding the run folder's write lock."""
    nccl_restored: List[str] = []
    if options.resume_dir:
        resume_dir = options.resume_dir
        info = read_run_info(options.resume_dir)
        if isinstance(info.get(NCCL_ENV_KEY), dict):  # the workers inherit os.environ
            nccl_restored = use_saved_nccl_settings(info[NCCL_ENV_KEY])
        if info.get("fabric") != fabric.name:
            raise UsageError(f"--resume {options.resume_dir}: that run used --fabric "
                             f"{info.get('fabric')}, not {fabric}")
        if info.get("machine") and topology.machine and info["machine"] != topology.machine:
            raise UsageError(f"--resume {options.resume_dir}: that run measured machine "
                             f"{info['machine']!r}, not {topology.machine!r}")
        refuse_non_bench(options.resume_dir, info)
        options = resume_options(resume_dir, options)
        run_dir = Path(resume_dir)  # (resume_options keeps it)
        check_writable_dir(run_dir, "--resume")  # it appends to the folder
        # a FIFO among the files it appends to: no internal error (they are truncated after their
        # last whole line) nor an append that waits forever
        refuse_odd_outputs(run_dir, APPENDED + (LOSSES_CSV,), "--resume", "a run appends to")
        lock.enter_context(run_folder_lock(run_dir))  # one writer per run folder
        cut_notes = clear_cut_lines(run_dir)
        prior_done, prior_ms, prior_findings = read_progress(run_dir)  # (findings: older runs')
        fill_figures_of(prior_ms)  # a folder written before figures_of: from its fabric
        prior_failures = _prior_failures(run_dir)
    _validate(topology, options)
    if fabric.real_gpus:  # never measure a GPU CUDA cannot see (the CLI has left such pairs out)
        from .visible import restrict_to_cuda_visible

        restrict_to_cuda_visible(topology, options.pairs, options.self_gpus, explicit_pairs=True)
    _check_memory(topology, options, fabric)
    if not options.resume_dir:
        run_dir = (claim_out_dir(options.out_dir) if options.out_dir
                   else new_run_dir(options.reports_dir, topology.machine or "machine"))
        lock.enter_context(run_folder_lock(run_dir))

    simulated = bool(topology.simulated or fabric.simulated)
    steps = plan_steps(topology, options)
    total_cases = count_cases(steps)  # (plan_resume trims the steps to their missing cases)
    todo, redo = plan_resume(steps, prior_done, {measurement_key(m) for m in prior_ms},
                             retry_hung=options.retry_hung)
    if options.resume_dir:  # before anything runs: which run this continues, how far it got
        print(resume_line(str(run_dir), topology.machine, fabric.name, simulated, options.tests,
                          options.self_gpus, total_cases, count_cases(todo)), file=sys.stderr)
    redone_ids = {r.step for r in redo}  # their earlier failures are superseded
    prior_findings = [f for f in prior_findings if (f.evidence or {}).get("step") not in redone_ids]
    prior_failures = [f for f in prior_failures if f.step not in redone_ids]
    concurrent = bool(options.concurrent and fabric.concurrent_allowed)

    log = RunLog(run_dir)
    eff = options.effective
    env_record = worker_env(os.environ)[1] if fabric.real_gpus else None
    line = override_line(env_record or {})
    if line:
        print(line, file=sys.stderr)
    log.start(fabric=fabric.name, simulated=simulated, machine=topology.machine,
              options=options.to_json(), topology=topology, argv=options.argv,
              sim=(getattr(description, "name", None) if description is not None else None),
              sim_path=(str(getattr(description, "path", "") or "") or None)
              if description is not None else None,
              concurrent=concurrent, steps=len(steps),
              **{NCCL_ENV_KEY: nccl_settings(), NUMERICS_KEY: numerics_options,
                 WORKER_ENV_KEY: env_record,
                 PEER_LIMIT_KEY: peer_limit_record(topology) if fabric.real_gpus else None})
    for note in cut_notes:
        log.event({"type": "cut-line-cleared", "note": note})
    for r in redo:
        log.event(r.to_json())
    pool = fabric.pool_size(options.sim_workers)
    # One torch thread per worker: workers already run side by side, and OpenMP's spinning
    # threads are badly hurt by any other load on the cores (10x slower copies measured).
    threads = 1
    if progress is None:
        progress = make_progress(enabled=options.progress) if options.progress else NullProgress()
    runner = Runner(
        fabric=fabric, log=log, timeout_s=options.timeout_s, concurrent=concurrent,
        pool_size=pool, progress=progress, peer_limit=PEER_LIMIT if fabric.real_gpus else None,
        peer_exempt=nvswitch_gpus(topology) if fabric.real_gpus else (),
        config=worker_config(topology, fabric, description, options.timeout_s, threads),
        step_settings={"warmup": eff.warmup, "samples": eff.samples,
                       "latency_repeat": eff.latency_repeat})
    status = "failed"
    progress.start(count_cases(todo), f"bench {topology.machine or ''}".strip())
    try:
        with errors_belong_to(run_dir):
            if on_started is not None:
                on_started(run_dir, options)
            runner.run(todo, meanwhile=meanwhile)
        status = "interrupted" if runner.interrupted else "complete"
    finally:
        progress.stop()
        log.finish(status, steps_run=runner.steps_done,
                   elapsed_s=round(time.monotonic() - t0, 3))

    # Latest record per measurement key (a resumed run may have re-measured a partial step).
    merged = {}
    for m in list(prior_ms) + runner.measurements:
        merged[measurement_key(m)] = m
    measurements = list(merged.values())
    return RunResult(
        run_dir=run_dir, topology=topology, fabric=fabric.name, simulated=simulated,
        machine=topology.machine, options=options, measurements=measurements,
        failures=list(prior_failures) + runner.failures, recorded_findings=list(prior_findings),
        interrupted=runner.interrupted, concurrent=concurrent,
        elapsed_s=time.monotonic() - t0, steps_total=len(steps), steps_run=runner.steps_done,
        steps_skipped=len(steps) - len(todo), worker_pids=list(runner.worker_pids),
        redone=redo, nccl_restored=nccl_restored)


