"""The one way gputopo makes a rich Console: every value printed literally.

Why: rich reads ``[red]...[/red]`` in a string as markup and ``:ab:`` as an emoji code, so a PCI
bus id like ``0000:ab:00.0`` printed as ``0000🆎00.0`` and a GPU name or file name holding
brackets lost them. gputopo styles what it prints through ``rich.text.Text`` objects, never
through markup, so markup, emoji codes and rich's guessing highlighter are all off here.
"""

from __future__ import annotations

__all__ = ["clip", "literal_console", "printable"]


def clip(text: str, keep: int = 60) -> str:
    """``text`` cut to about ``keep`` characters for an error line (a 100,000-digit argument is
    named, not echoed), saying how long it was."""
    text = str(text)
    if len(text) <= keep:
        return text
    return f"{text[:keep - 20]}...{text[-10:]} ({len(text):,} characters)"


def printable(text: str) -> str:
    """``text`` with every unprintable character (ESC, newline, NUL...) written as its Python
    escape: user text (a description's machine name) cannot move the cursor, recolour the
    terminal or forge a line of output."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def literal_console(**options):
    """A ``rich.console.Console(**options)`` with markup, emoji and highlighting off."""
    from rich.console import Console

    return Console(markup=False, emoji=False, highlight=False, **options)
