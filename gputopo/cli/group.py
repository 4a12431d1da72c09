"""The `gputopo` click group itself, alone in a module so that command modules can add their
commands to it without importing `main` (which imports them): data flows one way,
group <- command modules <- main."""

from __future__ import annotations

import click

from gputopo import __version__
from gputopo.cli.strict import StrictGroup


@click.group(cls=StrictGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="gputopo")
def cli():
    """gputopo: which GPU pairs of this machine can you trust, and how fast are they?

    Start with `gputopo scan`; without GPUs add `--sim seed-8gpu` (see `gputopo sims`).
    """
