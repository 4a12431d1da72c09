"""A message size in words, one way for every finding and note: the largest binary unit that
divides it exactly (``64 MiB``), else the exact byte count (``1048572 B``), never a rounded
figure that would name a size that was not measured."""
from __future__ import annotations

_UNITS = (("GiB", 30), ("MiB", 20), ("KiB", 10))


def size_text(n: object, *, compact: bool = False) -> str:
    """``64 MiB`` (``compact``: ``64M``, as the history's drift lines print it); ``?`` where the
    size is not an integer (a record that lacks it)."""
    if not isinstance(n, int) or isinstance(n, bool):
        return "?"
    for unit, k in _UNITS:
        if n >= 1 << k and n % (1 << k) == 0:
            return f"{n >> k}{unit[0]}" if compact else f"{n >> k} {unit}"
    return f"{n}B" if compact else f"{n} B"
