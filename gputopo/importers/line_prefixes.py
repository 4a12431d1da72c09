"""Prefixes that launchers and loggers put in front of a tool's own lines, removed before parsing.

A log as users post it is seldom the tool's bare output: ``mpirun --tag-output`` writes
``[1,3]<stdout>:``, ``srun -l`` writes ``3: ``, a Python training script's logging writes
``2024-05-01 12:00:00,123 - INFO - `` or ``INFO:root:``, and terminals/slurm keep ANSI colour
codes. Each kind has its own function (so a parser can strip only what it can be sure of);
``strip_launcher_prefix`` removes every kind found at the start of a line, outermost first.
A prefix is removed only when the line really starts with it: the text after it is never changed.
"""

from __future__ import annotations

import re

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
#: mpirun --tag-output: "[1,3]<stdout>:" (Open MPI), also "[1,3]<stderr>:"; "[jobid,rank]".
_MPI_TAG = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:\s?")
#: srun -l / --label: "3: " or " 12: " (right-aligned rank), then the tool's text.
_SRUN_LABEL = re.compile(r"^\s*\d{1,6}: ")
#: Python logging: "2024-05-01 12:00:00,123 - INFO - ", "[2024-05-01 12:00:00,123] [INFO] ",
#: "INFO:root:", "I0501 12:00:00.123456 1234 file.py:12] " (absl/glog).
_PY_LOGGING = (
    re.compile(r"^\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[,.]\d+)?\]?\s*(?:-\s*)?(?:\[?[\w.]+\]?\s*-\s*)?"
               r"\[?(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\]?\s*(?:-\s*|:\s*)?"),
    re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]*:"),
    re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ [\w./-]+:\d+\] "),
)


def strip_ansi(s: str) -> str:
    """The text without ANSI escape sequences (colours, underline, cursor moves)."""
    return _ANSI.sub("", s) if "\x1b" in s else s


def strip_mpi_tag(line: str) -> str:
    """Without mpirun's ``--tag-output`` ``[1,N]<stdout>:`` prefix."""
    return _MPI_TAG.sub("", line, count=1)


def strip_srun_label(line: str) -> str:
    """Without ``srun -l``'s ``N: `` rank label."""
    return _SRUN_LABEL.sub("", line, count=1)


def strip_python_logging(line: str) -> str:
    """Without a Python logging / absl prefix (time stamp and level) at the start of the line."""
    for pattern in _PY_LOGGING:
        m = pattern.match(line)
        if m and m.end() > 0:
            return line[m.end():]
    return line


def strip_launcher_prefix(line: str) -> str:
    """``line`` without ANSI codes and the launcher / logging prefixes at its start (any order,
    each at most once: ``[1,0]<stdout>:0: INFO:root:text`` -> ``text``)."""
    line = strip_ansi(line)
    for _ in range(3):
        before = line
        for strip in (strip_mpi_tag, strip_srun_label, strip_python_logging):
            line = strip(line)
        if line == before:
            break
    return line
