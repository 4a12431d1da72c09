"""Description files: TOML text to a machine, with ``extends`` (a base description, built-in
or file, with this file's tables on top) resolved first. Built-in files are read and parsed once
per process. Choosing between a built-in name, a synthetic size and a path is machine_lookup.py's.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Tuple

from .catalog import builtin_names, builtin_path
from .description_build import Description, build_description
from .description_context import DescContext
from .toml_reader import toml_loads

_BUILTIN_TEXT_CACHE: Dict[str, Tuple[str, Dict[str, Any]]] = {}


def load_builtin(name: str) -> Description:
    """The built-in machine ``name`` (KeyError when there is none); a fresh Description per call."""
    cached = _BUILTIN_TEXT_CACHE.get(name)
    if cached is None:
        path = builtin_path(name)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        cached = (text, resolve_extends(toml_loads(text, path), path, text))
        _BUILTIN_TEXT_CACHE[name] = cached
    text, data = cached
    return build_description(data, f"builtin:{name}", text=text, source="builtin", default_name=name)


def parse_description(text: str, path: str = "<text>") -> Description:
    """Parse description TOML text; ``path`` names it in errors (and resolves ``matrix_file``)."""
    data = resolve_extends(toml_loads(text, path), path, text)
    stem = os.path.splitext(os.path.basename(path))[0] if path and not path.startswith("<") else "sim"
    return build_description(data, path, text=text, source="file", default_name=stem)


def _merge(base: Dict[str, Any], over: Dict[str, Any]) -> Dict[str, Any]:
    """Tables merge key by key; any other value (arrays of tables included) replaces the base's."""
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def resolve_extends(data: Dict[str, Any], path: str, text: str, depth: int = 0) -> Dict[str, Any]:
    """``extends = "NAME-or-path"``: the base description's data with this file's on top."""
    if "extends" not in data:
        return data
    ctx = DescContext(path, text)
    ref = data["extends"]
    if not isinstance(ref, str):
        raise ctx.error(f"expected a built-in name or a path, got {ref!r}", "extends")
    if depth > 8:
        raise ctx.error("descriptions extend each other in a loop", "extends")
    if ref in builtin_names() and not ref.endswith(".toml"):
        base_path = builtin_path(ref)
    else:
        base_path = ref if os.path.isabs(ref) or path.startswith(("<", "builtin:")) else \
            os.path.join(os.path.dirname(os.path.abspath(path)), ref)
    from gputopo.errors import InputFileError
    from gputopo.inputs import MAX_DESCRIPTION_BYTES, read_user_text

    try:
        base_text = read_user_text(base_path, "description", MAX_DESCRIPTION_BYTES)
    except InputFileError as e:
        why = str(e).split(": ", 1)[-1]
        raise ctx.error(f"cannot read {ref!r}: not a built-in machine ({', '.join(builtin_names())}) "
                        f"nor a readable file ({why})", "extends") from None
    base = resolve_extends(toml_loads(base_text, base_path), base_path, base_text, depth + 1)
    base = {k: v for k, v in base.items() if k not in ("name", "summary")}
    over = {k: v for k, v in data.items() if k != "extends"}
    return _merge(base, over)
