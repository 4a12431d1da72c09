"""Read nccl-tests text output (all_reduce_perf & co.) into gputopo Measurements.

Accepted: the classic header (``# nThread ... validation: 1 graph: 0``) and the newer one (a
``# nccl-tests version`` line, ``# Collective test starting:``, ``unalign:``), rank lines of one
or many hosts (with or without ``Group``), ``cputime`` and per-iteration columns, a timestamp
column, ``N/A`` cells (e.g. ``#wrong`` when validation is off), out-of-place and in-place
columns, the footer (out-of-bounds count, "Avg bus bandwidth"), NCCL INFO lines and MPI/srun
prefixes (``[1,0]<stdout>:``) mixed in, and several tests one after another in one file.

Numbers are kept as printed: nccl-tests rounds algbw/busbw to two decimals, so size/time will
not give back the printed algbw exactly. Each row becomes one Measurement per placement with
one sample (the printed time, which nccl-tests already averaged over its iterations); the
printed time/algbw/busbw go to ``extra["printed"]``. nccl-tests' "Avg bus bandwidth" is the
mean busbw over all sizes (both placements), not the peak; both are kept per log.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from gputopo.errors import InputFileError, UsageError
from gputopo.model import Measurement, NotAvailable

from .nccl_checks import completeness_problems, drop_negative_rows

#: nccl-tests program / op name -> (gputopo test, busbw factor as a function of ranks n).
OPS = {
    "all_reduce": ("collective.all_reduce", lambda n: 2 * (n - 1) / n),
    "all_gather": ("collective.all_gather", lambda n: (n - 1) / n),
    "reduce_scatter": ("collective.reduce_scatter", lambda n: (n - 1) / n),
    "alltoall": ("collective.alltoall", lambda n: (n - 1) / n),
    "scatter": ("collective.scatter", lambda n: (n - 1) / n),
    "gather": ("collective.gather", lambda n: (n - 1) / n),
    "broadcast": ("collective.broadcast", lambda n: 1.0),
    "reduce": ("collective.reduce", lambda n: 1.0),
    "sendrecv": ("collective.sendrecv", lambda n: 1.0),
    "hypercube": ("collective.hypercube", lambda n: (n - 1) / n),
}
#: Spellings in file names, longest first so "reduce_scatter" wins over "reduce".
_OP_ALIASES = [("reduce_scatter", "reduce_scatter"), ("reducescatter", "reduce_scatter"),
               ("all_reduce", "all_reduce"), ("allreduce", "all_reduce"), ("all_gather", "all_gather"),
               ("allgather", "all_gather"), ("alltoall", "alltoall"), ("all_to_all", "alltoall"),
               ("sendrecv", "sendrecv"), ("hypercube", "hypercube"), ("broadcast", "broadcast"),
               ("scatter", "scatter"), ("gather", "gather"), ("reduce", "reduce")]

_PREFIX = re.compile(r"^.*?<std(?:out|err)>:\s?")
_SRUN_PREFIX = re.compile(r"^\s*\d+:\s(?=\s*(?:#|\d))")
_RANK = re.compile(r"^#\s*Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+"
                   r"\[([^\]]*)\]\s*(.*)$")
_VERSION = re.compile(r"^#\s*nccl-tests version\s+(\S+)(?:\s+nccl-headers=(\d+))?(?:\s+nccl-library=(\d+))?")
_STARTING = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_WORD_KV = re.compile(r"\b(nThread|nGpus|minBytes|maxBytes)\s+(\d+)")
_COLON_KV = re.compile(r"([A-Za-z][A-Za-z ]*?):\s*(-?\d+)(?:\((\w+)\))?")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([-+0-9.eE]+|nan|-?inf)", re.IGNORECASE)
_ERROR = re.compile(r"^#\s*error:\s*(.+)$")
_DATA = re.compile(r"^\s*\d+\s+\d+\s+\S+")


@dataclass
class Rank:
    rank: int
    group: Optional[int]
    pid: int
    host: str
    device: int
    bus_id: str  # as printed: "0000:b4:00" (newer) or "0x1b" (older)
    name: str

    def to_json(self) -> dict:
        return dict(vars(self))


@dataclass
class Cell:
    """One placement's printed figures; N/A cells are NotAvailable, never NaN."""

    time_us: Any
    algbw_gbps: Any
    busbw_gbps: Any
    wrong: Any  # int | NotAvailable
    per_iter: Dict[str, Any] = field(default_factory=dict)


