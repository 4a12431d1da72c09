"""One measuring job as `gputopo bench`, `gputopo numerics` and `gputopo check` run it.

Resolve the machine (real NVML, a simulated description, or the cpu fabric's stand-in GPUs),
run the bench steps and the DP-vs-DDP numerics into one run folder, then render the report.
This module sits above bench, numerics and report so that none of them imports another's
caller; the CLI only parses options and calls it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass
from typing import Any, Optional, Tuple

from gputopo.bench.fabrics.fabric import Fabric, default_fabric, fabric_named
from gputopo.errors import UsageError
from gputopo.model import Topology
from gputopo.runfolder.layout import WORKERS_DIR

Pair = Tuple[int, int]


@dataclass
class Machine:
    """What a job measures and with which fabric."""

    topology: Topology
    fabric: Fabric  # gputopo.bench.fabrics.fabric: what it is measured with (a name is looked up)
    description: Any = None  # gputopo.sim.description.Description for simulated machines

    def __post_init__(self) -> None:
        self.fabric = fabric_named(self.fabric)


def choose_machine(sim: Optional[str], fabric: Optional[str], cpu_gpus: int = 2) -> Machine:
    """``--sim`` picks a simulated machine (fabric sim unless told otherwise); ``--fabric cpu``
    alone gives ``cpu_gpus`` worker processes standing in for GPUs; otherwise this machine's
    GPUs through NVML (NoHardwareError, exit 3, when there are none)."""
    from gputopo.bench.api import cpu_topology

    chosen = fabric_named(fabric) if fabric else default_fabric(simulated_machine=bool(sim))
    if sim and chosen.real_gpus:  # refused here, before a run folder exists
        raise UsageError(f"--fabric cuda measures this machine's real GPUs, but --sim {sim} is a simulated "
                         "machine: drop --fabric (a --sim run uses the sim fabric) or use --fabric cpu, "
                         "or drop --sim")
    if sim:
        from gputopo.sim.description import load_description
        from gputopo.sim.scan import scan_description

        desc = load_description(sim)
        return Machine(scan_description(desc), chosen, desc)
    if chosen.simulated:
        raise UsageError("--fabric sim needs a simulated machine: add --sim NAME (see `gputopo sims`)")
    if chosen.stands_in:
        return Machine(cpu_topology(cpu_gpus), chosen)
    from gputopo.probe.scan import scan_real

    return Machine(scan_real(), chosen)


@dataclass
class JobResult:
    run_dir: Any
    bench: Any  # gputopo.bench.results.RunResult
    numerics: Any  # gputopo.numerics.NumericsRun | None
    summary: Any  # gputopo.report.summary.Summary | None
    #: Ctrl-C while the report was written: the report is incomplete, the run folder is not.
    report_cut: bool = False

    @property
    def interrupted(self) -> bool:
        return bool(self.bench.interrupted)

    def own_findings(self) -> list:
        """What the bench and the numerics found by themselves, as their results came in (the
        report's judgement of them, gputopo.report: measured_findings, numerics_record)."""
        from gputopo.report.measured_findings import bench_findings

        return bench_findings(self.bench) + self.numerics_findings()

    def numerics_findings(self) -> list:
        from gputopo.report.numerics_record import numerics_run_findings

        return numerics_run_findings(self.numerics) if self.numerics is not None else []

    def document(self) -> dict:
        """The `--json` document: the bench's per-pair figures, the analysed findings, numerics."""
        from gputopo.bench.api import bench_document

        doc = bench_document(self.bench, self.summary.findings if self.summary is not None
                             else self.own_findings())
        doc["run_dir"] = str(self.run_dir)
        if self.summary is not None:
            doc["verdict"] = self.summary.verdict
            doc["findings"] = [f.to_json() for f in self.summary.findings]
        if self.numerics is not None:
            doc["numerics"] = self.numerics.to_json(self.numerics_findings())
        return doc


def run_job(machine: Machine, bench_options, numerics_options=None, *, render: bool = True,
            progress=None) -> JobResult:
    """Run the bench steps of ``bench_options`` (possibly none: then only the run folder is
    made), then numerics on the same pairs when ``numerics_options`` is given, then render
    the report into the run folder. Every result is on disk as soon as it exists."""
    from gputopo.bench.api import run_bench
    from gputopo.runfolder.writer import errors_belong_to, run_folder_lock

    ahead = _NumericsAhead(machine, numerics_options, bench_options.timeout_s)
    with contextlib.ExitStack() as lock:  # one writer per run folder, over both phases
        lock.callback(ahead.close)  # (workers of numerics started ahead never outlive the job)
        if bench_options.resume_dir:
            lock.enter_context(run_folder_lock(bench_options.resume_dir))
        result = run_bench(machine.topology, bench_options, machine.fabric, machine.description,
                           progress=progress,
                           numerics_options=numerics_options.to_json() if numerics_options else None,
                           on_started=ahead.start, meanwhile=_import_plotting if render else None)
        nrun = None
        if numerics_options is not None and result.options.pairs and not result.interrupted:
            with errors_belong_to(result.run_dir), run_folder_lock(result.run_dir):
                nrun = _run_numerics_phase(machine, result, numerics_options, bench_options,
                                           ahead.take())
    summary = None
    report_cut = False
    with errors_belong_to(result.run_dir):
        if render:
            from gputopo.report.render import render_run

            try:
                summary = render_run(result.run_dir)
            except KeyboardInterrupt:  # run.json is final: `gputopo report DIR` writes it again
                report_cut = True
    return JobResult(result.run_dir, result, nrun, summary, report_cut)


def _import_plotting() -> None:
    """Import what the report draws and writes with (matplotlib, pandas: half a second) while
    the workers' forkserver imports torch and this process has nothing else to do; the report
    at the end, when both cores are busy, then finds them loaded. Any failure is left for the
    report itself to meet and report in its place."""
    try:
        import pandas  # noqa: F401 - results.csv

        from gputopo.report.outputs.plots import pyplot
        from gputopo.report.render import render_run  # noqa: F401 - its modules

        pyplot()
    except Exception:  # noqa: BLE001 - see the docstring
        pass


def nothing_to_resume(machine: Machine, bench_options, want_numerics: bool) -> bool:
    """Whether ``--resume`` of a run run.json calls complete has nothing left to do: every
    step's results are in the folder (or kept as a hang) and numerics, when the run had them,
    are recorded for every pair."""
    from gputopo.bench.api import resume_options
    from gputopo.bench.plan import measurement_key, plan_steps
    from gputopo.runfolder.resume import plan_resume, read_progress, read_run_info
    from gputopo.numerics.sink import done_pairs

    run_dir = bench_options.resume_dir
    if read_run_info(run_dir).get("status") != "complete":
        return False
    options = resume_options(run_dir, bench_options)
    done, measured, _ = read_progress(run_dir)
    todo, redo = plan_resume(plan_steps(machine.topology, options), done,
                             {measurement_key(m) for m in measured}, options.retry_hung)
    if todo or redo:
        return False
    if want_numerics and options.pairs:
        have = set(done_pairs(run_dir, retry_hung=options.retry_hung))
        return all(tuple(p) in have for p in options.pairs)
    return True


class _NumericsAhead:
    """On the sim fabric, the numerics' jobs (the one-GPU reference first, then DataParallel and
    DDP per pair) start when the bench's steps do and run beside them (numerics/sim_jobs.py);
    the judging stays in the numerics phase, after the bench. Why: the demo's numerics ran after the bench on cores the
    bench had left idle. Only the sim: its times are modeled, so nothing measured is perturbed
    (on real GPUs and the cpu fabric the numerics never share the machine with a measurement)."""

    def __init__(self, machine: Machine, numerics_options, timeout_s: float):
        self.machine, self.options, self.timeout_s = machine, numerics_options, timeout_s
        self.jobs: Any = None  # numerics.sim_jobs.SimJobs, once started

    def start(self, run_dir, options) -> None:
        if self.options is None or not self.machine.fabric.simulated or not options.pairs:
            return
        from gputopo.numerics.sim_jobs import SimJobs

        todo = numerics_todo(run_dir, options)
        if todo:
            self.jobs = SimJobs(self.machine.description, self.options, self.timeout_s,
                                os.path.join(str(run_dir), WORKERS_DIR), todo, ("dp", "ddp"))

    def take(self):
        jobs, self.jobs = self.jobs, None
        return jobs

    def close(self) -> None:
        """The bench was interrupted or failed, or its numerics phase never took the jobs."""
        from gputopo.workers.processes import despite_ctrl_c

        jobs = self.jobs
        if jobs is not None:
            def stop() -> None:
                jobs.kill()
                jobs.close()

            despite_ctrl_c(stop)  # every worker killed and joined, even through a Ctrl-C
            self.jobs = None


def numerics_todo(run_dir, options) -> list:
    """The pairs of ``options`` whose numerics are not yet all recorded in ``run_dir``."""
    from gputopo.numerics.sink import done_pairs

    done = set(done_pairs(run_dir, retry_hung=options.retry_hung))
    return [p for p in options.pairs if p not in done]


def _run_numerics_phase(machine: Machine, result, numerics_options, bench_options, ahead=None):
    """The numerics on the pairs of ``result`` not yet done in its run folder, with a progress
    bar (terminal only). Ctrl-C marks the bench result and run.json interrupted (the records
    already written stay; ``--resume`` redoes only the unfinished pairs) and returns None.
    ``ahead``: the sim's jobs started beside the bench (_NumericsAhead), used when they are
    this phase's."""
    from gputopo.bench.api import make_progress
    from gputopo.runfolder.writer import set_run_status
    from gputopo.numerics import run_numerics
    from gputopo.numerics.result import WAY_NAMES, WAYS

    todo = numerics_todo(result.run_dir, result.options)
    if bench_options.resume_dir:  # (stderr: --json stays a document)
        n = len(result.options.pairs)
        print(f"resuming numerics: {n - len(todo)} of {n} pair(s) done, {len(todo)} to go", file=sys.stderr)
    bar = make_progress(enabled=bool(bench_options.progress))

    def advance(rec) -> None:
        pair = ",".join(map(str, rec.gpus))
        bar.advance(1, f"numerics {pair} ({rec.link_class}) {WAY_NAMES.get(rec.way, rec.way)}")

    set_run_status(result.run_dir, "running")
    bar.start(len(todo) * len(WAYS), "numerics")
    try:
        nrun = run_numerics(machine.topology, todo, machine.fabric, machine.description,
                            numerics_options, run_dir=str(result.run_dir),
                            timeout_s=bench_options.timeout_s, progress=advance, sim_jobs=ahead)
    except KeyboardInterrupt:
        result.interrupted = True
        set_run_status(result.run_dir, "interrupted")
        return None
    except BaseException:
        set_run_status(result.run_dir, "failed")
        raise
    finally:
        bar.stop()
    set_run_status(result.run_dir, "complete")
    return nrun


def split_tests(text: Optional[str]) -> Tuple[Tuple[str, ...], bool]:
    """``--tests`` -> (bench test groups, numerics wanted?). Default and "all": everything."""
    from gputopo.bench.api import TEST_GROUPS

    known = tuple(TEST_GROUPS) + ("numerics",)
    if not text or text.strip().lower() == "all":
        return tuple(TEST_GROUPS), True
    names = [t.strip().lower() for t in text.split(",")]
    for n in names:
        if n not in known:
            raise UsageError(f"--tests: unknown test {n!r}; known: {', '.join(known)}")
    return tuple(g for g in TEST_GROUPS if g in names), "numerics" in names
