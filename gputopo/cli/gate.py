"""`gputopo gate`: do the GPUs a job is about to get work together, within seconds, and if not,
which GPU or link to take out? Answered in the terms of whoever asks (--as json | npd | nagios |
slurm-prolog); every way out speaks the dialect, as `health` does (docs/fleet.md).

The flow: the scan (NVML), the GPU set (--gpus / --allocated: gputopo/fleet/allocation.py), the
time model's plan within --budget (fleet/gate_time.py), the copies through the bench's worker
pool (bench/gate_copies.py), the verdict (fleet/gate.py), its words (fleet/gate_output.py), the
verdict kept in the state folder (fleet/state.py). gate never calls a Slurm command: a prolog
must not, and Slurm drains the node itself on a prolog's non-zero exit.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional

import click

from gputopo.bench.fabrics.fabric import FABRIC_NAMES
from gputopo.cli.group import cli
from gputopo.cli.history_hook import history_options
from gputopo.cli.options import finish, sim_option
from gputopo.cli.tracebacks import could_not_run_words
from gputopo.cli.strict import DialectCommand, FiniteFloat, raw_option, refuse_unused
from gputopo.console import clip, printable
from gputopo.errors import EXIT_USAGE, GputopoError, UsageError
from gputopo.fleet.dialects import GATE_BUDGET_S, could_not_run_code, dialects_of, gate_exit_code

STATE_ENV = "GPUTOPO_STATE_DIR"
GATE_DIALECTS = dialects_of("gate")
#: The size of each gate copy: large enough that an NVLink pair's rate stands clear of PCIe's,
#: small enough for 28 pairs in seconds.
COPY_BYTES = 4 << 20
#: The all_reduce's size (--measure copy+allreduce): one small collective over the set.
ALLREDUCE_BYTES = 256 << 10
#: The shortest time a step may go silent before it is a hang (a shorter budget does not make
#: a slow start a hang).
MIN_STEP_TIMEOUT_S = 2.0


def _could_not_run(dialect: str, message: str, own_code: int, on_unknown: str = "ignore"):
    """The one error line on stderr, the dialect's answer on stdout, its exit code."""
    from gputopo.fleet.gate_output import gate_could_not_run_text

    code = (gate_exit_code(dialect, "could-not-run", on_unknown) if dialect == "slurm-prolog"
            else could_not_run_code(dialect, own_code))
    click.echo(f"gputopo: error: {printable(clip(message, 4000))}", err=True)
    click.echo(gate_could_not_run_text(dialect, message, code))
    raise click.exceptions.Exit(code)


class GateCommand(DialectCommand):
    """A refused option answers in the dialect's terms (a prolog's 0 and a log line, unless
    --on-unknown drain): a bad configuration never drains a fleet."""

    dialects = GATE_DIALECTS

    def refuse(self, dialect: str, message: str, args: List[str]) -> None:
        _could_not_run(dialect, message, EXIT_USAGE, raw_option(args, "--on-unknown", ("ignore", "drain"), "ignore"))


@cli.command(cls=GateCommand)
@click.option("--gpus", "gpus_text", metavar="LIST",
              help="The GPUs to check: NVML indices and ranges (0-3,5), all, or GPU UUIDs.")
@click.option("--allocated", is_flag=True,
              help="Check the job's own GPUs: SLURM_JOB_GPUS / CUDA_VISIBLE_DEVICES (device numbers, as in a "
                   "Slurm prolog) or NVIDIA_VISIBLE_DEVICES (a container).")
@click.option("--measure", type=click.Choice(["copy", "copy+allreduce"]), default="copy", show_default=True,
              help="copy: one verified peer copy per pair each way; copy+allreduce: and one small all_reduce "
                   "over the set.")
@click.option("--as", "dialect", type=click.Choice(GATE_DIALECTS), default="json", show_default=True,
              help="Whose terms: JSON, node-problem-detector, Nagios, or a Slurm Prolog (fail exits 1: Slurm "
                   "drains the node and requeues the job held).")
@click.option("--budget", type=FiniteFloat(min=0.5, max=3600), metavar="SECONDS",
              help="Time for the whole gate (default 10; npd 4); what does not fit or finish is not judged.")