@dataclass
class Row:
    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: Optional[int]
    out_of_place: Optional[Cell]
    in_place: Optional[Cell]
    line: int


@dataclass
class NcclTestsLog:
    """One test's output, parsed."""

    source: str
    op: Optional[str] = None
    program: Optional[str] = None
    version: Optional[str] = None
    nccl_headers: Optional[int] = None
    nccl_library: Optional[int] = None
    config: Dict[str, Any] = field(default_factory=dict)
    ranks: List[Rank] = field(default_factory=list)
    columns: List[str] = field(default_factory=list)
    time_kind: str = "time"  # "time" (CUDA events) | "cputime" (host wall clock)
    rows: List[Row] = field(default_factory=list)
    out_of_bounds: Optional[int] = None
    avg_busbw_gbps: Optional[float] = None
    errors: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    #: What makes this log's data incomplete or invalid (nccl_checks.py); the report says it.
    problems: List[str] = field(default_factory=list)

    @property
    def hosts(self) -> List[str]:
        return list(dict.fromkeys(r.host for r in self.ranks))

    def cells(self):
        """(row, in_place, cell) for every printed placement."""
        for r in self.rows:
            if r.out_of_place is not None:
                yield r, False, r.out_of_place
            if r.in_place is not None:
                yield r, True, r.in_place

    @property
    def peak(self) -> Tuple[Optional[float], Optional[int], Optional[bool]]:
        """(printed busbw max, the largest size reaching it, in place?)."""
        best = (None, None, None)
        for r, inplace, c in self.cells():
            b = c.busbw_gbps
            if isinstance(b, float) and (best[0] is None or b > best[0] or (b == best[0] and r.size_bytes >= best[1])):
                best = (b, r.size_bytes, inplace)
        return best


# ----------------------------------------------------------------------------- parsing


def _clean(line: str) -> str:
    line = line.rstrip("\r\n")
    line = _PREFIX.sub("", line, count=1)
    return _SRUN_PREFIX.sub("", line, count=1)


def _num(tok: str):
    """A printed number, or NotAvailable for N/A; ValueError otherwise."""
    if tok.upper() in ("N/A", "NA", "-"):
        return NotAvailable(f"nccl-tests printed {tok}")
    return float(tok)


def _int_or_na(tok: str):
    v = _num(tok)
    return v if isinstance(v, NotAvailable) else int(round(v))


def op_from_name(name: str) -> Optional[str]:
    low = name.lower().replace("-", "_")
    for alias, op in _OP_ALIASES:
        if alias in low:
            return op
    return None


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
    logs: List[NcclTestsLog] = []
    cur = NcclTestsLog(source=source)

    def start_new():
        nonlocal cur
        if cur.rows or cur.columns:
            logs.append(cur)
            cur = NcclTestsLog(source=source)

    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = _clean(raw)
        s = line.strip()
        if not s:
            continue
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
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise InputFileError(p, f"cannot read: {e.strerror}") from None
    return parse_nccl_tests(text, source=str(p), op=op)


# ----------------------------------------------------------------------------- to measurements


def normalize_bus_id(printed: str) -> str:
    """nccl-tests' "0000:b4:00" / "0x1b" -> NVML's "00000000:B4:00.0" form (device 0 assumed for 0x..)."""
    s = printed.strip().lower()
    m = re.fullmatch(r"([0-9a-f]{1,8}):([0-9a-f]{1,2}):([0-9a-f]{1,2})(?:\.([0-7]))?", s)
    if m:
        return f"{int(m.group(1), 16):08X}:{int(m.group(2), 16):02X}:{int(m.group(3), 16):02X}.{m.group(4) or 0}"
    m = re.fullmatch(r"0x([0-9a-f]{1,2})", s)
    if m:
        return f"00000000:{int(m.group(1), 16):02X}:00.0"
    return printed.strip()


def device_keys(log: NcclTestsLog) -> Tuple[List[int], bool]:
    """(the GPU index of each rank, True if they are NVML-like device indices of one host).

    One host with distinct devices: the printed CUDA device numbers. Otherwise (several hosts,
    or two ranks on one device) the rank numbers, since device numbers would collide.
    """
    if not log.ranks:
        return [], False
    devices = [r.device for r in log.ranks]
    if len(log.hosts) == 1 and len(set(devices)) == len(devices):
        return devices, True
    return [r.rank for r in log.ranks], False


