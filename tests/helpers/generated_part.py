"""A page's generated part: the text between two marker lines, rewritten from what a helper
renders (tests/helpers/architecture_doc.py, finding_kinds_doc.py)."""

from __future__ import annotations

from pathlib import Path


def write_part(page: Path, begin: str, end: str, rendered: str) -> None:
    """Replace ``page``'s text from ``begin`` to ``end`` (markers included) with ``rendered``."""
    text = page.read_text(encoding="utf-8")
    start, stop = text.index(begin), text.index(end) + len(end)
    page.write_text(text[:start] + rendered + text[stop:], encoding="utf-8")
