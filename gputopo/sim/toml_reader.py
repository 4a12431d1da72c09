"""The one TOML reader of the sim package (machine descriptions, the built-in catalog, clusters).

It turns tomllib's syntax errors into :class:`gputopo.errors.InputFileError` naming the file and
the line. It sits below everything else in gputopo.sim (it imports nothing of it), so the
catalog can read a built-in's summary without importing the description builder.
"""

from __future__ import annotations

import re
import sys
from typing import Any, Dict

from gputopo.errors import InputFileError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

_TOML_LINE_RE = re.compile(r"\(at line (\d+), column (\d+)\)")


def toml_loads(text: str, path: str) -> Dict[str, Any]:
    """Parsed TOML ``text``; InputFileError naming ``path`` and the line on a syntax error."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = _TOML_LINE_RE.search(msg)
        line = int(m.group(1)) if m else None
        msg = _TOML_LINE_RE.sub("", msg).strip()
        raise InputFileError(path, f"TOML syntax error: {msg}", line=line) from None
