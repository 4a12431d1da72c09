"""The built-in simulated machines (``gputopo/sim/machines/*.toml``): names and one-line summaries."""

from __future__ import annotations

import functools
import os
from typing import List, Tuple

from .toml_reader import toml_loads

MACHINES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "machines")


@functools.lru_cache(maxsize=1)
def _names() -> Tuple[str, ...]:
    try:
        files = os.listdir(MACHINES_DIR)
    except OSError:
        return ()
    return tuple(sorted(f[:-5] for f in files if f.endswith(".toml")))


def builtin_names() -> List[str]:
    """Names of the built-in machines, sorted (each is ``machines/<name>.toml``)."""
    return list(_names())


def builtin_path(name: str) -> str:
    """The file of a built-in machine (KeyError when there is none by that name)."""
    if name not in _names():
        raise KeyError(name)
    return os.path.join(MACHINES_DIR, f"{name}.toml")


@functools.lru_cache(maxsize=1)
def _summaries() -> Tuple[Tuple[str, str], ...]:
    out = []
    for name in builtin_names():
        path = builtin_path(name)
        with open(path, encoding="utf-8") as f:
            data = toml_loads(f.read(), path)
        out.append((name, str(data.get("summary", ""))))
    return tuple(out)


def builtin_summaries() -> List[Tuple[str, str]]:
    """(name, one-line summary) of every built-in machine, sorted by name."""
    return list(_summaries())