@sim_option
@click.option("--fabric", type=click.Choice(list(FABRIC_NAMES)),
              help="What moves the bytes: cuda (real GPUs; the default without --sim), sim (the default with "
                   "--sim), cpu (processes standing in for GPUs).")
@click.option("--kernel-log", "kernel_log", metavar="FILE", type=click.Path(dir_okay=False),
              help="Read Xids (and a recovery action) from this saved kernel log instead of the live one.")
@click.option("--state-dir", "state_dir", metavar="DIR", envvar=STATE_ENV, show_envvar=True,
              help="Where the verdict is kept as gate-last.json (default /run/gputopo, else not kept).")
@click.option("--on-unknown", "on_unknown", type=click.Choice(["ignore", "drain"]), default="ignore",
              show_default=True, help="slurm-prolog: whether a gate that judged nothing or could not run exits 1 "
                                      "(drains) or 0.")
@click.option("--out", "out_dir", metavar="DIR", type=click.Path(file_okay=False),
              help="Keep the copies' run folder here (a bench run folder: `gputopo report DIR`).")
@history_options(records=False)
def gate(gpus_text, allocated, measure, dialect, budget, sim, fabric, kernel_log, state_dir, on_unknown, out_dir):
    """Do these GPUs work together? Each GPU and pair: ok, not applicable, degraded, broken or not
    judged, the narrowest part to blame and what to do, within --budget seconds.

    \b
    Examples:
      gputopo gate --sim dgx-h100 --gpus 0-7               # the verdict as JSON
      gputopo gate --allocated --as slurm-prolog            # in a Slurm Prolog (docs/fleet.md)
      gputopo gate --sim degraded-nvlink --as nagios --measure copy+allreduce
    """
    try:
        _gate(gpus_text, allocated, measure, dialect, budget, sim, fabric, kernel_log, state_dir, on_unknown,
              out_dir)
    except click.exceptions.Exit:
        raise
    except (GputopoError, KeyboardInterrupt, Exception) as e:  # noqa: BLE001 - said in the dialect's terms
        if dialect == "json":
            from gputopo.fleet.gate_output import gate_could_not_run_text

            why = could_not_run_words(e, json_words=True)[0]
            _keep_could_not_run(state_dir, why)
            click.echo(gate_could_not_run_text(dialect, why))
            raise
        message, code = could_not_run_words(e)
        _keep_could_not_run(state_dir, message)
        _could_not_run(dialect, message, code, on_unknown)


def _state_folder(state_dir: Optional[str]) -> Optional[Path]:
    from gputopo.fleet.state import DEFAULT_STATE_DIR, usable

    if state_dir:
        return Path(state_dir)
    return DEFAULT_STATE_DIR if usable(DEFAULT_STATE_DIR) else None


def _keep(folder: Optional[Path], doc: dict) -> str:
    """Keep ``doc`` as gate's last verdict; the words said of where (or why not)."""
    from gputopo.fleet.state import GATE_STATE_FILE, write_state

    if folder is None:
        click.echo("gputopo: warning: the verdict is not kept: /run/gputopo cannot be written (--state-dir DIR)",
                   err=True)
        return "verdict not kept"
    job = os.environ.get("SLURM_JOB_ID")
    if job and "job" not in doc:  # a prolog's job: health names it beside a "Prolog error" drain
        doc = {**doc, "job": job}
    try:
        return f"kept in {write_state(folder, doc, GATE_STATE_FILE)}"
    except OSError as e:
        click.echo(f"gputopo: warning: the verdict is not kept in {folder}: {e.strerror or e}", err=True)
        return "verdict not kept"


def _keep_could_not_run(state_dir: Optional[str], message: str) -> None:
    import datetime as dt

    from gputopo.fleet.state import usable
    from gputopo.model.reason import reason, segment

    if state_dir and not usable(Path(state_dir)):
        return
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    _keep(_state_folder(state_dir), {"command": "gate", "time": now, "verdict": "could-not-run",
                                     "reason": reason([segment("not-judged", "node", f"could not run: {message}")]),
                                     "error": message})


