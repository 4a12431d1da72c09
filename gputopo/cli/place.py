"""`gputopo place N`: which N GPUs a job should use, and the environment to run it there."""

from __future__ import annotations

import json

import click

from gputopo.cli.group import cli
from gputopo.cli.options import finish, sim_option
from gputopo.errors import UsageError


def _count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise UsageError(f"N must be a number of GPUs, not {text!r}") from None
    if n < 1:
        raise UsageError(f"N must be at least 1 GPU (got {n})")
    return n


def _excluded(values, indices) -> set:
    out = set()
    for v in values:
        for part in str(v).split(","):
            part = part.strip()
            if not part:
                continue
            try:
                g = int(part)
            except ValueError:
                raise UsageError(f"--exclude {part!r}: not a GPU number") from None
            if g not in indices:
                raise UsageError(f"--exclude {g}: this machine has no GPU {g} (its GPUs are "
                                 f"{min(indices)}-{max(indices)})")
            out.add(g)
    return out


@cli.command()
@click.argument("n", metavar="N")
@click.option("--exclude", multiple=True, metavar="GPUS", help="GPUs to leave out (NVML numbers): 3 or 3,5; repeatable.")
@click.option("--from", "from_run", metavar="RUN_DIR", type=click.Path(file_okay=False),
              help="Rank by a bench run's measurements and findings (else by the scan's link classes).")
@sim_option
@click.option("--top", type=click.IntRange(1, 50), default=3, show_default=True, help="How many sets to list.")
@click.option("--json", "as_json", is_flag=True, help="JSON (with schema_version) instead of text.")
def place(n, exclude, from_run, sim, top, as_json):
    """Which N GPUs should a job use? Ranks the sets of N GPUs by their worst pair (measured GB/s
    with --from RUN_DIR, else link class: NV# > PIX > PXB > PHB > NODE > SYS), never a set with a
    broken pair or a faulty or lost GPU, and prints the CUDA_VISIBLE_DEVICES and NCCL settings.

    \b
    Examples:
      gputopo place 2 --sim seed-8gpu
      gputopo place 4 --exclude 3
      gputopo place 4 --from reports/20260101-100000-seed-8gpu --json
    """
    from gputopo.report.placement import rank, run_states, scan_states
    from gputopo.report.placement_view import placement_json, placement_text

    wanted = _count(n)
    if from_run and sim:
        raise UsageError("--from and --sim are exclusive: a run folder holds its own machine")
    if from_run:
        from gputopo.report.summary import summarize_dir

        summary = summarize_dir(from_run)
        topo = summary.run.topology
        if topo is None:
            raise UsageError(f"{from_run}: the run folder has no topology.json to place GPUs on")
        n_gpus = len(topo.gpus)
        if len(topo.pairs) < n_gpus * (n_gpus - 1) // 2:  # e.g. an import of nccl-tests output
            raise UsageError(f"{from_run}: its topology.json does not say how every pair of its "
                             f"{n_gpus} GPUs is linked (source: {topo.source or 'unknown'}), so "
                             "no placement can be ranked; run `gputopo place N` on the machine")
        states, out_gpus = run_states(topo, summary)
        source = f"run {from_run} (measured)"
    else:
        from gputopo.cli.scan import load_topology
        from gputopo.report.topology_checks import topology_findings

        topo = load_topology(sim)
        states, out_gpus = scan_states(topo, topology_findings(topo))
        source = "scan (link classes; nothing measured)"
    indices = [g.nvml_index for g in topo.gpus]
    excluded = _excluded(exclude, set(indices))
    usable = [g for g in indices if g not in excluded and g not in out_gpus]
    if wanted > len(indices):
        raise UsageError(f"{wanted} GPUs wanted, but this machine has {len(indices)}")
    if wanted > len(usable):
        left = [f"{len(excluded)} excluded"] if excluded else []
        left += [f"GPU {g} left out: {why}" for g, why in sorted(out_gpus.items())]
        raise UsageError(f"{wanted} GPUs wanted, but only {len(usable)} of {len(indices)} can be used ("
                         + "; ".join(left) + ")")
    ranked, notes = rank(topo, wanted, states, out_gpus, excluded, top=top)
    if as_json:
        click.echo(json.dumps(placement_json(topo, wanted, ranked, states, usable, sorted(excluded), out_gpus,
                                             notes, source), indent=2))
    elif ranked:
        for g, why in sorted(out_gpus.items()):
            click.echo(f"left out: GPU {g}: {why}")
        click.echo(placement_text(topo, wanted, ranked, states, usable, notes, source))
    if not ranked:
        if not as_json:
            click.echo(f"no set of {wanted} GPUs without a broken pair (hang, crash, or data wrong on every "
                       "path); see the run's report")
        finish(1)
