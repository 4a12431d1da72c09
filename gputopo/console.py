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
    """A ``rich.console.Console(**options)`` with markup, emoji and highlighting off.

    ``NO_COLOR`` (https://no-color.org) set and non-empty means no colour and no styles, whatever
    ``no_color=False`` says (rich reads NO_COLOR only when no_color is left unset). A broken pipe
    raises BrokenPipeError for the entry point to end quietly (rich's own handler exits 1, which
    read as a failure with nothing said)."""
    import os

    if os.environ.get("NO_COLOR"):
        options["no_color"] = True
        options["color_system"] = None
    return _quiet_pipe_console_class()(markup=False, emoji=False, highlight=False, **options)


_CONSOLE_CLASS = None


def _quiet_pipe_console_class():
    """rich's Console with BrokenPipeError left to the caller (made on first use: importing rich
    at module level would slow `gputopo --help`)."""
    global _CONSOLE_CLASS
    if _CONSOLE_CLASS is None:
        from rich.console import Console

        class QuietPipeConsole(Console):
            def on_broken_pipe(self) -> None:
                raise BrokenPipeError("stdout closed by the reader")

        _CONSOLE_CLASS = QuietPipeConsole
    return _CONSOLE_CLASS
