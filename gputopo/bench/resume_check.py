"""What `--resume` must verify in a run folder before building on it.

A resumed run appends to the folder it resumes, so a run.json of the wrong shape or a
measurements.jsonl line that is not a measurement would be carried into the finished run (or
crash the runner half way). Both are refused with one line naming the file, the line or key,
and what is wrong (exit 2). A cut last line is normal (the run stopped while writing it) and
is skipped by the readers.
"""

from __future__ import annotations

from typing import Any, Dict

from gputopo.errors import InputFileError

#: run.json keys a resume reads, and the JSON types each may have (None: may be null).
_INFO_TYPES = {
    "fabric": (str,), "machine": (str, type(None)), "sim": (str, type(None)),
    "sim_path": (str, type(None)), "status": (str, type(None)), "options": (dict,),
}
_TYPE_NAMES = {str: "text", dict: "an object", list: "a list", type(None): "null",
               int: "an integer", float: "a number", bool: "true/false"}


def _what(types) -> str:
    return " or ".join(_TYPE_NAMES[t] for t in types)


def check_run_info(info: Any, path, options: bool = True) -> Dict[str, Any]:
    """``info`` (run.json parsed) if it has the shape a resume needs; InputFileError otherwise.
    ``options`` False checks only the top-level keys' types (what every reader of a run folder
    needs: a report read ``options`` as an object and crashed on text)."""
    if not isinstance(info, dict):
        raise InputFileError(path, f"expected a JSON object, got {type(info).__name__}; "
                             "not a gputopo run.json")
    for key, types in _INFO_TYPES.items():
        if key in info and not isinstance(info[key], types):
            raise InputFileError(path, f"must be {_what(types)}, got {info[key]!r}"[:200], key=key)
    if options:
        _check_options(info.get("options") or {}, path)
    return info


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _int_list(x) -> bool:
    return isinstance(x, list) and all(_is_int(v) and v >= 0 for v in x)


_OPTION_CHECKS = (  # key, test, what it must be
    ("pairs", lambda x: isinstance(x, list) and all(_int_list(p) and len(p) == 2 for p in x),
     "a list of GPU pairs [i, j]"),
    ("self_gpus", _int_list, "a list of GPU indices"),
    ("tests", lambda x: isinstance(x, list) and all(isinstance(t, str) for t in x),
     "a list of test names"),
    ("preset", lambda x: isinstance(x, str), "a preset name"),
    ("sizes_bytes", lambda x: x is None or (_int_list(x) and all(v > 0 for v in x)),
     "a list of byte counts or null"),
    ("latency_sizes_bytes", lambda x: x is None or (_int_list(x) and all(v > 0 for v in x)),
     "a list of byte counts or null"),
    ("warmup", lambda x: x is None or (_is_int(x) and x >= 0), "a count or null"),
    ("samples", lambda x: x is None or (_is_int(x) and x > 0), "a count or null"),
    ("concurrent", lambda x: isinstance(x, bool), "true or false"),
)


def _check_options(options: Dict[str, Any], path) -> None:
    for key, ok, what in _OPTION_CHECKS:
        if key in options and not ok(options[key]):
            raise InputFileError(path, f"must be {what}, got {options[key]!r}"[:200],
                                 key=f"options.{key}")
