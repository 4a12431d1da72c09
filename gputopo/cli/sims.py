"""`gputopo sims`: the built-in simulated machines, one line each."""

from __future__ import annotations

import click

from gputopo.cli.group import cli


@cli.command()
def sims():
    """List the built-in simulated machines (use them with --sim NAME).

    A simulated machine is a description file: GPUs, pair matrix, host facts, link model and
    faults. Point --sim at your own .toml file to simulate your machine (format: docs/sim-format.md).
    """
    from gputopo.sim.description import builtin_summaries
    from gputopo.sim.description import SYNTHETIC_GPUS

    rows = builtin_summaries() + [("synthetic-<N>gpu", f"generated: N GPUs (N = {SYNTHETIC_GPUS.start}.."
                                                        f"{SYNTHETIC_GPUS.stop - 1}) in NV4 pairs, NODE inside a "
                                                        "socket, SYS across; healthy")]
    width = max(len(n) for n, _ in rows)
    for name, summary in rows:
        click.echo(f"{name.ljust(width)}  {summary}")
