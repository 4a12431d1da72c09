"""The nccl-tests text parser: lines and rows of all_reduce_perf & co. into NcclTestsLog
(nccl_tests_records.py), one per test in the text.

Accepted: the classic header (``# nThread ... validation: 1 graph: 0``) and the newer one (a
``# nccl-tests version`` line, ``# Collective test starting:``, ``unalign:``), rank lines of one
or many hosts (with or without ``Group``), ``cputime`` and per-iteration columns, a timestamp
column, ``N/A`` cells (e.g. ``#wrong`` when validation is off), out-of-place and in-place
columns, the footer (out-of-bounds count, "Avg bus bandwidth"), NCCL INFO lines and MPI/srun
prefixes (``[1,0]<stdout>:``) mixed in, and several tests one after another in one file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable, List, Optional

from gputopo.errors import InputFileError
from gputopo.model import NotAvailable

from gputopo.line_prefixes import strip_launcher_prefix
from .nccl_checks import completeness_problems, drop_negative_rows
from .nccl_tests_records import Cell, NcclTestsLog, Rank, Row
from .nccl_ops import OPS, op_from_name

#: Header and footer lines older nccl-tests printed without their "#" (read as if they had it).
_BARE_HEADER = re.compile(r"^\s*(?:nThread\s|Using devices|Rank\s+\d+\s+(?:Group\s+\d+\s+)?Pid\s|size\s+count\s"
                          r"|\(B\)|out-of-place\b|Out of bounds values|Avg bus bandwidth|Collective test starting"
                          r"|nccl-tests version\s)")
_NCCL_VERSION = re.compile(r"\bNCCL version (\d+\.\d+\.\d+\S*)")
_RANK = re.compile(r"^#\s*Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+"
                   r"\[([^\]]*)\]\s*(.*)$")
_VERSION = re.compile(r"^#\s*nccl-tests version\s+(\S+)(?:\s+nccl-headers=(\d+))?(?:\s+nccl-library=(\d+))?")
_STARTING = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_WORD_KV = re.compile(r"\b(nThread|nGpus|minBytes|maxBytes)\s+(\d+)")
_COLON_KV = re.compile(r"([A-Za-z][A-Za-z ]*?):\s*(-?\d+)(?:\((\w+)\))?")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)(?:\s+(OK|FAILED))?")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([-+0-9.eE]+|nan|-?inf)", re.IGNORECASE)
_ERROR = re.compile(r"^#\s*error:\s*(.+)$")
_DATA = re.compile(r"^\s*\d+\s+\d+\s+\S+")


def _clean(line: str) -> str:
    """The line without launcher prefixes and colours, with "#" put back on the bare header and
    footer lines of older nccl-tests."""
    line = strip_launcher_prefix(line.rstrip("\r\n"))
    if _BARE_HEADER.match(line):
        return "# " + line.strip()
    return line


def _num(tok: str):
    """A printed number, or NotAvailable for N/A; ValueError otherwise."""
    if tok.upper() in ("N/A", "NA", "-"):
        return NotAvailable(f"nccl-tests printed {tok}")
    return float(tok)


def _int_or_na(tok: str):
    v = _num(tok)
    return v if isinstance(v, NotAvailable) else int(round(v))


def _header_layout(tokens: List[str]):
    """Split header column names into the leading columns and the placement groups."""
    starts = [k for k, t in enumerate(tokens) if t in ("time", "cputime")]
    if not starts:
        return None
    pre = tokens[:starts[0]]
    groups = []
    for a, b in zip(starts, starts[1:] + [len(tokens)]):
        g = tokens[a:b]
        if "timestamp" in g:
            g = g[:g.index("timestamp")]
        groups.append(g)
    return pre, groups


def _cell(names: List[str], toks: List[str]) -> Cell:
    vals = dict(zip(names, toks))
    wrong_tok = vals.get("#wrong", vals.get("wrong"))
    wrong: Any = NotAvailable("no #wrong column")
    if wrong_tok is not None:
        wrong = _int_or_na(wrong_tok)
    elif "error" in vals:  # very old nccl-tests: max error, not a count
        err = _num(vals["error"])
        wrong = NotAvailable("old nccl-tests 'error' column (max error, not a count)")
        vals["max_error"] = err
    time_key = "cputime" if "cputime" in vals else "time"
    per_iter = {k: _num(v) for k, v in vals.items() if k.startswith("i_")}
    if "max_error" in vals:
        per_iter["max_error"] = vals["max_error"]
    return Cell(time_us=_num(vals[time_key]), algbw_gbps=_num(vals.get("algbw", "N/A")),
                busbw_gbps=_num(vals.get("busbw", "N/A")), wrong=wrong, per_iter=per_iter)


def _parse_row(log: NcclTestsLog, toks: List[str], lineno: int) -> Optional[Row]:
    layout = _header_layout(log.columns)
    if layout is None:
        return None
    pre, groups = layout
    need = len(pre) + sum(len(g) for g in groups)
    lead = dict(zip(pre, toks[:len(pre)]))
    rest = toks[len(pre):]
    cells: List[Optional[Cell]] = []
    if len(rest) >= need - len(pre):
        k = 0
        for g in groups:
            cells.append(_cell(g, rest[k:k + len(g)]))
            k += len(g)
    elif len(groups) == 2 and len(rest) >= len(groups[1]) and len(rest) < need - len(pre):
        cells = [None, _cell(groups[1], rest[:len(groups[1])])]  # out-of-place left blank
    else:
        raise ValueError(f"{len(toks)} columns where the header has {need}")
    root = lead.get("root")
    return Row(size_bytes=int(lead["size"]), count=int(lead.get("count", 0)), dtype=lead.get("type", "?"),
               redop=lead.get("redop", "?"), root=int(root) if root not in (None, "-") else None,
               out_of_place=cells[0] if cells else None,
               in_place=cells[1] if len(cells) > 1 else None, line=lineno)


def parse_nccl_tests(text: str, source: str = "<text>", op: Optional[str] = None) -> List[NcclTestsLog]:
    """Parse nccl-tests output; one NcclTestsLog per test found. InputFileError if none."""
    return parse_nccl_tests_lines(text.splitlines(), source=source, op=op)


def parse_nccl_tests_lines(lines: Iterable[str], source: str = "<text>",
                           op: Optional[str] = None) -> List[NcclTestsLog]:
    """Parse nccl-tests output given line by line (a file streams: only rows are kept)."""
    logs: List[NcclTestsLog] = []
    cur = NcclTestsLog(source=source)

    def start_new():
        nonlocal cur
        if cur.rows or cur.columns:
            logs.append(cur)
            cur = NcclTestsLog(source=source)

    any_line = False
    for lineno, raw in enumerate(lines, start=1):
        any_line = True
        line = _clean(raw)
        s = line.strip()
        if not s:
            continue
        v = _NCCL_VERSION.search(s)
        if v and (cur.nccl_version is None or not cur.rows):
            cur.nccl_version = v.group(1)
        if s.startswith("#"):
            body = s.lstrip("#").strip()
            m = _VERSION.match(s)
            if m:
                start_new()
                cur.version = m.group(1)
                cur.nccl_headers = int(m.group(2)) if m.group(2) else None
                cur.nccl_library = int(m.group(3)) if m.group(3) else None
                continue
            m = _STARTING.match(s)
            if m:
                if cur.rows:
                    start_new()
                cur.program = m.group(1)
                continue
            if body.startswith("nThread"):
                if cur.rows:
                    start_new()
                cur.config.update({k: int(v) for k, v in _WORD_KV.findall(body)})
                for k, v, unit in _COLON_KV.findall(body):
                    key = k.strip().replace(" ", "_")
                    cur.config[key] = int(v)
                    if unit:
                        cur.config[key + "_unit"] = unit
                continue
            m = _RANK.match(s)
            if m:
                cur.ranks.append(Rank(rank=int(m.group(1)), group=int(m.group(2)) if m.group(2) else None,
                                      pid=int(m.group(3)), host=m.group(4), device=int(m.group(5)),
                                      bus_id=m.group(6).strip(), name=m.group(7).strip()))
                continue
            toks = body.split()
            if toks and toks[0] == "size" and ("time" in toks or "cputime" in toks):
                cur.columns = toks
                cur.time_kind = "cputime" if "cputime" in toks else "time"
                continue
            m = _OOB.match(s)
            if m:
                cur.out_of_bounds = int(m.group(1))
                cur.out_of_bounds_status = m.group(2)
                continue
            m = _AVG.match(s)
            if m:
                try:
                    cur.avg_busbw_gbps = float(m.group(1))
                except ValueError:
                    cur.notes.append(f"line {lineno}: unreadable Avg bus bandwidth {m.group(1)!r}")
                continue
            m = _ERROR.match(s)
            if m:
                cur.errors.append(m.group(1).strip())
            continue
        if _DATA.match(line) and cur.columns:
            try:
                row = _parse_row(cur, line.split(), lineno)
            except (ValueError, KeyError) as e:
                cur.notes.append(f"line {lineno}: skipped row ({e})")
                cur.problems.append(f"line {lineno}: row skipped ({e}; cut or malformed)")
                continue
            if row is not None:
                cur.rows.append(row)
    start_new()
    if not any_line:
        raise InputFileError(source, "empty file: expected nccl-tests output (all_reduce_perf & co.)")
    for lg in logs:
        lg.problems = drop_negative_rows(lg) + completeness_problems(lg) + lg.problems
    logs = [lg for lg in logs if lg.rows]
    if not logs:
        raise InputFileError(source, "no nccl-tests result rows found (expected the '#  size  count  type ...' "
                                     "header followed by rows)")
    for lg in logs:
        lg.op = op or _op_of(lg)
        if lg.op is None:
            raise InputFileError(source, "cannot tell which collective this is (no 'Collective test starting' "
                                         "line and no op in the file name); name it with --op, e.g. --op all_reduce")
        if lg.op not in OPS:
            raise InputFileError(source, f"unknown nccl-tests op {lg.op!r}; known: {', '.join(sorted(OPS))}")
    return logs


def _op_of(log: NcclTestsLog) -> Optional[str]:
    if log.program:
        found = op_from_name(log.program)
        if found:
            return found
    return op_from_name(Path(log.source).name)


def parse_nccl_tests_file(path, op: Optional[str] = None) -> List[NcclTestsLog]:
    """Parse a file (streamed; ``-`` is stdin). InputFileError for an unreadable, empty or binary
    file, or one without nccl-tests rows."""
    from gputopo.text_input import text_lines

    with text_lines(str(path), "nccl-tests output (all_reduce_perf & co.)") as lines:
        return parse_nccl_tests_lines(lines, source=str(path), op=op)
