"""`gputopo health`: is this node fit to take the next job, right now, within the scheduler's time
budget; answered in the terms of whoever asks (--as json | npd | nagios | slurm-healthcheck).

Every way out speaks the dialect: a verdict, a check that could not run (no driver, a bad option,
an internal error, Ctrl-C) and a refused option alike (docs/fleet.md's table). With
slurm-healthcheck gputopo drains and resumes its own node (gputopo/fleet/slurm.py).
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import List, Optional

import click

from gputopo.cli.group import cli
from gputopo.cli.history_hook import history_options, history_path
from gputopo.cli.options import finish, sim_option
from gputopo.cli.tracebacks import could_not_run_words
from gputopo.cli.strict import DialectCommand, FiniteFloat, refuse_unused
from gputopo.console import clip, printable
from gputopo.errors import EXIT_USAGE, GputopoError, UsageError
from gputopo.fleet.dialects import DIALECTS, could_not_run_code, could_not_run_text, dialects_of, exit_code, render

SLURM_ONLY = ("node", "scontrol", "sinfo", "on_unknown")
STATE_ENV = "GPUTOPO_STATE_DIR"


def _could_not_run(dialect: str, message: str, own_code: int, action: str = "unchanged"):
    """The one error line on stderr, the dialect's answer on stdout, its exit code."""
    click.echo(f"gputopo: error: {printable(clip(message, 4000))}", err=True)
    click.echo(could_not_run_text(dialect, message, action))
    raise click.exceptions.Exit(could_not_run_code(dialect, own_code))


class HealthCommand(DialectCommand):
    """A refused option answers in the dialect's terms (Slurm's 0 and a log line)."""

    dialects = dialects_of("health")

    def refuse(self, dialect: str, message: str, args: List[str]) -> None:
        _could_not_run(dialect, message, EXIT_USAGE)


@cli.command(cls=HealthCommand)
@click.option("--level", type=click.Choice(["passive", "quick", "pairs"]), default="passive", show_default=True,
              help="passive: what needs no GPU work (NVML, kernel log, NIC ports, the history); quick: and "
                   "gate's verified peer copies between the idle GPUs; pairs: and gate's all_reduce over them. "
                   "A GPU a job uses (NVML's running processes) is never measured: not judged, in use.")
@click.option("--as", "dialect", type=click.Choice(dialects_of("health")), default="json", show_default=True,
              help="Whose terms: the verdict as JSON, node-problem-detector's custom plugin, a Nagios "
                   "plugin, or Slurm's HealthCheckProgram (drains and resumes this node itself).")
@click.option("--budget", type=FiniteFloat(min=0.1, max=3600), metavar="SECONDS",
              help="Time for the checks; what does not finish is not judged, never a failure. Default "
                   "per --as: json 60, npd 4, nagios 30, slurm-healthcheck 45.")
@sim_option
@click.option("--kernel-log", "kernel_log", metavar="FILE", type=click.Path(dir_okay=False),
              help="Read Xids, SXids and driver lines from this saved kernel log instead of the live one.")
@click.option("--state-dir", "state_dir", metavar="DIR", envvar=STATE_ENV, show_envvar=True,
              help="Where the last verdict is kept (default /run/gputopo, else the history's folder).")
@click.option("--node", metavar="NAME",
              help="slurm-healthcheck: the Slurm node name (default $SLURMD_NODENAME, else the short hostname).")
@click.option("--scontrol", metavar="PATH", default="scontrol", show_default=True,
              help="slurm-healthcheck: the scontrol to drain and resume with.")
@click.option("--sinfo", metavar="PATH", default="sinfo", show_default=True,
              help="slurm-healthcheck: the sinfo to read the node's state and reason with.")
@click.option("--on-unknown", "on_unknown", type=click.Choice(["ignore", "drain"]), default="ignore",
              show_default=True, help="slurm-healthcheck: what a verdict that judged nothing does to the node.")
