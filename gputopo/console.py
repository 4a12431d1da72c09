"""The one way gputopo makes a rich Console: every value printed literally.

Why: rich reads ``[red]...[/red]`` in a string as markup and ``:ab:`` as an emoji code, so a PCI
bus id like ``0000:ab:00.0`` printed as ``0000🆎00.0`` and a GPU name or file name holding
brackets lost them. gputopo styles what it prints through ``rich.text.Text`` objects, never
through markup, so markup, emoji codes and rich's guessing highlighter are all off here.
"""

from __future__ import annotations

__all__ = ["literal_console"]


def literal_console(**options):
    """A ``rich.console.Console(**options)`` with markup, emoji and highlighting off."""
    from rich.console import Console

    return Console(markup=False, emoji=False, highlight=False, **options)
