"""What ``--sim NAME-or-path`` names: a built-in machine, a synthetic one (``synthetic-<N>gpu``,
generate.py) or a description file. It sits on top of the catalog, the generator and the
description reader so that none of them needs the others' names resolved.
"""

from __future__ import annotations

import os
import re

from gputopo.errors import InputFileError, UsageError

from .catalog import builtin_names
from .description_build import Description
from .description_files import load_builtin, parse_description
from .generate import generate_description

#: Generated machines of any size, e.g. "synthetic-64gpu" (see generate.py), N in SYNTHETIC_GPUS.
_SYNTHETIC_RE = re.compile(r"^synthetic-([0-9]+)gpu$")
#: The sizes a synthetic machine may have (a 1024-GPU scan already takes about 25 s of CPU).
SYNTHETIC_GPUS = range(1, 1025)
SYNTHETIC_HELP = (f"synthetic-<N>gpu (N GPUs, N = {SYNTHETIC_GPUS.start}..{SYNTHETIC_GPUS.stop - 1}: "
                  "NV4 pairs, NODE inside a socket, SYS across)")


def load_description(name_or_path: str) -> Description:
    """A built-in machine by name, or a description file by path.

    Raises UsageError listing the built-in names when ``name_or_path`` is neither, and
    InputFileError naming the file, key and line when the file is invalid. Built-ins are parsed
    once per process; every call returns a fresh Description.
    """
    text_arg = str(name_or_path)
    synthetic = _SYNTHETIC_RE.match(text_arg)
    if synthetic and not os.path.exists(text_arg):
        n = int(synthetic.group(1))
        if n not in SYNTHETIC_GPUS:
            raise UsageError(f"--sim {text_arg}: a synthetic machine has {SYNTHETIC_GPUS.start} to "
                             f"{SYNTHETIC_GPUS.stop - 1} GPUs, not {n}")
        return generate_description(n)
    names = builtin_names()
    is_builtin = text_arg in names and os.sep not in text_arg and "/" not in text_arg
    looks_like_path = (text_arg.endswith(".toml") or os.sep in text_arg or "/" in text_arg
                       or os.path.exists(text_arg))
    if not is_builtin and not looks_like_path:
        raise UsageError(f"unknown simulated machine {text_arg!r}; built-in machines: "
                         f"{', '.join(names)}, {SYNTHETIC_HELP} (or give the path of a .toml description)")
    if is_builtin:
        return load_builtin(text_arg)
    path = text_arg
    if not os.path.lexists(path):
        raise InputFileError(path, "no such file (give a built-in machine name or the path of a "
                             f"description; built-ins: {', '.join(builtin_names())})")
    from gputopo.inputs import MAX_DESCRIPTION_BYTES, read_user_text

    return parse_description(read_user_text(path, "description", MAX_DESCRIPTION_BYTES), path)
