"""`gputopo check`: the CI hardware-acceptance gate (spec file, exit codes, JUnit XML)."""

from __future__ import annotations

import json
import os

import click

from gputopo.cli.bench import (machine_and_options, numerics_options, numerics_options_for,
                               pair_options, refuse_ignored, say_redone)
from gputopo.cli.group import cli
from gputopo.cli.history_hook import history_options, record_exit_code
from gputopo.cli.options import finish
from gputopo.cli.strict import FiniteFloat, refuse_unused
from gputopo.errors import UsageError
from gputopo.runfolder.layout import (EVENTS_JSONL, HISTORY_FINDINGS_JSON, MEASUREMENTS_JSONL, NUMERICS_JSONL,
                                      RUN_JSON, TOPOLOGY_JSON)
from gputopo.writable import check_writable_file


def _spec_path(spec: str) -> str:
    """The spec file ``--spec`` names. A path has a `/` or ends in `.toml`; a bare name is a
    shipped spec (pcie-box, nvswitch-8gpu), so a file ./pcie-box can never shadow one."""
    from gputopo.check.spec import shipped_spec_names, shipped_spec_path

    if _is_spec_path(spec):
        stem = os.path.basename(spec)[:-5] if spec.endswith(".toml") else None
        if stem in shipped_spec_names() and not os.path.exists(spec):
            raise UsageError(f"--spec {spec}: no such file; the shipped spec is --spec {stem}")
        return spec  # load_spec reports a missing or unreadable file (exit 2)
    if spec in shipped_spec_names():
        return str(shipped_spec_path(spec))
    raise UsageError(f"--spec {spec}: no shipped spec of that name (shipped: "
                     f"{', '.join(shipped_spec_names())}); a spec file is given as a path with "
                     "a / or ending in .toml, e.g. ./my-spec.toml")


def _is_spec_path(spec: str) -> bool:
    return "/" in spec or os.sep in spec or spec.endswith(".toml")


#: The options that only matter when check measures a new run (no RUN_DIR).
MEASURING = ("sim", "fabric", "pairs_values", "class_text", "gpus_text", "cpu_gpus", "timeout_s",
             "out_dir", "resume_dir", "preset", "steps", "lr", "model", "batch", "seed")


@cli.command()
@click.argument("run_dir", required=False, type=click.Path(file_okay=False, exists=True))
@click.option("--spec", "spec", metavar="FILE|NAME",
              help="Acceptance spec (TOML), or a shipped one: pcie-box, nvswitch-8gpu.")
@click.option("--junit", "junit_file", type=click.Path(dir_okay=False),
              help="Write JUnit XML: one testcase per rule and pair, failures with evidence.")
@click.option("--init", "init", is_flag=True,
              help="Write --spec from a known-good run (--from DIR): its topology and measured figures minus --margin.")
@click.option("--from", "from_dir", type=click.Path(file_okay=False, exists=True), help="The known-good run for --init.")
@click.option("--margin", type=FiniteFloat(0, 0.9), default=0.2, show_default=True,
              help="--init: how far below the baseline's figures a run may fall.")