@history_options
def health(level, dialect, budget, sim, kernel_log, state_dir, node, scontrol, sinfo, on_unknown):
    """One node verdict (pass, warn, fail, not judged) in the terms of who asks.

    \b
    Examples:
      gputopo health --sim degraded-nvlink            # the verdict as JSON, exit 1 on a failure
      gputopo health --as nagios                      # OK / WARNING / CRITICAL / UNKNOWN
      gputopo health --as npd                         # one line of at most 80 bytes
      gputopo health --as slurm-healthcheck           # drains and resumes this node (docs/fleet.md)
      gputopo health --level quick --budget 60        # and gate's peer copies on the idle GPUs
    """
    try:
        _health(dialect, budget, sim, kernel_log, state_dir, node, scontrol, sinfo, on_unknown, level)
    except click.exceptions.Exit:
        raise
    except (GputopoError, KeyboardInterrupt, Exception) as e:  # noqa: BLE001 - said in the dialect's terms
        if dialect == "json":  # the command's own error line and code; stdout says it as JSON too
            why = could_not_run_words(e, json_words=True)[0]
            click.echo(could_not_run_text(dialect, why))
            raise
        message, code = could_not_run_words(e)
        action = "unchanged"
        if dialect == "slurm-healthcheck" and on_unknown == "drain" and not isinstance(e, KeyboardInterrupt):
            action = _drain_could_not_run(message, state_dir, node, scontrol, sinfo)
        _could_not_run(dialect, message, code, action)


def _drain_could_not_run(message: str, state_dir, node, scontrol, sinfo) -> str:
    """--on-unknown drain: a check that could not run (no driver, an internal error) drains the
    node as a verdict that judged nothing does; its reason says why."""
    from gputopo.fleet.state import read_state, state_folder, usable
    from gputopo.model.reason import reason, segment

    folder = state_folder(state_dir, history_path(reading=True)) if not state_dir or usable(Path(state_dir)) else None
    why = reason([segment("not-judged", "node", f"could not run: {message}")])
    slurm = _own_drain("not-judged", why, node, scontrol, sinfo, "drain", read_state(folder))
    if folder is not None:
        import datetime as dt

        now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        _write_kept(folder, {"command": "health", "time": now, "verdict": "not-judged",
                             "could_not_run": message, "slurm": slurm})
    return str(slurm["action"])


def _health(dialect, budget, sim, kernel_log, state_dir, node, scontrol, sinfo, on_unknown, level="passive") -> None:
    from gputopo.cli.scan import load_topology
    from gputopo.fleet.passive import run_passive
    from gputopo.fleet.state import read_state, state_folder, usable

    ctx = click.get_current_context()
    if dialect != "slurm-healthcheck":
        refuse_unused(ctx, SLURM_ONLY, "without --as slurm-healthcheck")
    if state_dir and not usable(Path(state_dir)):
        raise UsageError(f"--state-dir {state_dir}: cannot be made or written")
    budget_s = budget if budget is not None else DIALECTS[dialect].budget_s
    reading = history_path(reading=True)
    record = history_path() is not None
    folder = state_folder(state_dir, reading)
    verdict = run_passive(lambda: load_topology(sim, None, kernel_log), budget_s, reading, sim,
                          list(sys.argv[1:]), record)
    if level != "passive" and not verdict.cut_short:
        import time

        from gputopo.fleet.levels import level_check

        start = time.monotonic()
        verdict.checks.append(level_check(level, sim, budget_s - verdict.used_s, verdict.findings))
        verdict.used_s += time.monotonic() - start
    elif level != "passive":
        from gputopo.fleet.checks import not_judged
        from gputopo.fleet.levels import LEVELS

        verdict.checks.append(not_judged(LEVELS[level][0], f"not started: {verdict.cut_short}"))
    verdict.level = level
    verdict.simulated = verdict.simulated or bool(sim)
    verdict.gate = _gate_kept(folder, verdict.source)
    if verdict.simulated:  # said wherever a person sees output; the NPD line and a drain reason hold no room
        from gputopo.fleet.dialects import simulated_text

        click.echo(f"gputopo: {simulated_text(verdict)}", err=True)
    slurm = None
    if dialect == "slurm-healthcheck":
        why = verdict.reason()
        if verdict.verdict == "not-judged" and on_unknown == "drain":
            from gputopo.model.reason import segment

            why = segment("not-judged", "node", verdict.cut_short or "nothing could be judged").text()
        slurm = _own_drain(verdict.verdict, why, node, scontrol, sinfo, on_unknown, read_state(folder),
                           verdict.gate)
    click.echo(render(dialect, verdict, slurm["action"] if slurm else ""))
    _keep(folder, verdict, slurm)
    finish(exit_code(dialect, verdict.verdict))


