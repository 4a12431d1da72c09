"""`gputopo place N`: which N GPUs a job should use, and the environment to run it there."""

from __future__ import annotations

import json

import click

from gputopo.cli.group import cli
from gputopo.cli.options import finish, sim_option
from gputopo.errors import UsageError


def _count(text: str) -> int:
    from gputopo.console import clip

    try:
        n = int(text) if len(text) < 20 else int("x")  # 100,000 digits: no machine has that many
    except ValueError:
        raise UsageError(f"N must be a number of GPUs (1 to the machine's count), not {clip(text)!r}") from None
    if n < 1:
        raise UsageError(f"N must be at least 1 GPU (got {n})")
    return n


#: Ranking looks at every GPU pair (and grows sets greedily from the best pairs): 256 GPUs
#: (32,640 pairs) take seconds, 1,024 (523,776 pairs) took minutes. No host has more GPUs than
#: this; a bigger simulated machine is refused before it is built.
MAX_PLACE_GPUS = 256


def _refuse_too_many(n_gpus: int, where: str) -> None:
    if n_gpus > MAX_PLACE_GPUS:
        raise UsageError(f"{where} has {n_gpus:,} GPUs: place ranks machines of up to {MAX_PLACE_GPUS} "
                         "GPUs (every pair is weighed; no single host has more)")


def _sim_gpu_count(sim: str) -> int:
    """How many GPUs the --sim machine has, known before it is scanned (a synthetic name says
    it; a description is loaded, which costs far less than the scan)."""
    from gputopo.sim.description import load_description
    from gputopo.sim.description import SYNTHETIC_RE

    m = SYNTHETIC_RE.match(sim)
    if m and len(m.group(1)) < 8:
        return int(m.group(1))
    return len(load_description(sim).gpus)


def _excluded(values, indices) -> set:
    out = set()
    for v in values:
        for part in str(v).split(","):
            part = part.strip()
            if not part:
                continue
            try:
                g = int(part) if len(part) < 20 else -1
            except ValueError:
                g = -1
            if g < 0:
                from gputopo.console import clip

                raise UsageError(f"--exclude {clip(part)!r}: not a GPU number") from None
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
    data_notes: list = []
    if from_run and sim:
        raise UsageError("--from and --sim are exclusive: a run folder holds its own machine")
    if from_run:
        from gputopo.report.summary import summarize_dir

        summary = summarize_dir(from_run)
        topo = summary.run.topology
        if topo is None:
            raise UsageError(f"{from_run}: the run folder has no topology.json to place GPUs on")
        _refuse_too_many(len(topo.gpus), f"the run {from_run}")
        states, out_gpus = run_states(topo, summary)
        # A pair is known by its link class, or by peer copies measured on it (an imported
        # p2pBandwidthLatencyTest matrix); a collective alone (an nccl-tests import) says nothing
        # about the raw peer copies DataParallel makes, so such a set cannot be judged.
        known = {tuple(p.gpus) for p in topo.pairs} | {
            (min(m.gpus), max(m.gpus)) for m in summary.run.measurements
            if len(m.gpus) == 2 and m.test.startswith("p2p.")}
        unknown = [(a, b) for k, a in enumerate(topo.indices) for b in topo.indices[k + 1:]
                   if (a, b) not in known]
        if unknown:
            raise UsageError(f"{from_run}: {len(unknown)} GPU pair(s) of the run (e.g. {unknown[0][0]},"
                             f"{unknown[0][1]}) have neither a link class nor measured peer copies "
                             f"(source: {topo.source or 'unknown'}), so no placement can be ranked; "
                             "run `gputopo place N` on the machine")
        source = f"run {from_run} (measured)"
        # a partial or damaged run is ranked on what it holds, and says so first (as report does)
        data_notes = ([summary.partial] if summary.partial else []) + list(summary.run.problems)
    else:
        from gputopo.cli.scan import load_topology
        from gputopo.report.rules import scan_findings

        if sim:
            _refuse_too_many(_sim_gpu_count(sim), f"--sim {sim}")
        topo = load_topology(sim)
        _refuse_too_many(len(topo.gpus), "this machine")
        states, out_gpus = scan_states(topo, scan_findings(topo))
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
        doc = placement_json(topo, wanted, ranked, states, usable, sorted(excluded), out_gpus, notes, source)
        doc["run_problems"] = data_notes
        click.echo(json.dumps(doc, indent=2))
    else:
        for line in data_notes:
            click.echo(f"data: {line}")
    if ranked and not as_json:
        for g, why in sorted(out_gpus.items()):
            click.echo(f"left out: GPU {g}: {why}")
        click.echo(placement_text(topo, wanted, ranked, states, usable, notes, source))
    if not ranked:
        if not as_json:
            click.echo(f"no set of {wanted} GPUs without a broken pair (hang, crash, or data wrong on every "
                       "path); see the run's report")
        finish(1)