def busbw_factor(log: NcclTestsLog) -> float:
    test, fn = OPS[log.op]
    n = len(log.ranks)
    if n >= 1:
        return fn(n) if n > 1 else 1.0
    # No rank lines: recover n from the printed busbw/algbw ratio at the largest size.
    for r in reversed(log.rows):
        c = r.out_of_place or r.in_place
        if isinstance(c.algbw_gbps, float) and isinstance(c.busbw_gbps, float) and c.algbw_gbps > 0:
            return c.busbw_gbps / c.algbw_gbps
    return 1.0


def log_measurements(log: NcclTestsLog, link_class: Optional[str] = None) -> List[Measurement]:
    test, _ = OPS[log.op]
    gpus, _ = device_keys(log)
    factor = busbw_factor(log)
    timing = "wall" if log.time_kind == "cputime" else "cuda-events"
    out = []
    for row, inplace, c in log.cells():
        extra: Dict[str, Any] = {
            "source": "nccl-tests", "file": Path(log.source).name, "in_place": inplace,
            "count": row.count, "dtype": row.dtype, "redop": row.redop, "root": row.root,
            "ranks": len(log.ranks) or None,
            "printed": {"time_us": _json_num(c.time_us), "algbw_gbps": _json_num(c.algbw_gbps),
                        "busbw_gbps": _json_num(c.busbw_gbps), "wrong": _json_num(c.wrong)},
        }
        if c.per_iter:
            extra["per_iter"] = {k: _json_num(v) for k, v in c.per_iter.items()}
        wrong = 0
        if isinstance(c.wrong, NotAvailable):
            extra["wrong_not_available"] = c.wrong.reason
        else:
            wrong = int(c.wrong)
        samples = [c.time_us * 1e-6] if isinstance(c.time_us, float) and c.time_us > 0 else []
        if not samples:
            extra["time_not_available"] = "nccl-tests printed no usable time"
        out.append(Measurement(test=test, gpus=tuple(gpus), size_bytes=row.size_bytes, samples_s=samples,
                               timing=timing, fabric="cuda", link_class=link_class, direction=None,
                               bytes_per_iter=row.size_bytes, busbw_factor=factor, wrong=wrong, extra=extra))
    return out


def _json_num(v):
    if isinstance(v, NotAvailable):
        return v.to_json()
    return v


def log_summary(log: NcclTestsLog) -> Dict[str, Any]:
    """What nccl_tests.json keeps per log (the run-level facts a Measurement cannot hold)."""
    peak, peak_size, peak_inplace = log.peak
    gpus, are_devices = device_keys(log)
    wrong_cells = [c.wrong for _, _, c in log.cells()]
    counted = [w for w in wrong_cells if isinstance(w, int)]
    return {
        "file": Path(log.source).name, "path": str(log.source), "op": log.op, "test": OPS[log.op][0],
        "program": log.program, "nccl_tests_version": log.version, "nccl_library": log.nccl_library,
        "nccl_headers": log.nccl_headers, "config": dict(log.config), "time_column": log.time_kind,
        "ranks": len(log.ranks) or None, "hosts": log.hosts, "gpus": gpus, "gpus_are": "devices" if are_devices else "ranks",
        "devices": [r.to_json() for r in log.ranks], "sizes": len(log.rows),
        "avg_busbw_gbps": log.avg_busbw_gbps,
        "avg_busbw_meaning": "nccl-tests 'Avg bus bandwidth' as printed: the mean busbw over all sizes "
                             "(in-place and out-of-place), not the peak",
        "peak_busbw_gbps": peak, "peak_size_bytes": peak_size, "peak_in_place": peak_inplace,
        "wrong": sum(counted) if counted else None,
        "wrong_checked": len(counted) == len(wrong_cells),
        "out_of_bounds": log.out_of_bounds, "errors": list(log.errors), "notes": list(log.notes),
        "problems": list(log.problems),
    }


def check_op(op: Optional[str]) -> Optional[str]:
    """An --op value, exactly: "all_reduce", "allreduce", "all_reduce_perf", "collective.all_reduce"."""
    if op is None:
        return None
    name = op.strip().lower().replace("-", "_")
    name = re.sub(r"^collective\.", "", name)
    name = re.sub(r"_perf(_mpi)?$", "", name)
    found = dict(_OP_ALIASES).get(name)
    if found is None:
        raise UsageError(f"unknown nccl-tests op {op!r}; known: {', '.join(sorted(OPS))}")
    return found
