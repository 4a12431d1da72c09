"""Click options shared by several commands."""

from __future__ import annotations

import click

sim_option = click.option(
    "--sim", "sim", metavar="NAME|FILE",
    help="Use a simulated machine: a built-in name (see `gputopo sims`) or a description .toml file.")


def console(no_color: bool = False):
    """A rich console on stdout; plain text when not a TTY (rich decides) or when asked."""
    from gputopo.console import literal_console

    c = literal_console(no_color=no_color, soft_wrap=False)
    if not c.is_terminal:  # piped to a file or a pager: rich's 80 columns would wrap the tables
        c = literal_console(no_color=no_color, soft_wrap=False, width=160)
    return c


def finish(code: int):
    """End the command with an exit code (works under main() and click's CliRunner alike)."""
    click.get_current_context().exit(code)
