"""Error reporting while reading a machine description: which file, which key, which line.

:class:`DescContext` builds the :class:`gputopo.errors.InputFileError` every check raises
(``gpu[3].numa_node`` at line 42 of the file); the ``check_*`` helpers validate one value or
table and raise through it. Every part of the description builder (and health.py, nics.py,
description_checks.py, which receive the context) reports errors this way.
"""

from __future__ import annotations

import math
import re
from typing import Any, Dict, List, Optional, Sequence

from gputopo.errors import InputFileError


class DescContext:
    """Error reporting for one file: key paths, line lookup."""

    def __init__(self, path: str, text: str):
        self.path = path
        self.text = text
        self.lines = text.splitlines() if text else []

    def error(self, message: str, *key: Any) -> InputFileError:
        """The error to raise: this file, ``message``, the key path and its line when found."""
        return InputFileError(self.path, message, line=self.line_of(key) if key else None,
                              key=key_text(key) if key else None)

    def line_of(self, key: Sequence[Any]) -> Optional[int]:
        """Best-effort 1-based line of a key path such as ("gpu", 3, "numa_node")."""
        if not self.lines:
            return None
        for cut in range(len(key) - 1, -1, -1):
            table, name = key[:cut], key[cut]
            line = self._find(table, name)
            if line is not None:
                return line
        return None

    def _find(self, table: Sequence[Any], name: Any) -> Optional[int]:
        # table like ("gpu", 3) or ("link_model",) or (); name a str (key) or int (array entry)
        want, want_index = [], None
        for part in table:
            if isinstance(part, int):
                want_index = part
            else:
                want.append(str(part))
        if isinstance(name, int):  # the N-th [[table]] header itself
            want_index, name = name, None
        current: Optional[List[str]] = [] if not want else None
        counts: Dict[str, int] = {}
        for no, raw in enumerate(self.lines, 1):
            s = raw.strip()
            if s.startswith("["):
                header = s.strip("[]").split("#")[0].strip().strip("[]").strip()
                parts = [p.strip().strip('"') for p in header.split(".")]
                is_array = s.startswith("[[")
                dotted = ".".join(parts)
                index = None
                if is_array:
                    index = counts.get(dotted, 0)
                    counts[dotted] = index + 1
                matches = parts == want and (want_index is None or index == want_index)
                if matches and name is None:
                    return no
                if isinstance(name, str) and want_index is None and parts == want + [name]:
                    return no
                current = parts if matches else None
                continue
            if current is not None and name is not None:
                m = re.match(r'^\s*"?([^"=]+?)"?\s*=', raw)
                if m and m.group(1).strip() == str(name):
                    return no
        return None


def key_text(key: Sequence[Any]) -> str:
    """A key path as a user writes it: ("gpu", 3, "numa_node") -> ``gpu[3].numa_node``."""
    out = ""
    for part in key:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            p = str(part)
            if not re.match(r"^[A-Za-z0-9_-]+$", p):
                p = f'"{p}"'
            out += ("." if out else "") + p
    return out


def check_keys(ctx: DescContext, table: Any, allowed: set, *key: Any) -> Dict[str, Any]:
    """``table`` itself when it is a table whose keys are all in ``allowed``."""
    if not isinstance(table, dict):
        raise ctx.error(f"expected a table, got {type(table).__name__}", *key)
    for k in table:
        if k not in allowed:
            raise ctx.error(f"unknown key {k!r}; allowed: {', '.join(sorted(allowed))}", *key, k)
    return table


def check_int(ctx, value, lo, hi, *key) -> int:
    """``value`` when it is an integer (not a bool) in ``lo..hi``."""
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise ctx.error(f"expected an integer in {lo}..{hi}, got {value!r}", *key)
    return value


def check_str(ctx, value, *key) -> str:
    """``value`` when it is a string."""
    if not isinstance(value, str):
        raise ctx.error(f"expected a string, got {value!r}", *key)
    return value


def check_label(ctx, value, *key) -> str:
    """A string that gputopo prints (a machine, GPU or host name): control characters (an ANSI
    escape, a newline) are kept as visible escapes (``\\x1b``, ``\\n``), never sent to the terminal."""
    from gputopo.console import printable

    return printable(check_str(ctx, value, *key))


def check_num(ctx, value, *key, positive=True) -> float:
    """``value`` as a float when it is a finite number (and > 0 unless ``positive`` is False)."""
    # TOML has nan and inf: neither is a rate or a latency
    if (not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value)
            or (positive and value <= 0)):
        raise ctx.error(f"expected a finite {'positive ' if positive else ''}number, got {value!r}", *key)
    return float(value)


def parse_clock(ctx, value) -> float:
    """``clock``: a TOML date-time or an ISO 8601 string, as a UTC epoch time (a time without
    a zone is UTC). The history records a simulated run at this time (issue 19)."""
    import datetime as _dt

    if isinstance(value, str):
        try:
            value = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ctx.error(f"expected a date-time like 2026-11-01T08:00:00Z, got {value!r}", "clock") from None
    if isinstance(value, _dt.date) and not isinstance(value, _dt.datetime):
        value = _dt.datetime(value.year, value.month, value.day)
    if not isinstance(value, _dt.datetime):
        raise ctx.error(f"expected a date-time like 2026-11-01T08:00:00Z, got {value!r}", "clock")
    if value.tzinfo is None:
        value = value.replace(tzinfo=_dt.timezone.utc)
    return value.timestamp()