@click.option("--force", is_flag=True, help="--init: accept a baseline run that has error findings.")
@click.option("--quick", "preset", flag_value="quick", help="When measuring: few sizes and samples.")
@click.option("--full", "preset", flag_value="full", help="When measuring: many sizes and samples.")
@pair_options
@numerics_options
@history_options
def check(run_dir, spec, junit_file, init, from_dir, margin, force, preset,
          sim, fabric, pairs_values, class_text, gpus_text, cpu_gpus, timeout_s, out_dir,
          resume_dir, as_json, steps, lr, model, batch, seed):
    """Judge a run against an acceptance spec: exit 0 pass, 1 fail, 2 bad spec/usage,
    3 no GPU. Without RUN_DIR the bench (with numerics) runs first, with the given options.

    \b
    Examples:
      gputopo check --spec pcie-box --sim seed-8gpu --quick      # exits 1: corruption on NODE/SYS
      gputopo check --spec acceptance.toml reports/20261122-101500-node07 --junit gate.xml
      gputopo check --init --from reports/<good run> --spec fleet.toml
    """
    if not spec:
        raise UsageError("--spec FILE is required (or a shipped spec name: pcie-box, nvswitch-8gpu)")
    ctx = click.get_current_context()
    if init:
        refuse_unused(ctx, ("junit_file", "as_json", *MEASURING), "with --init (it writes a spec "
                      "from --from's run, measuring nothing)")
        if run_dir:
            raise UsageError(f"RUN_DIR {run_dir} is ignored with --init; give the known-good run "
                             "as --from DIR")
    else:
        refuse_unused(ctx, ("from_dir", "margin", "force"), "without --init")
        if run_dir:
            refuse_unused(ctx, MEASURING, f"when judging the run folder {run_dir} (measuring "
                          "options apply only without RUN_DIR)")
    if init:
        if not _is_spec_path(spec):  # bare names are shipped specs: never write ./pcie-box
            raise UsageError(f"--init --spec {spec}: give the file to write as a path with a / "
                             f"or ending in .toml (e.g. {spec}.toml); bare names are the "
                             "shipped specs")
        if not from_dir:
            raise UsageError("--init needs --from DIR, a known-good run folder")
        from gputopo.check.init_spec import write_init_spec

        path = write_init_spec(from_dir, spec, margin=margin, force=force)
        click.echo(f"wrote {path} from {from_dir} (margin {margin:.0%}); check a run with "
                   f"`gputopo check --spec {path} DIR`")
        return
    if junit_file:  # before measuring: a gate whose report cannot be written is no gate
        check_writable_file(junit_file, "--junit")
        if run_dir:
            refuse_run_file(junit_file, run_dir)
    spec_path = _spec_path(spec)
    from gputopo.check.spec import load_spec

    loaded = load_spec(spec_path)  # a bad spec fails (exit 2) before any measuring
    if run_dir is None:
        if (loaded.cluster_min_inter_gbps is not None or loaded.cluster_nodes_alike
                or loaded.cluster_no_slow_node):
            raise UsageError(f"--spec {spec}: its [cluster] table judges a `gputopo cluster` run; "
                             "check measures a bench run here: use a spec without [cluster]")
        from gputopo.jobs import run_job

        refuse_ignored(resume_dir, sim, fabric)
        nopts = numerics_options_for(resume_dir, True, steps=steps, lr=lr, model=model,
                                     batch=batch, seed=seed)
        machine, opts = machine_and_options(sim, fabric, pairs_values, class_text, gpus_text,
                                            cpu_gpus, timeout_s, out_dir, resume_dir,
                                            tests=("p2p", "dp", "collectives"),
                                            preset=preset or "default", progress=not as_json,
                                            want_numerics=True)
        job = run_job(machine, opts, nopts)
        say_redone(job)
        run_dir = str(job.run_dir)
        if job.report_cut and not job.interrupted:  # complete, the report cut: no verdict yet
            click.echo(f"gputopo: interrupted while the report was written: no verdict; the run "
                       f"folder {run_dir} holds a complete run; judge it with "
                       f"`gputopo check --spec {spec} {run_dir}`", err=True)
            finish(130)
        if job.interrupted:  # a partial run never passes (run.complete), but CI gets its JUnit
            if junit_file:
                _judge(spec_path, run_dir, junit_file)
            click.echo(f"gputopo: interrupted: no verdict; the run folder {run_dir} holds a valid "
                       f"partial run; finish it with `gputopo bench --resume {run_dir}`, then "
                       f"`gputopo check --spec {spec} {run_dir}`"
                       + (f" (JUnit XML of the partial run: {junit_file})" if junit_file else ""),
                       err=True)
            finish(130)
    # Recorded first, so the folder holds what the history says about it (history_findings.json)
    # when it is judged: `check` then reads the same drift / counter-growth findings whether it
    # measured the run or judges a folder recorded before. A database problem is said here and
    # ends the command with exit 2 after the verdict.
    recording = record_exit_code(run_dir, "check", sim)
    verdict = _judge(spec_path, run_dir, junit_file, sim)
    if as_json:
        click.echo(json.dumps(verdict.to_json(), indent=2))
    else:
        click.echo(verdict.text())
        if junit_file:
            click.echo(f"JUnit XML: {junit_file}")
    finish(recording or verdict.exit_code)


#: Files a run folder holds (its raw data and the report's outputs): --junit never writes them.
RUN_FILES = (RUN_JSON, TOPOLOGY_JSON, MEASUREMENTS_JSONL, EVENTS_JSONL, NUMERICS_JSONL,
             "summary.json", "report.md", "report.html", "results.csv", "cluster.json",
             HISTORY_FINDINGS_JSON)


def refuse_run_file(junit_file, run_dir) -> None:
    """--junit must not write over a file of the run folder it judges (its run.json is the
    run's own record: overwriting it loses data). One line, exit 2."""
    target = os.path.realpath(junit_file)
    folder = os.path.realpath(run_dir)
    if os.path.dirname(target) == folder and (os.path.exists(target)
                                               or os.path.basename(target) in RUN_FILES):
        raise UsageError(f"--junit {junit_file}: that is a file of the run folder {run_dir}; "
                         "write the JUnit XML elsewhere (e.g. --junit gate.xml)")


def _judge(spec_path, run_dir, junit_file, sim=None):
    """Judge ``run_dir`` against the spec and write the JUnit XML when asked; the verdict."""
    from gputopo.check.verdict import run_check

    if junit_file:
        refuse_run_file(junit_file, run_dir)

    verdict = run_check(spec_path, run_dir)
    if verdict.spec.history_fraction is not None:  # [history]: against this machine's baseline
        from gputopo.cli.history_hook import history_outcomes

        verdict.outcomes += history_outcomes(verdict.spec, verdict.summary, sim)
    if junit_file:
        from gputopo.check.junit import write_junit

        write_junit(verdict, junit_file)
    return verdict
