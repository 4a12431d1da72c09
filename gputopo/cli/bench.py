"""`gputopo bench` and `gputopo numerics`: measure GPU pairs into a run folder and report."""

from __future__ import annotations

import json
import sys
from typing import Optional

import click

from gputopo import SCHEMA_VERSION
from gputopo.bench.fabrics.fabric import FABRIC_NAMES
from gputopo.cli.group import cli
from gputopo.cli.history_hook import history_options
from gputopo.cli.options import console, finish, sim_option
from gputopo.cli.strict import FiniteFloat, refuse_unused
from gputopo.errors import EXIT_NO_HARDWARE, GputopoError, UsageError

#: A week: longer is no hang detection at all (and overflows the workers' timedelta).
MAX_TIMEOUT_S = 7 * 24 * 3600.0

#: What a run measures: on --resume these come from the run's run.json, never the command line.
RUN_DEFINING = ("pairs_values", "class_text", "gpus_text", "out_dir", "sizes", "tests_text",
                "preset", "self_test", "concurrent")
NUMERICS_OPTIONS = ("steps", "lr", "model", "batch", "seed")


def pair_options(f):
    """--pairs / --class / --gpus / --fabric / --sim / --json / --out / --timeout / --resume."""
    opts = [
        sim_option,
        click.option("--fabric", type=click.Choice(list(FABRIC_NAMES)), default=None,
                     help="cuda: real GPUs (default); cpu: worker processes over gloo stand in for "
                          "GPUs (honest CPU numbers); sim: the --sim machine's link model (default with --sim)."),
        click.option("--pairs", "pairs_values", multiple=True, metavar="I,J|all",
                     help="GPU pair to measure (repeatable); default all pairs."),
        click.option("--class", "class_text", metavar="CLASS",
                     help="Only pairs of this link class (NV4, NV, PIX, PXB, PHB, NODE, SYS)."),
        click.option("--gpus", "gpus_text", metavar="LIST", help="Only these GPUs, e.g. 0-3,6."),
        click.option("--cpu-gpus", type=click.IntRange(1, 64), default=None,
                     help="Stand-in GPUs for --fabric cpu without --sim [default: 2; with "
                          "--resume: as many as the run had]."),
        click.option("--timeout", "timeout_s", type=FiniteFloat(min=0.1, max=MAX_TIMEOUT_S), default=None,
                     help="Seconds a step may go without progress before it is a hang [default: 120]."),
        click.option("--out", "out_dir", type=click.Path(file_okay=False),
                     help="Run folder (default: a new timestamped folder under reports/)."),
        click.option("--resume", "resume_dir", type=click.Path(file_okay=False, exists=True),
                     help="Finish an interrupted run folder, skipping what is measured."),
        click.option("--json", "as_json", is_flag=True,
                     help="Print the results as JSON (schema_version; pairs with gpus and link_class)."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def numerics_options(f):
    opts = [
        click.option("--steps", default=None, help="Training steps per way [default: 50]."),
        click.option("--lr", default=None, help="Learning rate (stable on one GPU) [default: 0.05]."),
        click.option("--model", default=None, help="mlp (default), cnn, or cnn-bn (BatchNorm: DP differs by design)."),
        click.option("--batch", default=None, help="Global batch size, split over the two GPUs."),
        click.option("--seed", default=None, help="Seed of the synthetic data and weights."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _stand_ins(fabric) -> bool:
    """Whether the fabric named (``--fabric``'s text, run.json's; None: none) runs stand-in
    GPUs, whose number ``--cpu-gpus`` sets."""
    from gputopo.bench.fabrics.fabric import recorded_fabric

    known = recorded_fabric(fabric)
    return known is not None and known.stands_in


def refuse_ignored(resume_dir, sim, fabric, want_numerics=True) -> None:
    """Exit 2 naming options this command would ignore: what a resumed run measures (it comes
    from run.json), numerics settings without numerics, --cpu-gpus off the cpu fabric."""
    ctx = click.get_current_context()
    names = [p.name for p in ctx.command.params]
    if resume_dir:
        refuse_unused(ctx, [n for n in RUN_DEFINING + NUMERICS_OPTIONS if n in names],
                      f"with --resume (the run folder {resume_dir} says what the run measures)")
    if not want_numerics:
        refuse_unused(ctx, NUMERICS_OPTIONS, "when --tests has no numerics")
    if sim or (not _stand_ins(fabric) and not (resume_dir and fabric is None)):  # (resume: run.json's)
        refuse_unused(ctx, ("cpu_gpus",), "without --fabric cpu (or with --sim, whose machine "
                      "says how many GPUs there are)")


def numerics_options_for(resume_dir, wanted: bool, **given):
    """The numerics phase's options (None: no numerics): from the command line, or on
    ``--resume`` the run's own from its run.json (a folder from before they were recorded:
    the defaults, as that run had unless it was given others)."""
    from gputopo.errors import UsageError
    from gputopo.numerics import validate_options

    if resume_dir:
        from gputopo.runfolder.resume import read_run_info
        from gputopo.runfolder.settings import NUMERICS_KEY, saved_numerics_options

        saved = saved_numerics_options(read_run_info(resume_dir))
        if saved is None:
            return None
        if isinstance(saved, dict):
            known = ("steps", "lr", "model", "batch", "momentum", "seed", "inject_nan_at_step",
                     "inject_nan_rank")
            try:
                return validate_options(**{k: v for k, v in saved.items() if k in known})
            except UsageError as e:
                raise UsageError(f"--resume {resume_dir}: run.json {NUMERICS_KEY}: {e}") from None
    return validate_options(**given) if wanted else None


#: Why numerics needs a GPU pair (a one-GPU machine gets this line instead of a run).
ONE_GPU_WHY = ("it compares nn.DataParallel and DDP over a GPU pair with one-GPU training, and on one "
               "GPU both run the reference's own single-device step (DataParallel calls the module, "
               "DDP at world size 1 has nothing to all-reduce), so they can show nothing")
ONE_GPU_NUMERICS = f"numerics needs two GPUs and this machine has one: {ONE_GPU_WHY}; `gputopo bench` measures the GPU alone"


class OneGpuError(GputopoError):
    """A command that needs a GPU pair on a one-GPU machine (exit 3: a GPU it needs is missing)."""

    exit_code = EXIT_NO_HARDWARE


def _gpu_name(topo) -> str:
    g = topo.gpus[0]
    return f"GPU {g.nvml_index}, {g.name}" if isinstance(g.name, str) else f"GPU {g.nvml_index}"


def machine_and_options(sim, fabric, pairs_values, class_text, gpus_text, cpu_gpus, timeout_s,
                        out_dir, resume_dir, *, self_test=False, sizes=None, tests=(),
                        preset="default", concurrent=False, progress=True, alone_ok=True,
                        want_numerics=False):
    """The machine and the BenchOptions of a bench/numerics command. On a one-GPU machine bench
    measures the GPU alone (``alone_ok``) and numerics refuses in one line (OneGpuError)."""
    from gputopo.bench.api import BenchOptions, parse_gpus, parse_sizes, select_pairs
    from gputopo.errors import require_torch
    from gputopo.jobs import choose_machine

    ctx = click.get_current_context(silent=True)
    require_torch(f"gputopo {ctx.info_name if ctx else 'bench'}")  # bench, numerics, check
    if resume_dir:  # an import or a cluster run has nothing to resume (exit 2, not "no GPU")
        from gputopo.runfolder.resume import read_run_info, refuse_non_bench

        refuse_non_bench(resume_dir, read_run_info(resume_dir))
    if resume_dir and sim is None and fabric is None:
        from gputopo.runfolder.resume import read_run_info

        info = read_run_info(resume_dir)  # resume on the machine and fabric the run used
        sim_path = info.get("sim_path") or ""
        # a description file is reloaded from its path; built-in and generated machines by name
        sim = sim_path if sim_path and ":" not in sim_path else info.get("sim")
        fabric = info.get("fabric")
    if resume_dir and cpu_gpus is None and sim is None and _stand_ins(fabric):
        cpu_gpus = _stand_in_gpus(resume_dir)  # the run's --cpu-gpus
    machine = choose_machine(sim, fabric, cpu_gpus or 2)
    if concurrent and not machine.fabric.concurrent_allowed:
        from gputopo.errors import UsageError

        raise UsageError("--concurrent does nothing on the sim fabric: modeled times do not depend "
                         "on what runs beside them, and sim pairs already run side by side in "
                         "worker processes; leave it out")
    topo = machine.topology
    if len(topo.gpus) == 1 and not pairs_values and not class_text:
        if not alone_ok:
            raise OneGpuError(ONE_GPU_NUMERICS)
        if resume_dir:  # what a resumed run measures comes from its run.json
            self_test = True
        elif not self_test:  # one GPU has no pair: measure it alone, as --self does, and say so
            click.echo(f"gputopo: this machine has one GPU ({_gpu_name(topo)}): no pair to measure, "
                       "so it is measured alone (as --self: host<->GPU and on-device copies)", err=True)
            self_test = True
        if want_numerics and not resume_dir:
            click.echo(f"gputopo: numerics not run: {ONE_GPU_WHY}", err=True)
    if self_test and not pairs_values and not class_text:
        pairs, self_gpus = [], parse_gpus(gpus_text, len(topo.gpus))
    else:
        pairs = select_pairs(topo, pairs_values or None, class_text, gpus_text)
        self_gpus = parse_gpus(gpus_text, len(topo.gpus)) if self_test else []
    if machine.fabric.real_gpus:
        from gputopo.bench.visible import restrict_to_cuda_visible

        explicit = bool(pairs_values) and not any(str(v).strip().lower() == "all"
                                                  for v in pairs_values)
        pairs, self_gpus, note = restrict_to_cuda_visible(topo, pairs, self_gpus, explicit)
        if note:
            click.echo(f"gputopo: {note}", err=True)
    kw = {}
    if timeout_s is not None:
        kw["timeout_s"] = timeout_s
    opts = BenchOptions(pairs=pairs, self_gpus=self_gpus, tests=tests, preset=preset,
                        sizes_bytes=parse_sizes(sizes) if sizes else None, concurrent=concurrent,
                        out_dir=out_dir, resume_dir=resume_dir, progress=progress,
                        argv=list(sys.argv[1:]), **kw)
    return machine, opts


def _stand_in_gpus(run_dir) -> Optional[int]:
    """How many stand-in GPUs a cpu-fabric run had (its topology.json), or None if unreadable."""
    from pathlib import Path

    from gputopo.runfolder.layout import TOPOLOGY_JSON
    from gputopo.errors import InputFileError
    from gputopo.inputs import MAX_TEXT_BYTES, read_user_text

    try:
        gpus = json.loads(read_user_text(Path(run_dir) / TOPOLOGY_JSON, TOPOLOGY_JSON, MAX_TEXT_BYTES,
                                         fifo_ok=False))["gpus"]
        return len(gpus) or None
    except (InputFileError, ValueError, KeyError, TypeError):
        return None


def say_redone(job) -> None:
    """Tell the user which steps a --resume ran again and why, and which NCCL settings it set
    back to the run's (stderr: --json stays a document)."""
    from gputopo.runfolder.resume import redo_lines

    bench = getattr(job, "bench", None)
    for line in redo_lines(getattr(bench, "redone", None) or []):
        click.echo(line, err=True)
    restored = getattr(bench, "nccl_restored", None) or []
    if restored:
        click.echo("gputopo: --resume runs with the run's NCCL settings: " + "; ".join(restored),
                   err=True)


def _report(job, as_json):
    """Print the run's summary, record it in the history, and end with 130 if it was
    interrupted. A Ctrl-C here (or one that cut the report short, ``job.report_cut``) ends with
    the one line that says what the run folder holds and what to run next."""
    cut_here = False
    if not job.report_cut:
        try:
            _print_and_record(job, as_json)
        except KeyboardInterrupt:
            cut_here = True
    if not (job.interrupted or job.report_cut or cut_here):
        return
    cmd = click.get_current_context().info_name or "bench"
    if job.interrupted:
        click.echo(f"gputopo: interrupted: the run folder {job.run_dir} holds a valid partial "
                   f"run; finish it with `gputopo {cmd} --resume {job.run_dir}`", err=True)
    elif job.report_cut:
        click.echo(f"gputopo: interrupted while the report was written: the run folder "
                   f"{job.run_dir} holds a complete run; write its report with "
                   f"`gputopo report {job.run_dir}`", err=True)
    else:  # after the report, while its summary was printed or the history recorded
        click.echo(f"gputopo: interrupted: the run folder {job.run_dir} holds a complete run and "
                   f"its report", err=True)
    finish(130)


def _print_and_record(job, as_json) -> None:
    from gputopo.cli.history_hook import after_run, record_exit_code

    say_redone(job)
    if as_json:
        click.echo(json.dumps({"schema_version": SCHEMA_VERSION, **job.document()}, indent=2))
    else:
        from gputopo.bench.api import render_summary
        from gputopo.report.outputs.terminal import print_summary

        c = console()
        if job.bench.measurements:  # (hang/crash findings show in the report part below)
            render_summary(job.bench, c, findings=job.own_findings(), show_findings=False)
        if job.numerics is not None:
            from gputopo.numerics.summary import summary_lines

            for line in summary_lines(job.numerics):
                c.print(line, markup=False, highlight=False)
        print_summary(job.summary, c)  # ends with the report's path
    ctx = click.get_current_context()
    if job.interrupted:  # recorded as interrupted (never a baseline); the exit code stays 130
        record_exit_code(job.run_dir, ctx.info_name or "bench", ctx.params.get("sim"))
    else:
        after_run(job.run_dir, ctx.info_name or "bench", ctx.params.get("sim"))


@cli.command()
@pair_options
@click.option("--self", "self_test", is_flag=True,
              help="Also measure each GPU alone: host->GPU, GPU->host, on-device copies.")
@click.option("--sizes", metavar="LIST", help="Message sizes, e.g. 1M,64M,256M (K/M/G binary).")
@click.option("--tests", "tests_text", metavar="LIST",
              help="p2p, dp, collectives, numerics (comma-separated) [default: all].")
@click.option("--quick", "preset", flag_value="quick", help="Few sizes and samples: seconds per pair.")
@click.option("--full", "preset", flag_value="full", help="Many sizes and samples: thorough.")
@click.option("--concurrent", is_flag=True,
              help="Run disjoint pairs at once (faster sweep; perturbs bandwidth, and says so).")
@click.option("--retry-hung", is_flag=True,
              help="With --resume: run the steps that recorded a hang again (else a hang is "
                   "their result).")
@numerics_options
@history_options
def bench(sim, fabric, pairs_values, class_text, gpus_text, cpu_gpus, timeout_s, out_dir,
          resume_dir, as_json, self_test, sizes, tests_text, preset, concurrent, retry_hung,
          steps, lr, model, batch, seed):
    """Measure GPU pairs: peer copies (GB/s each way, both at once, staged through host,
    latency, bit-exact check), DataParallel's scatter/gather/broadcast/reduce, collectives
    (algbw/busbw as nccl-tests) and DP-vs-DDP-vs-one-GPU training numerics.

    \b
    Examples:
      gputopo bench --sim seed-8gpu --pairs 5,6  # the NaN story on a simulated machine
      gputopo bench --pairs 5,6                  # one pair of this machine
      gputopo bench --class SYS --tests p2p,numerics
      gputopo bench --fabric cpu --quick         # no GPU: real processes over gloo
    """
    from gputopo.jobs import nothing_to_resume, run_job, split_tests

    if retry_hung and not resume_dir:
        raise UsageError("--retry-hung applies only with --resume DIR (a new run has no hang)")
    groups, want_numerics = split_tests(tests_text)
    if resume_dir:  # the tests the run was started with, never this command line's defaults
        from gputopo.runfolder.resume import read_run_info, refuse_non_bench, resumed_tests

        refuse_ignored(resume_dir, sim, fabric)  # what only run.json may say, before reading it

        info = read_run_info(resume_dir)
        refuse_non_bench(resume_dir, info)
        groups, want_numerics = resumed_tests(info)
    refuse_ignored(resume_dir, sim, fabric, want_numerics)
    nopts = numerics_options_for(resume_dir, want_numerics, steps=steps, lr=lr, model=model,
                                 batch=batch, seed=seed)
    machine, opts = machine_and_options(sim, fabric, pairs_values, class_text, gpus_text, cpu_gpus,
                                        timeout_s, out_dir, resume_dir, self_test=self_test,
                                        sizes=sizes, tests=groups, preset=preset or "default",
                                        concurrent=concurrent, progress=not as_json,
                                        want_numerics=want_numerics)
    opts.retry_hung = retry_hung
    if resume_dir and nothing_to_resume(machine, opts, want_numerics):
        refuse_damaged_done(resume_dir)
        click.echo(f"gputopo: --resume {resume_dir}: the run is complete, nothing to do "
                   f"(`gputopo report {resume_dir}` shows it)", err=True)
        return
    _report(run_job(machine, opts, nopts), as_json)


def refuse_damaged_done(resume_dir) -> None:
    """Every step of the run is done, yet its folder cannot be read as a whole run (a result
    with impossible values, topology.json or events.jsonl gone): "complete, nothing to do" with
    exit 0 read as a fix while every gate on the folder still fails. Exit 2 saying why."""
    from gputopo.report.run_folder import load_run

    problems = load_run(resume_dir).problems
    if problems:
        raise UsageError(f"--resume {resume_dir}: every step is done, but the folder cannot be read as a "
                         f"whole run ({problems[0]}); a resume redoes only steps it finds missing: "
                         "measure again into a new folder")


@cli.command()
@pair_options
@numerics_options
@history_options
def numerics(sim, fabric, pairs_values, class_text, gpus_text, cpu_gpus, timeout_s, out_dir,
             resume_dir, as_json, steps, lr, model, batch, seed):
    """Train the same small job three ways on each pair: one GPU (reference), nn.DataParallel
    over the pair, and DDP with 2 processes; report the loss per step, the first NaN/Inf step,
    the deviation from the reference against a measured fp32 tolerance, and a verdict.

    \b
    Examples:
      gputopo numerics --sim seed-8gpu --pairs 5,6 --pairs 6,7  # DP NaN on 5,6, fine on 6,7
      gputopo numerics --pairs 5,6 --steps 100
    """
    from gputopo.jobs import run_job

    refuse_ignored(resume_dir, sim, fabric)
    nopts = numerics_options_for(resume_dir, True, steps=steps, lr=lr, model=model, batch=batch,
                                 seed=seed)
    machine, opts = machine_and_options(sim, fabric, pairs_values, class_text, gpus_text, cpu_gpus,
                                        timeout_s, out_dir, resume_dir, tests=(), progress=not as_json,
                                        alone_ok=False)
    _report(run_job(machine, opts, nopts), as_json)