def slurm_node_name(given: Optional[str]) -> str:
    return given or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def _gate_kept(folder: Optional[Path], source: str):
    """gate's last verdict kept in the state folder (gputopo/fleet/prolog.py) on the machine health
    read (``source``), or None."""
    from gputopo.fleet.prolog import GateKept
    from gputopo.fleet.state import GATE_STATE_FILE, read_state

    return GateKept.from_doc(read_state(folder, GATE_STATE_FILE), source)


def _own_drain(verdict: str, reason: str, node, scontrol, sinfo, on_unknown, last, gate=None) -> dict:
    """Drain, update, resume or leave the node (gputopo/fleet/slurm.py) for ``verdict`` and its
    ``reason``; what was done, in words, as kept in the state. ``gate``: gate's kept verdict
    (GateKept): one kept since the last check makes this one read the node again (Slurm may
    have drained it, "Prolog error"), and it explains such a drain."""
    from gputopo.fleet.prolog import is_prolog_error, prolog_drain_text
    from gputopo.fleet.slurm import SlurmError, act, decide, read_node

    name = slurm_node_name(node)
    gate_seen = gate.to_json() if gate is not None else None
    done = {"node": name, "verdict": verdict, "reason": reason, "on_unknown": on_unknown, "gate": gate_seen}
    prev = (last or {}).get("slurm") or {}
    if (last and last.get("verdict") == verdict and prev.get("node") == name
            and prev.get("reason") == reason and prev.get("ok") and prev.get("settled")
            and prev.get("gate") == gate_seen):
        return {**done, "kind": "none", "ok": True, "settled": True,
                "action": f"unchanged since {last.get('time')} (no change, no action)"}
    try:
        state = read_node(sinfo, name)
        action = decide(state, verdict, reason, on_unknown)
        act(scontrol, name, action, reason)
    except SlurmError as e:
        click.echo(f"gputopo: warning: node {name} not changed: {e}", err=True)
        return {**done, "kind": "none", "ok": False, "settled": False, "action": f"not changed ({e})"}
    why = action.why
    if action.kind == "none" and state.drained and is_prolog_error(state.reason):
        why = prolog_drain_text(gate)
    return {**done, "kind": action.kind, "ok": True, "settled": action.settled, "action": f"{name} {why}",
            "was": {"state": state.state, "reason": state.reason}}


def _keep(folder: Optional[Path], verdict, slurm: Optional[dict]) -> None:
    """The last verdict on the node; one warning line when it cannot be kept (the answer stands)."""
    if folder is None:
        click.echo("gputopo: warning: the verdict is not kept: neither /run/gputopo nor the history's "
                   "folder can be written (--state-dir DIR)", err=True)
        return
    doc = {k: v for k, v in verdict.to_json().items() if k not in ("checks", "notes")}
    doc["checks"] = [{"name": c.name, "applicability": c.applicability, "status": c.status, "basis": c.basis}
                     for c in verdict.checks]
    if slurm is not None:
        doc["slurm"] = slurm
    _write_kept(folder, doc)


def _write_kept(folder: Path, doc: dict) -> None:
    """Keep ``doc`` as the node's last verdict; one warning line when it cannot be (the answer stands)."""
    from gputopo.fleet.state import write_state

    try:
        write_state(folder, doc)
    except OSError as e:
        click.echo(f"gputopo: warning: the verdict is not kept in {folder}: {e.strerror or e}", err=True)
