"""Prefixes that launchers and loggers put in front of a tool's own output lines, removed so
every importer reads the line the tool printed.

Real logs arrive through ``mpirun --tag-output`` (``[1,0]<stdout>:``), ``srun -l``/``--label``
(``0: `` or `` 12: ``), MPICH/Intel MPI ``-prepend-rank`` (``[0] ``), torchrun ``--tee``
(``[default0]:``), Ray workers (``(pid=1234) ``), Python ``logging`` formats
(``INFO:root:``, ``2024-01-02 03:04:05,678 - INFO - ``, ``[2024-01-02 03:04:05] [INFO] ``,
loguru's ``... | INFO     | mod:fn:12 - ``), glog/absl (``I0102 03:04:05.678901  123 f.py:12] ``),
and terminal colour codes (ANSI escape sequences) anywhere in the line.

One call strips every layer (a launcher prefix inside a logging prefix, or the other way
round). A line without any of these comes back unchanged, so it is safe to call on every line.
Timestamps without a log level are *not* removed: a syslog or journal line's time is data for
the kernel-log reader, not a launcher's decoration.
"""

from __future__ import annotations

import re

__all__ = ["strip_ansi", "strip_launcher_prefix", "strip_quote_marker", "strip_ray_repeat"]

#: CSI (colours, cursor moves), OSC (window titles, links) and two-byte escape sequences.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")

_LEVEL = r"(?:DEBUG|INFO|NOTICE|WARNING|WARN|ERROR|CRITICAL|FATAL|TRACE|SUCCESS)\b"
_TIMESTAMP = (r"\[?\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\]?")

_PREFIXES = [
    # mpirun --tag-output: "[1,0]<stdout>:" / "[1,12]<stderr>: " (Open MPI 5 adds a space).
    re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:\s?"),
    # srun -l / --label: "0: ", right-aligned task ids "  3: " when there are 10 or more.
    re.compile(r"^\s*\d+: "),
    # MPICH / Intel MPI -prepend-rank: "[0] " (digits only; dmesg's "[ 12.345]" has a dot).
    re.compile(r"^\[\d+\] "),
    # torchrun --tee / --log-dir redirects: "[default0]:" (role name + local rank).
    re.compile(r"^\[[A-Za-z_][\w-]*?\d+\]:\s?"),
    # Ray: "(pid=1234) ", "(RayWorker pid=1234, ip=10.0.0.1) ".
    re.compile(r"^\([^()]*\bpid=\d+[^()]*\)\s"),
    # logging.basicConfig default: "INFO:root:" / "WARNING:my.module:".
    re.compile(r"^" + _LEVEL + r":[\w.]*:"),
    # glog / absl: "I0102 03:04:05.678901  1234 file.py:12] ".
    re.compile(r"^[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d+\s+\d+ [^\]\s]+\] "),
    # A timestamp, up to two words (logger name, hostname), then the level, then a separator,
    # then loguru's "module:function:line - " where present:
    # "2024-01-02 03:04:05,678 - INFO - ", "2024-01-02 03:04:05,678 - name - INFO - ",
    # "[2024-01-02 03:04:05,678] [INFO] ", "2024-01-02 03:04:05.678 | INFO     | m:f:12 - ".
    re.compile(r"^" + _TIMESTAMP + r"(?:\s*[-|]?\s*\[?[\w.\-/]+\]?){0,2}?\s*[-|:]?\s*\[?" + _LEVEL
               + r"\]?\s*(?:[-|:]\s*)?(?:[\w.<>]+:[\w.<>]+:\d+\s+-\s+)?"),
    # "INFO - " / "[INFO] " / "INFO | " at the start without a time (a level, then a separator).
    re.compile(r"^\[" + _LEVEL + r"\]\s+|^" + _LEVEL + r"\s+[-|]\s+"),
]

#: Any of them at the start: one look per line, so the common line without a prefix costs one
#: match, not one per pattern (every importer calls this on every line).
_ANY_PREFIX = re.compile("|".join(f"(?:{p.pattern})" for p in _PREFIXES))


def strip_ansi(line: str) -> str:
    """The line without terminal escape sequences (colours, bold, cursor moves)."""
    return _ANSI.sub("", line) if "\x1b" in line else line


def strip_launcher_prefix(line: str) -> str:
    """The line as the tool printed it: ANSI codes, a trailing CR/LF and every launcher or
    logging prefix at its start removed (nested ones too, e.g. ``0: [1,0]<stdout>:``)."""
    line = strip_ansi(line.rstrip("\r\n"))
    if _ANY_PREFIX.match(line) is None:
        return line
    for _ in range(4):  # a prefix inside a prefix; each pass removes one layer
        for pattern in _PREFIXES:
            new = pattern.sub("", line, count=1)
            if new != line:
                line = new
                break
        else:
            return line
    return line


_QUOTE = re.compile(r"^(?:[ \t]*>)+ ?")


def strip_quote_marker(line: str) -> str:
    """A line of a quoted paste (an e-mail or Markdown quote: ``> `` or ``>> ``) without the
    quote marks. Only for formats whose own lines never start with ``>``."""
    return _QUOTE.sub("", line, count=1)


#: Ray's log deduplication (ray/_private/ray_logging: RAY_DEDUP_LOGS): the first of several
#: similar lines, with `` [repeated 14x across cluster]`` appended (and, the first time, a note
#: on how to turn it off); the other lines are not printed at all.
_RAY_REPEAT = re.compile(r"\s*\[repeated (?P<n>\d+)x across cluster\].*$")


def strip_ray_repeat(line: str) -> tuple:
    """``(line, n)``: the line without Ray's ``[repeated Nx across cluster]`` suffix (and what
    follows it), and N, the similar lines Ray left out (0 where there is no suffix). Call it on a
    line whose colour codes are already removed."""
    m = _RAY_REPEAT.search(line)
    if m is None:
        return line, 0
    return line[:m.start()], int(m.group("n"))