def _start_forkserver(gpus_text: Optional[str]) -> Optional[float]:
    """Start the workers' forkserver now, so its torch import (seconds) runs while NVML is read;
    when it was started (time.monotonic()), or None (no torch, or one GPU named: nothing to copy)."""
    import importlib.util

    if gpus_text is not None and len([p for p in str(gpus_text).split(",") if p.strip()]) == 1 and \
            "-" not in str(gpus_text) and str(gpus_text).strip().lower() != "all":
        return None
    try:
        if importlib.util.find_spec("torch") is None:
            return None
    except (ImportError, ValueError):
        return None
    from gputopo.workers.processes import mp_context, starting_workers

    with starting_workers(mp_context()):
        pass
    return time.monotonic()


def _gate(gpus_text, allocated, measure, dialect, budget, sim, fabric_name, kernel_log, state_dir, on_unknown,
          out_dir) -> None:
    t0 = time.monotonic()
    from gputopo.bench.fabrics.fabric import default_fabric, fabric_named
    from gputopo.bench.options import all_pairs
    from gputopo.cli.scan import load_topology
    from gputopo.fleet import allocation
    from gputopo.fleet.gate import best_other_set, judge_gate
    from gputopo.fleet.gate_output import problem_lines, render_gate
    from gputopo.fleet.gate_time import RESERVE_S, plan_gate
    from gputopo.fleet.state import usable
    from gputopo.report.rules import scan_findings

    ctx = click.get_current_context()
    if dialect != "slurm-prolog":
        refuse_unused(ctx, ("on_unknown",), "without --as slurm-prolog")
    if gpus_text is not None and allocated:
        raise UsageError("--gpus and --allocated are exclusive: name the GPUs, or take the job's")
    if gpus_text is not None and not str(gpus_text).strip():
        raise UsageError("--gpus: empty; name GPUs (0-3,5), all, or GPU UUIDs")
    if state_dir and not usable(Path(state_dir)):
        raise UsageError(f"--state-dir {state_dir}: cannot be made or written")
    fabric = fabric_named(fabric_name) if fabric_name else default_fabric(simulated_machine=bool(sim))
    if sim and fabric.real_gpus:
        raise UsageError(f"--fabric cuda measures this machine's real GPUs, but --sim {sim} is simulated: "
                         "drop --fabric or use --fabric cpu")
    if fabric.simulated and not sim:
        raise UsageError("--fabric sim needs a simulated machine: add --sim NAME (see `gputopo sims`)")
    budget_s = budget if budget is not None else GATE_BUDGET_S[dialect]
    if out_dir:
        from gputopo.runfolder.writer import claim_out_dir

        out_path: Optional[Path] = claim_out_dir(out_dir)
    else:
        out_path = None

    fs_started = _start_forkserver(gpus_text)
    topo = load_topology(sim, None, kernel_log)
    findings = scan_findings(topo)
    if not topo.gpus:
        raise UsageError("no GPU read: nothing to gate")
    if allocated:
        selection = allocation.allocated(os.environ, topo, allocation.minor_numbers(sim))
    elif gpus_text is not None:
        selection = allocation.selected_gpus(gpus_text, topo)
    else:
        selection = allocation.Selection([g.nvml_index for g in topo.gpus], "every GPU (no --gpus, no --allocated)")
    gpus = selection.gpus
    if topo.simulated:
        click.echo(f"gputopo: SIMULATED machine '{topo.machine}': no real GPU was read", err=True)

    lost = [g for g in gpus if topo.gpu(g).lost is not None]
    pairs = [p for p in all_pairs(gpus) if not set(p) & set(lost)]
    want_ar = measure == "copy+allreduce" and len(gpus) > 1
    ar_why = ""
    from gputopo.bench.gate_copies import MAX_ALLREDUCE_RANKS

    if want_ar and len(gpus) > MAX_ALLREDUCE_RANKS:
        want_ar, ar_why = False, f"more than {MAX_ALLREDUCE_RANKS} GPUs: the bench's all_reduce has no seeds for them"
    if want_ar and lost:
        want_ar, ar_why = False, f"GPU(s) {','.join(map(str, lost))} lost to NVML"
    workers = fabric.pool_size(None) if fabric.pooled else len(gpus)
    left = budget_s - (time.monotonic() - t0)
    the_plan = plan_gate(fabric.name, gpus, pairs, want_ar, left, workers,
                    started_s=time.monotonic() - fs_started if fs_started is not None else 0.0)
    not_measured = {p: (f"left out by the time model: {the_plan.notes[0]}" if the_plan.notes else "left out")
                    for p in the_plan.left_out}
    for g in lost:
        for p in all_pairs(gpus):
            if g in p:
                not_measured[p] = f"GPU {g} lost to NVML: nothing to copy with"
    if the_plan.allreduce_left_out:
        ar_why = "left out by the time model: the budget holds no room for it"
    measurements: list = []
    failures: list = []
    if the_plan.pairs or the_plan.allreduce:
        from gputopo.bench.gate_copies import allreduce_step, copy_step, run_gate_steps
        from gputopo.errors import require_torch

        require_torch("gputopo gate")
        if fabric.real_gpus:
            from gputopo.bench.visible import mig_refusal

            refusal = mig_refusal(topo, gpus, {})
            if refusal:
                raise UsageError(refusal)
            uuids = allocation.cuda_visible_uuids(topo, gpus)
            if uuids is None:
                raise UsageError("a GPU's UUID could not be read: the workers cannot be started by UUID")
            os.environ["CUDA_VISIBLE_DEVICES"] = uuids  # the workers inherit it; CUDA cannot reorder them
        steps = [copy_step(topo, p, COPY_BYTES) for p in the_plan.pairs]
        if the_plan.allreduce:
            steps.append(allreduce_step(gpus, ALLREDUCE_BYTES))
        run_dir = out_path or Path(tempfile.mkdtemp(prefix="gputopo-gate-")) / "run"
        remaining = budget_s - (time.monotonic() - t0)
        description = None
        if sim:
            from gputopo.sim.description import load_description

            description = load_description(sim)
        try:
            got = run_gate_steps(topo, steps, fabric, run_dir, description,
                                 deadline=t0 + budget_s - RESERVE_S,
                                 timeout_s=max(MIN_STEP_TIMEOUT_S, remaining), argv=list(sys.argv[1:]))
        finally:
            if out_path is None:
                shutil.rmtree(run_dir.parent, ignore_errors=True)
        if got.interrupted:
            raise KeyboardInterrupt
        measurements, failures = got.measurements, got.failures
        for s in got.not_started:
            if s.group == "p2p":
                not_measured[(s.gpus[0], s.gpus[1])] = f"the budget ({budget_s:g} s) was spent before its copies started"
            else:
                ar_why = f"the budget ({budget_s:g} s) was spent before it started"
    from gputopo.cli.history_hook import history_path
    from gputopo.fleet.gate_declared import read_declared

    declared = read_declared(history_path(reading=True), topo, COPY_BYTES)
    v = judge_gate(topo, findings, gpus, selection.to_json(), measurements=measurements, failures=failures,
              not_measured=not_measured, allreduce_wanted=measure == "copy+allreduce" and len(gpus) > 1,
              allreduce_why=ar_why, fabric_name=fabric.name, stands_in=fabric.stands_in, budget_s=budget_s,
              used_s=time.monotonic() - t0, time_s=time.time(), plan=the_plan.to_json(), declared=declared)
    if declared.why_none:
        v.notes.append(f"declared: {declared.why_none}")
    elif declared.source:
        v.notes.append(f"declared: this machine's history in {declared.source} ({declared.runs} run(s) with its "
                       f"links, {len(declared.copies)} bench figure(s) at {COPY_BYTES} B)")
    v.best_other = best_other_set(topo, findings, v)
    v.notes += selection.notes + the_plan.notes
    code = gate_exit_code(dialect, v.verdict, on_unknown)
    doc = v.to_json()
    doc["exit_code"] = code
    if v.verdict == "not-judged" and code:  # --on-unknown drain: the drain's reason says why
        from gputopo.model.reason import reason, segment

        doc["reason"] = reason([segment("not-judged", "node", "; ".join(v.not_judged()) or v.summary())])
    kept = _keep(_state_folder(state_dir), {k: doc[k] for k in doc if k not in ("gpus", "pairs")}
                 | {"problems": problem_lines(v)})
    if dialect != "nagios":  # nagios says them in its long output
        for line in problem_lines(v):
            click.echo(f"gputopo: {line}", err=True)
    click.echo(render_gate(dialect, v, code, kept))
    finish(code)
