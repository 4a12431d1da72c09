"""Printing a line with a hanging indent on a rich console: the text after a lead ('    - ',
'  WARNING iommu  ') wraps under its own first character, never back to column 0, and no line
is padded with trailing spaces (as a rich grid would pad it). rich only: `gputopo scan` uses it."""

from __future__ import annotations


def hanging(console, lead, body, style: str = "") -> None:
    """Print ``lead`` then ``body`` (str or rich Text), wrapped to the console's width."""
    from rich.text import Text

    lead = lead if isinstance(lead, Text) else Text(lead)
    body = body if isinstance(body, Text) else Text(body, style=style)
    indent = lead.cell_len
    for k, line in enumerate(body.wrap(console, max(20, console.width - indent), overflow="fold")):
        line.rstrip()
        console.print((lead if k == 0 else Text(" " * indent)) + line, soft_wrap=True)
