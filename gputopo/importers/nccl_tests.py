"""nccl-tests text output (all_reduce_perf & co., any version) read into gputopo Measurements.

Three steps, in this order below: the text is parsed line by line into one NcclTestsLog per
test it holds (its header facts, ranks, column names and rows, each row's out-of-place and
in-place cells with the figures as printed); what a log must not hide is kept with it (a log
cut short, rows with negative, non-finite or impossible figures: ``problems``, which the
report turns into findings); and a log becomes Measurements and the per-log facts of its
``imported.json`` entry. Which collective a log holds, and its busbw factor, come from the
collective table (model/collectives.py); what an import gives its folder is nccl_tests_import.py's.

Accepted: the classic header (``# nThread ... validation: 1 graph: 0``) and the newer one (a
``# nccl-tests version`` line, ``# Collective test starting:``, ``unalign:``), rank lines of one
or many hosts (with or without ``Group``), ``cputime`` and per-iteration columns, a timestamp
column, ``N/A`` cells (e.g. ``#wrong`` when validation is off), out-of-place and in-place
columns, the footer (out-of-bounds count, "Avg bus bandwidth"), NCCL INFO lines and MPI/srun
prefixes (``[1,0]<stdout>:``) mixed in, and several tests one after another in one file.
Rows without their header (a table pasted alone, ``kubectl logs --tail``) are read by their
column count; a log that names no collective or rank count gets them from busbw / algbw where
the collective table leaves one answer, and is refused naming --op / --ranks where it leaves
several (name_collective); what was inferred, and what stays unknown, is kept per log and said.
rccl-tests (AMD's fork) prints the same, plus its own and RCCL's version lines: read, and the log
names RCCL. A rank line's bare bus number (``[0x10]``, older releases) stays a bus (gpu_bus_id).

Numbers are kept as printed: nccl-tests rounds algbw/busbw to two decimals, so size/time will
not give back the printed algbw exactly. Each row becomes one Measurement per placement with
one sample (the printed time, which nccl-tests already averaged over its iterations); the
printed time/algbw/busbw go to ``extra["printed"]``. nccl-tests' "Avg bus bandwidth" is the
mean busbw over all sizes (both placements), not the peak; both are kept per log.
"""

from __future__ import annotations

import bisect
import functools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

from gputopo.errors import InputFileError, UsageError
from gputopo.line_prefixes import strip_launcher_prefix
from gputopo.model import Measurement, NotAvailable
from gputopo.model.bus_id import BusOnly, from_nccl_tests
from gputopo.model.collectives import COLLECTIVES, WHOLE, spellings
from gputopo.model.flagged_lines import flagged_line, line_where
from gputopo.model.measurement import FIGURES_OF_GPUS
from gputopo.text_input import elision_mark

__all__ = ["OPS", "Cell", "NcclTestsLog", "Rank", "Row", "bus_id_text", "log_busbw_factor", "check_op", "completeness_problems",
           "device_keys", "drop_negative_rows", "gpu_bus_id", "log_measurements", "log_summary",
           "op_from_name", "parse_nccl_tests", "parse_nccl_tests_file", "parse_nccl_tests_lines"]


# ----------------------------------------------------------------------------- the collectives
# Every collective of the table (nccl-tests runs them all), the spellings of an op in file and
# program names, and the check of an --op value.

#: nccl-tests program / op name -> its entry in the collective table.
OPS = {c.name: c for c in COLLECTIVES}
#: Spellings in file names, one containing another first so "reduce_scatter" wins over "reduce".
_OP_ALIASES = list(spellings().items())


def op_from_name(name: str) -> Optional[str]:
    low = name.lower().replace("-", "_")
    for alias, op in _OP_ALIASES:
        if alias in low:
            return op
    return None


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


# ----------------------------------------------------------------------------- one log, parsed
# Its header facts, ranks, column names and rows, each row's out-of-place and in-place cells
# with the figures as printed (N/A: NotAvailable).


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
    out_of_bounds_status: Optional[str] = None  # "OK" | "FAILED" as printed
    nccl_version: Optional[str] = None  # "NCCL version 2.9.9+cuda11.2" as NCCL printed it
    #: "nccl-tests", or "rccl-tests" (AMD's fork: same output, its own version lines)
    tool: str = "nccl-tests"
    #: the collective library as the log names it: "NCCL", "RCCL"; None where it prints none
    library: Optional[str] = None
    #: what RCCL prints about its platform ("HIP version", "ROCm version"), as printed
    platform: Dict[str, str] = field(default_factory=dict)
    #: the number of ranks where the log has no rank lines: given (--ranks) or inferred
    rank_count: Optional[int] = None
    #: what was not printed but inferred, and how (said in the terminal and the report)
    inferred: List[str] = field(default_factory=list)
    #: what the log does not say (its devices, ...), said instead of a verdict
    unknown: List[str] = field(default_factory=list)
    #: result rows read before any column header (a table pasted alone, `kubectl logs --tail`):
    #: (line number, tokens), read once their layout is inferred
    headerless: List[Tuple[int, List[str]]] = field(default_factory=list)
    avg_busbw_gbps: Optional[float] = None
    errors: List[str] = field(default_factory=list)
    #: the lines the test or NCCL marked (``NCCL WARN``, ``Test CUDA failure``, ...): model/flagged_lines.py
    flagged: List[Dict[str, Any]] = field(default_factory=list)
    #: host -> the RDMA ports NCCL said it uses ("NET/IB : Using [0]mlx5_0:1/IB ..."), where the
    #: output holds NCCL's INFO lines: the NICs the job used (import --nics counts only those)
    nics_used: Dict[str, List[str]] = field(default_factory=dict)
    #: host -> NCCL's index of each port of that list ("[0]mlx5_0:1" -> 0: "mlx5_0:1")
    nics_index: Dict[str, Dict[int, str]] = field(default_factory=dict)
    #: host -> port ("mlx5_0:1") -> its rate in Gb/s as NCCL's INFO lines state it: NCCL >= 2.27's
    #: "NET/IB: [0] mlx5_0:uverbs0:1/IB provider=Mlx5 speed=400000" (Mb/s), or the topology dump's
    #: "+ NET[50.0] - NET/0" (GB/s, NCCL_DEBUG_SUBSYS=GRAPH) by the port's index in the Using list
    nic_rates: Dict[str, Dict[str, float]] = field(default_factory=dict)
    #: host -> NET index -> GB/s of the topology dump's NET links, matched to ports at the end
    net_bw: Dict[str, Dict[int, float]] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)
    #: What makes this log's data incomplete or invalid (drop_negative_rows and
    #: completeness_problems below); the report says it.
    problems: List[str] = field(default_factory=list)

    @property
    def failed_early(self) -> bool:
        """The test printed its own failure line (``Test NCCL failure``, ...) before any result row."""
        return not self.rows and any(f.get("fails_run") for f in self.flagged)

    @property
    def n_ranks(self) -> Optional[int]:
        """The ranks the test ran on: its rank lines, else the given or inferred count."""
        return len(self.ranks) or self.rank_count

    @property
    def validated(self) -> bool:
        """Whether nccl-tests checked the results: not with ``validation: 0`` (-c 0), nor where
        every #wrong cell is N/A (what -c 0 prints, also when the header was not posted)."""
        if self.config.get("validation") == 0:
            return False
        wrong = [c.wrong for _, _, c in self.cells()]
        printed_na = [w for w in wrong if isinstance(w, NotAvailable) and w.reason.startswith("nccl-tests printed")]
        return not (wrong and len(printed_na) == len(wrong))

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
        best: Tuple[Optional[float], Optional[int], Optional[bool]] = (None, None, None)
        for r, inplace, c in self.cells():
            b = c.busbw_gbps
            if isinstance(b, float) and (best[0] is None or b > best[0] or (b == best[0] and r.size_bytes >= best[1])):
                best = (b, r.size_bytes, inplace)
        return best


# ----------------------------------------------------------------------------- the parser
# Lines and rows into NcclTestsLog, one per test in the text.

#: Header and footer lines older nccl-tests printed without their "#" (read as if they had it).
_BARE_HEADER = re.compile(r"^\s*(?:nThread\s|Using devices|Rank\s+\d+\s+(?:Group\s+\d+\s+)?Pid\s|size\s+count\s"
                          r"|\(B\)|out-of-place\b|Out of bounds values|Avg bus bandwidth|Collective test starting"
                          r"|[nr]ccl-tests version\s)")
_NCCL_VERSION = re.compile(r"\bNCCL version (\d+\.\d+\.\d+\S*)")
_RANK = re.compile(r"^#\s*Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+"
                   r"\[([^\]]*)\]\s*(.*)$")
_VERSION = re.compile(r"^#\s*([nr]ccl)-tests version\s+(\S+)(?:\s+[nr]ccl-headers=(\d+))?(?:\s+[nr]ccl-library=(\d+))?")
#: rccl-tests' own version line (no "#"): "rccl-tests: Version develop:448c4c7"
_RCCL_TESTS = re.compile(r"^\s*rccl-tests:\s*Version\s+(\S+)")
#: RCCL's lines under the devices: "RCCL version : 2.22.3-HEAD:7d8d67c", "HIP version  : 6.4...",
#: "ROCm version : 6.4.2.0-..." (and RCCL's INFO line "RCCL version 2.18.3+hip6.0 ...")
_RCCL_VERSION = re.compile(r"\bRCCL version\s*:?\s*(\S+)")
_PLATFORM = re.compile(r"^\s*(HIP version|ROCm version)\s*:\s*(\S+)")
_STARTING = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_WORD_KV = re.compile(r"\b(nThread|nGpus|minBytes|maxBytes)\s+(\d+)")
_COLON_KV = re.compile(r"([A-Za-z][A-Za-z ]*?):\s*(-?\d+)(?:\((\w+)\))?")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)(?:\s+(OK|FAILED))?")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([-+0-9.eE]+|nan|-?inf)", re.IGNORECASE)
_ERROR = re.compile(r"^#\s*error:\s*(.+)$")
#: At most this many flagged lines are kept per log (a flood of one warning repeats one text).
MAX_FLAGGED = 2000
#: nccl-tests' own failure lines (src/common.h CUDACHECK, NCCLCHECK, TESTCHECK): "HOST: Test CUDA
#: failure common.cu:N 'msg'", "HOST: Test NCCL failure common.cu:N 'msg / last'", " .. HOST pid N:
#: Test failure common.cu:N" (older: " .. HOST: Test failure ...", " .. pid N: Test failure ..."; the
#: oldest, 2018's: "NCCL failure all_reduce.cu:95 'msg'", "CUDA failure common.cu:N 'msg'").
_TEST_FAILURE = re.compile(r"(?:\bTest (?:CUDA |NCCL )?failure\b|\b(?:NCCL|CUDA|Cuda) failure (?=[\w./-]+\.cu:\d+)).*$")
#: Who printed it: the words just before the failure ("HOST:", " .. HOST pid N:"), also where the
#: line came in the middle of a result row the failure cut ("   2097152  32768  float  none  -1 HOST: ...").
_TEST_FAILURE_WHO = re.compile(r"(?:^|\s)(?:\.\.\s*)?(?:(?P<host>(?!pid\b)[^\s:]+)\s*)?(?:pid\s+(?P<pid>\d+))?\s*:\s*$")
#: NCCL's own warning lines among the test's output: "host:pid:tid [dev] file.cc:N NCCL WARN msg".
_NCCL_WARN = re.compile(r"^(?:.*?\s)??(?:(?P<host>[^\s:\[\]]+):(?P<pid>\d+):\d+ )?(?:\[(?P<dev>\d+)\] )?"
                        r"(?P<text>(?:[\w./-]+\.\w+:\d+ )?NCCL WARN\b.*)$")
_DATA = re.compile(r"^\s*\d+\s+\d+\s+\S+")
#: NCCL's line naming the RDMA ports it uses: "host:pid:tid [dev] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB
#: [1]mlx5_3:1/RoCE ; OOB eth0:10.0.0.1<0>" (NET/IBext* from the HPC-X plugin alike).
_NET_USING = re.compile(r"(?:^|\s)(?P<host>[^\s:\[\]]+):\d+:\d+ \[\d+\] NCCL INFO NET/IB\w* : Using "
                        r"(?P<devs>(?:\[\d+\]\S+\s*)+)")
_NET_DEV = re.compile(r"\[\d+\]([\w.-]+:\d+)/")
_NET_DEV_INDEX = re.compile(r"\[(\d+)\]([\w.-]+:\d+)/")
#: NCCL >= 2.27 (src/transport/net_ib.cc): "NET/IB: [0] mlx5_0:uverbs0:1/IB provider=Mlx5 speed=400000 ..."
#: (speed in Mb/s; NCCL lists only ports whose state is ACTIVE)
_NET_SPEED = re.compile(r"(?:^|\s)(?P<host>[^\s:\[\]]+):\d+:\d+ \[\d+\] NCCL INFO NET/IB\w* ?: \[(?P<i>\d+)\] "
                        r"(?P<dev>[\w.-]+):[\w.-]+:(?P<port>\d+)/\w+ (?:provider=\S+ )?speed=(?P<speed>\d+)")
#: The topology dump (src/graph/topo.cc ncclTopoPrintRec): "+ NET[50.0] - NET/0 (...)" (GB/s per NET device)
_NET_LINK = re.compile(r"(?:^|\s)(?P<host>[^\s:\[\]]+):\d+:\d+ \[\d+\] NCCL INFO\s+\+ NET\[(?P<bw>[\d.]+)\] - "
                       r"NET/(?P<id>[0-9A-Fa-f]+)\b")
#: A shell command line that runs a test program ("$ ./build/all_reduce_perf -b 8 ...").
_COMMAND = re.compile(r"(?:^|[\s/])(\w+_perf)(?:\s|$)")


def _flagged(s: str, lineno: int, tool: str, source: str) -> Optional[Dict[str, Any]]:
    """A line nccl-tests or NCCL marked as a failure or warning, as model/flagged_lines.py keeps it."""
    if "NCCL WARN" in s:  # first: a WARN may itself say "Cuda failure ..."
        m = _NCCL_WARN.match(s)
        if m:
            return flagged_line(m.group("text"), tool="NCCL", where=line_where(source, lineno), host=m.group("host"),
                                pid=int(m.group("pid")) if m.group("pid") else None,
                                gpu=int(m.group("dev")) if m.group("dev") else None)
    if "failure" in s:
        m = _TEST_FAILURE.search(s)
        if m:
            who = _TEST_FAILURE_WHO.search(s[:m.start()])
            return flagged_line(m.group(0), tool=tool, where=line_where(source, lineno),
                                host=who.group("host") if who else None,
                                pid=int(who.group("pid")) if who and who.group("pid") else None, fails_run=True)
    return None


def _with_ranks(log: "NcclTestsLog") -> List[Dict[str, Any]]:
    """The flagged lines, each with the ranks its process ran (the rank lines' host and pid)."""
    out: List[Dict[str, Any]] = []
    for k, f in enumerate(log.flagged):
        pid = f.get("pid")
        if pid is None and f.get("host") and k + 1 < len(log.flagged):
            # "HOST: Test CUDA failure ..." names no pid; the "Test failure" chain that follows it
            # (" .. HOST pid N: Test failure common.cu:M") is the same process's
            nxt = log.flagged[k + 1]
            if nxt.get("host") == f["host"] and nxt.get("pid") is not None and "Test failure" in str(nxt.get("text")):
                pid = nxt["pid"]
        ranks = [r.rank for r in log.ranks if pid is not None and r.pid == pid
                 and (f.get("host") is None or r.host == f["host"])]
        rec = dict(f, ranks=sorted(set(ranks))) if ranks else dict(f)
        prev = out[-1] if out else None
        if (prev is not None and prev.get("fails_run") and str(rec.get("text", "")).startswith("Test failure ")
                and rec.get("host") == prev.get("host")
                and (prev.get("pid") in (None, rec.get("pid")) or rec.get("pid") is None)):
            # " .. HOST pid N: Test failure common.cu:M": the call chain nccl-tests unwinds after the
            # failure above it (TESTCHECK), kept with it: one failure, not one error per frame
            prev.setdefault("chain", []).append(str(rec["text"])[len("Test failure "):])
            continue
        out.append(rec)
    return out


def _clean(line: str) -> str:
    """The line without launcher prefixes and colours, with "#" put back on the bare header and
    footer lines of older nccl-tests."""
    line = strip_launcher_prefix(line.rstrip("\r\n"))
    if _BARE_HEADER.match(line):
        return "# " + line.strip()
    return line


def _num(tok: str):
    """A printed number, or NotAvailable for N/A; ValueError otherwise."""
    try:
        return float(tok)  # the common case first: every figure of every row
    except ValueError:
        if tok.upper() in ("N/A", "NA", "-"):
            return NotAvailable(f"nccl-tests printed {tok}")
        raise


def _int_or_na(tok: str):
    v = _num(tok)
    return v if isinstance(v, NotAvailable) else int(round(v))


def _header_layout(tokens: List[str]):
    """Split header column names into the leading columns and the placement groups (once per
    header: every row of a log asks it)."""
    return _layout_of(tuple(tokens))


@functools.lru_cache(maxsize=64)
def _layout_of(tokens: Tuple[str, ...]):
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
    return pre, tuple(groups), len(pre) + sum(len(g) for g in groups)


#: The placement columns of every nccl-tests 2.x log (read without a dict per cell).
_COMMON_GROUP = ("time", "algbw", "busbw", "#wrong")


def _cell(names, toks: List[str]) -> Cell:
    if tuple(names) == _COMMON_GROUP:
        return Cell(time_us=_num(toks[0]), algbw_gbps=_num(toks[1]), busbw_gbps=_num(toks[2]),
                    wrong=_int_or_na(toks[3]))
    vals = dict(zip(names, toks))
    wrong_tok = vals.get("#wrong", vals.get("wrong"))
    wrong: Any = NotAvailable("no #wrong column")
    if wrong_tok is not None:
        wrong = _int_or_na(wrong_tok)
    elif "error" in vals:  # very old nccl-tests: max error, not a count (N/A: not checked, -c 0)
        err = _num(vals["error"])
        wrong = err if isinstance(err, NotAvailable) else NotAvailable(
            "old nccl-tests 'error' column (max error, not a count)")
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
    pre, groups, need = layout
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


def parse_nccl_tests(text: str, source: str = "<text>", op: Optional[str] = None,
                     ranks: Optional[int] = None) -> List[NcclTestsLog]:
    """Parse nccl-tests output; one NcclTestsLog per test found. InputFileError if none."""
    return parse_nccl_tests_lines(text.splitlines(), source=source, op=op, ranks=ranks)


def parse_nccl_tests_lines(lines: Iterable[str], source: str = "<text>",
                           op: Optional[str] = None, ranks: Optional[int] = None) -> List[NcclTestsLog]:
    """Parse nccl-tests (or rccl-tests) output given line by line (a file streams: only rows are
    kept). ``op`` and ``ranks`` (--op, --ranks) name the collective and the number of ranks
    where the log does not (no header, no rank lines)."""
    logs: List[NcclTestsLog] = []
    cur = NcclTestsLog(source=source)

    def start_new():
        nonlocal cur
        if cur.rows or cur.columns or cur.headerless or cur.failed_early:
            logs.append(cur)
            cur = NcclTestsLog(source=source)

    any_line = False
    for lineno, raw in enumerate(lines, start=1):
        any_line = True
        line = _clean(raw)
        s = line.strip()
        if not s:
            continue
        if "NCCL INFO NET/" in s:
            u = _NET_USING.search(s)
            if u:
                used = cur.nics_used.setdefault(u.group("host"), [])
                used += [d for d in _NET_DEV.findall(u.group("devs")) if d not in used]
                cur.nics_index.setdefault(u.group("host"), {}).update(
                    {int(i): d for i, d in _NET_DEV_INDEX.findall(u.group("devs"))})
                continue
            sp = _NET_SPEED.search(s)
            if sp:
                cur.nic_rates.setdefault(sp.group("host"), {})[f"{sp.group('dev')}:{sp.group('port')}"] = \
                    int(sp.group("speed")) / 1000
                continue
        if "+ NET[" in s:
            nl = _NET_LINK.search(s)
            if nl:  # NCCL_TOPO_ID(systemId, dev): the low 56 bits are the NET device's index
                cur.net_bw.setdefault(nl.group("host"), {})[int(nl.group("id"), 16) & ((1 << 56) - 1)] = \
                    float(nl.group("bw"))
                continue
        flagged = _flagged(s, lineno, cur.tool, source)
        if flagged is not None:
            if len(cur.flagged) < MAX_FLAGGED:
                cur.flagged.append(flagged)
            continue
        versioned = "ersion" in s  # every version line below says "version" or "Version"
        v = (_NCCL_VERSION.search(s) or _RCCL_VERSION.search(s)) if versioned else None
        if v and (cur.nccl_version is None or not cur.rows):
            cur.nccl_version = v.group(1)
            cur.library = "RCCL" if "RCCL version" in v.group(0) else "NCCL"
        m = (_RCCL_TESTS.match(s) or _PLATFORM.match(s)) if versioned else None
        if m:
            if m.re is _RCCL_TESTS:
                cur.tool, cur.version, cur.library = "rccl-tests", m.group(1), "RCCL"
            else:
                cur.platform[m.group(1)] = m.group(2)
            continue
        if s.startswith("#"):
            body = s.lstrip("#").strip()
            m = _VERSION.match(s)
            if m:
                start_new()
                cur.tool = f"{m.group(1)}-tests"
                cur.library = m.group(1).upper()  # nccl-library= / rccl-library=: the library's version code
                cur.version = m.group(2)
                cur.nccl_headers = int(m.group(3)) if m.group(3) else None
                cur.nccl_library = int(m.group(4)) if m.group(4) else None
                continue
            m = _STARTING.match(s)
            if m:
                if cur.rows:
                    start_new()
                cur.program = m.group(1)
                continue
            if body.startswith("nThread"):
                if cur.rows or cur.headerless:
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
                if cur.headerless:  # rows of an earlier test whose header was not in the text
                    start_new()
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
        if elision_mark(s) and (cur.rows or cur.headerless):  # text_input.py's marks, nccl-tests' own words
            cur.problems.append(f"line {lineno}: '{s}' in place of rows: the sizes left out there are missing "
                                "(the output was elided where it was copied)")
            continue
        if _DATA.match(line) and not cur.columns and not cur.rows:
            cur.headerless.append((lineno, line.split()))
            continue
        cmd = _COMMAND.search(s) if "_perf" in s else None
        if cmd and not cur.rows and not cur.program and op_from_name(cmd.group(1)):
            cur.program = cmd.group(1)  # the command line the output was pasted with
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
        if lg.headerless:
            read_headerless_rows(lg)
    for lg in logs:
        lg.problems = drop_negative_rows(lg) + completeness_problems(lg) + lg.problems
    # a test that printed its column header and then nothing (it hung or died before its first
    # size), or that printed its own failure line before its header: kept, so the import says it
    # instead of refusing the file
    logs = [lg for lg in logs if lg.rows or ((lg.columns or lg.failed_early) and (lg.ranks or lg.config))]
    if not logs:
        raise InputFileError(source, "no nccl-tests result rows found (expected rows of size, count, type, ... "
                                     "time, algbw, busbw, with or without the '#  size  count  type ...' header)")
    for lg in logs:
        name_collective(lg, op, ranks)
    return logs


# ----------------------------------------------------------------------------- what the log leaves out
# Rows without their header (a table pasted alone, `kubectl logs --tail`): the column count
# tells the layout. A log that does not name its collective or its ranks: busbw / algbw tells
# them where the collective table's factors leave one answer; where they leave several, the
# user names them (--op, --ranks). Whatever was inferred is said (``inferred``), and what stays
# unknown too (``unknown``).

#: The leading columns of a result row, by its number of columns (two placements of time,
#: algbw, busbw and #wrong / error follow): nccl-tests 2.x (with root), older 2.x (redop, no
#: root), 1.x and the ops without a reduction in old releases (no redop).
_LEADS = {13: ["size", "count", "type", "redop", "root"], 12: ["size", "count", "type", "redop"],
          11: ["size", "count", "type"]}
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")
_INT = re.compile(r"-?\d+$")


def _lead_fits(lead: List[str], toks: List[str]) -> bool:
    vals = dict(zip(lead, toks))
    return (_INT.match(vals["size"]) is not None and _INT.match(vals["count"]) is not None
            and _WORD.match(vals["type"]) is not None
            and ("redop" not in vals or _WORD.match(vals["redop"]) is not None)
            and ("root" not in vals or _INT.match(vals["root"]) is not None))


def read_headerless_rows(log: NcclTestsLog) -> None:
    """Read the rows found before any column header by their column count; rows of another
    count are problems. Nothing is read (and the log has no rows) when no layout fits."""
    by_count: Dict[int, int] = {}
    for _, toks in log.headerless:
        by_count[len(toks)] = by_count.get(len(toks), 0) + 1
    n = max(by_count, key=lambda k: (by_count[k], k))
    lead = _LEADS.get(n)
    rows = [(ln, toks) for ln, toks in log.headerless if len(toks) == n]
    if lead is None or not all(_lead_fits(lead, toks) for _, toks in rows):
        log.notes.append(f"{len(log.headerless)} row(s) without a column header in a layout of {n} columns "
                         "that nccl-tests does not print: not read")
        log.headerless = []
        return
    # The fourth figure of a placement: a count (#wrong, an integer or N/A) in nccl-tests 2.x,
    # the largest error (1e-07, 0e+00) in older releases.
    fourth = [toks[len(lead) + k] for _, toks in rows for k in (3, 7)]
    wrong = "#wrong" if all(_INT.match(t) or t.upper() == "N/A" for t in fourth) else "error"
    group = ["time", "algbw", "busbw", wrong]
    log.columns = lead + group + group
    for lineno, toks in log.headerless:
        if len(toks) != n:
            log.problems.append(f"line {lineno}: row of {len(toks)} columns where the other rows have {n}: skipped")
            continue
        try:
            row = _parse_row(log, toks, lineno)
        except (ValueError, KeyError) as e:
            log.problems.append(f"line {lineno}: row skipped ({e}; cut or malformed)")
            continue
        if row is not None:
            log.rows.append(row)
    first, last = log.headerless[0][0], log.headerless[-1][0]
    log.inferred.append(
        f"no column header (lines {first}-{last} are result rows without it): read by their {n} columns as "
        f"{', '.join(lead)}, then time (us), algbw, busbw (GB/s) and {wrong} out-of-place and in-place, "
        "as nccl-tests prints them; the time is taken as CUDA-event time (a run with -C prints host time in "
        "the same columns)")
    log.headerless = []


def _ratio_bounds(log: NcclTestsLog) -> Optional[Tuple[float, float]]:
    """The range busbw / algbw lies in, from every cell whose figures are big enough to tell it
    (nccl-tests rounds both to 0.01 GB/s); None when no cell tells it or the cells disagree."""
    lo, hi = 0.0, math.inf
    seen = False
    for _, _, c in log.cells():
        a, b = c.algbw_gbps, c.busbw_gbps
        if not (isinstance(a, float) and isinstance(b, float)) or a < 0.5:
            continue
        seen = True
        lo, hi = max(lo, (b - 0.005) / (a + 0.005)), min(hi, (b + 0.005) / (a - 0.005))
    return (lo, hi) if seen and lo <= hi else None


#: The largest job a rank count is inferred for.
MAX_INFERRED_RANKS = 4096
#: Collectives whose printed busbw / algbw is not their busbw factor: nccl-tests prints
#: hypercube's algbw as (n-1)/n of size / time with a factor of 1 (model/collectives.py), so its
#: rows say nothing of n; it is never inferred, nor held against its figures.
RATIO_IS_NOT_FACTOR = ("hypercube",)


#: Bytes per element of nccl-tests' type names (old and new releases).
DTYPE_BYTES = {"int8": 1, "char": 1, "uint8": 1, "f8e4m3": 1, "f8e5m2": 1, "half": 2, "float16": 2, "bfloat16": 2,
               "int32": 4, "int": 4, "uint32": 4, "float": 4, "float32": 4, "int64": 8, "uint64": 8, "double": 8,
               "float64": 8}
#: nccl-tests' reduction op names (a row of a collective without a reduction prints "none").
REDOPS = ("sum", "prod", "min", "max", "avg", "mulsum", "premulsum")


@dataclass
class RowShape:
    """What a log's rows say of their collective besides busbw / algbw: ``ops``, the collectives
    their redop and root columns allow (None: the columns do not tell); ``per_rank``, printed
    size / (count x element size), which nccl-tests makes 1 for a collective whose buffers are
    whole (all_reduce, broadcast, reduce, sendrecv) and the rank count for one cut in per-rank
    chunks (it prints the whole buffer's size and one rank's count: GetCollByteCount, then
    ``max(sendBytes, expectedBytes)`` and ``nbytes / wordSize`` in common.cu); None where the
    rows do not tell it or disagree."""

    ops: Optional[Tuple[str, ...]] = None
    per_rank: Optional[int] = None
    said: List[str] = field(default_factory=list)

    def allowed(self, c, counts: List[int]) -> List[int]:
        """The rank counts of ``counts`` the rows allow for collective ``c``, in their order: none
        where ``ops`` leaves ``c`` out; where ``per_rank`` is known, all of them for a collective
        with whole buffers if it is 1 (else none), and only ``per_rank`` for one cut in chunks.
        (Decided once per collective, not per count: thousands of counts are asked per log.)"""
        if self.ops is not None and c.name not in self.ops:
            return []
        if self.per_rank is None:
            return list(counts)
        if c.sizing == WHOLE:
            return list(counts) if self.per_rank == 1 else []
        return [self.per_rank] if self.per_rank in counts else []


def row_shape(log: NcclTestsLog) -> RowShape:
    """The RowShape of ``log``'s rows (see there)."""
    shape = RowShape()
    redops = {r.redop for r in log.rows}
    roots = {r.root for r in log.rows}
    allowed = set(OPS)
    if redops and redops <= set(REDOPS):
        allowed &= {c.name for c in COLLECTIVES if c.result.startswith("sum")}
        shape.said.append(f"redop {'/'.join(sorted(redops))}: a reduction")
    elif redops == {"none"}:
        allowed -= {c.name for c in COLLECTIVES if c.result.startswith("sum")}
        shape.said.append("redop none: no reduction")
    if roots == {-1}:
        allowed &= {c.name for c in COLLECTIVES if not c.rooted}
        shape.said.append("root -1: no root")
    elif roots and None not in roots and min(r for r in roots if r is not None) >= 0:
        allowed &= {c.name for c in COLLECTIVES if c.rooted}
        shape.said.append("a root rank")
    if allowed != set(OPS):
        shape.ops = tuple(sorted(allowed))
    multiples = set()
    for r in log.rows:
        elt = DTYPE_BYTES.get(r.dtype)
        if elt and r.count > 0 and r.size_bytes > 0 and r.size_bytes % (r.count * elt) == 0:
            multiples.add(r.size_bytes // (r.count * elt))
    if len(multiples) == 1:
        (shape.per_rank,) = multiples
        shape.said.append(f"size = {shape.per_rank} x count x element size")
    return shape


def fitting(bounds: Tuple[float, float], ops=None, ranks: Optional[int] = None,
            shape: Optional[RowShape] = None) -> Dict[str, List[int]]:
    """Collective -> the rank counts whose busbw factor (the collective table's) lies in
    ``bounds``; only ``ops`` and ``ranks`` where given, and only what the rows' ``shape``
    allows where given."""
    lo, hi = bounds
    out: Dict[str, List[int]] = {}
    for c in COLLECTIVES:
        if (ops is not None and c.name not in ops) or c.name in RATIO_IS_NOT_FACTOR:
            continue
        if ranks:
            counts: Iterable[int] = [ranks] if lo <= c.busbw_factor(ranks) <= hi else []
        else:  # the rank counts whose factor lies in bounds, from the table sorted by factor
            factors, by_factor = _factor_table(c)
            counts = sorted(by_factor[bisect.bisect_left(factors, lo):bisect.bisect_right(factors, hi)])
        ns = list(counts) if shape is None else shape.allowed(c, list(counts))
        if ns:
            out[c.name] = ns
    return out


@functools.lru_cache(maxsize=None)
def _factor_table(c) -> Tuple[List[float], List[int]]:
    """``c``'s busbw factor on 1 .. MAX_INFERRED_RANKS ranks, sorted: (factors, their rank
    counts), made once, so a file of thousands of logs does not compute 4,096 factors of every
    collective for each."""
    pairs = sorted((c.busbw_factor(n), n) for n in range(1, MAX_INFERRED_RANKS + 1))
    return [f for f, _ in pairs], [n for _, n in pairs]


def _wrong_said(log: NcclTestsLog) -> str:
    """The rows' #wrong count where any is above 0 ("" where none is): a fact of the run
    whatever its collective."""
    bad = [(r, c.wrong) for r, _, c in log.cells() if isinstance(c.wrong, int) and c.wrong > 0]
    if not bad:
        return ""
    first = min(r.size_bytes for r, _ in bad)
    return (f"; whatever the collective, {len(bad)} cell(s) count #wrong > 0 (from {first} B): this run's results "
            "were wrong")


def _ranks_text(ns: List[int]) -> str:
    if len(ns) == 1:
        return f"{ns[0]} rank{'s' if ns[0] != 1 else ''}"
    if ns == list(range(ns[0], ns[-1] + 1)):
        return f"{ns[0]}-{ns[-1]}{'+' if ns[-1] == MAX_INFERRED_RANKS else ''} ranks"
    return f"{', '.join(map(str, ns[:4]))}{', ...' if len(ns) > 4 else ''} ranks"


def name_collective(log: NcclTestsLog, op: Optional[str], ranks: Optional[int]) -> None:
    """Set the log's collective (``op``, its program or file name, else busbw / algbw) and, for
    a log without rank lines, its rank count (``ranks``, else busbw / algbw for that
    collective); InputFileError, naming --op and --ranks, where neither the log nor the options
    tell them."""
    if not log.ranks:
        log.unknown.append("which GPUs and hosts ran it: the log has no '# Using devices' rank lines, so its "
                           "figures are the whole job's, tied to no GPU pair")
    if ranks is not None and log.ranks and ranks != len(log.ranks):
        raise InputFileError(log.source, f"--ranks {ranks}, but the log names {len(log.ranks)} ranks")
    given = op or _op_of(log)
    if given is not None and given not in OPS:
        raise InputFileError(log.source, f"unknown nccl-tests op {given!r}; known: {', '.join(sorted(OPS))}")
    bounds = _ratio_bounds(log)
    ratio = f"busbw/algbw = {(bounds[0] + bounds[1]) / 2:.4g}" if bounds else ""
    if given is not None and (log.ranks or ranks):
        log.op, log.rank_count = given, (None if log.ranks else ranks)
        n = log.n_ranks or 1
        factor = OPS[given].busbw_factor(n)
        if bounds is not None and given not in RATIO_IS_NOT_FACTOR and not bounds[0] <= factor <= bounds[1]:
            log.unknown.append(f"why the printed busbw differs: {ratio}, but {given}'s factor on {n} ranks is "
                               f"{factor:.4g} (the collective table's); gputopo's busbw uses {factor:.4g}, the "
                               "printed figures are kept as printed (a wrong --op or --ranks, or an older "
                               "nccl-tests that printed other figures)")
        return
    if given is not None:  # the collective is known; its rank count is not
        log.op = given
        shape = row_shape(log)
        per_rank = RowShape(per_rank=shape.per_rank) if OPS[given].sizing != WHOLE else None
        found = fitting(bounds, ops=[given], shape=per_rank).get(given, []) if bounds else []
        if given in RATIO_IS_NOT_FACTOR:
            log.unknown.append(f"the number of ranks ({given}'s busbw/algbw does not tell it; give --ranks N to "
                               "record it)")
        elif len(found) == 1:
            log.rank_count = found[0]
            log.inferred.append(f"{found[0]} ranks: the log has no rank lines, and {ratio} is {given}'s factor "
                                f"on {found[0]} ranks only (collective table, nccl-tests' GetBw)")
        else:
            why = (f"{ratio} fits {given} on {_ranks_text(found)}" if found
                   else f"{ratio} is {given}'s factor on no rank count up to {MAX_INFERRED_RANKS} (older "
                   "nccl-tests printed other figures for some collectives)" if bounds
                   else "no figures large enough to tell busbw/algbw")
            log.unknown.append(f"the number of ranks ({why}; give --ranks N to record it)")
        return
    if bounds is None:
        failed = next((f for f in log.flagged if f.get("fails_run")), None)
        said = (f"the test failed before its first row ({failed.get('where')}: `{failed['text'][:160]}`); "
                if failed else "")
        raise InputFileError(log.source, said + "cannot tell which collective this is (no 'Collective test "
                                         "starting' line, no op in the file name, no algbw/busbw figures to tell "
                                         "it); name it with --op, e.g. --op all_reduce, and the rank count with "
                                         "--ranks N")
    shape = row_shape(log)
    by_op = fitting(bounds, ranks=ranks, shape=shape)
    if not by_op and shape.said:  # the columns disagree with the ratio: keep to the ratio alone
        shape, by_op = RowShape(), fitting(bounds, ranks=ranks)
    if len(by_op) != 1:
        groups: Dict[str, List[str]] = {}
        for o, ns in by_op.items():
            groups.setdefault("any number of ranks" if len(ns) == MAX_INFERRED_RANKS else _ranks_text(ns), []).append(o)
        fits = "; ".join(f"{', '.join(ops)} on {where}" for where, ops in groups.items()) or "no collective"
        example = next(iter(by_op), "all_reduce")
        cols = f" and their {', '.join(shape.said)}" if shape.said else ""
        raise InputFileError(log.source, f"the rows do not name their collective, and {ratio}{cols} fits {fits}: "
                                         f"name it with --op (e.g. --op {example}) and give the rank count with "
                                         f"--ranks N{_wrong_said(log)}")
    (log.op, ns), = by_op.items()
    how = f"{ratio} is {log.op}'s bus-bandwidth factor (collective table, nccl-tests' GetBw)"
    if shape.said:
        how += f" where the rows' {', '.join(shape.said)} allow it"
    if ranks is not None:
        log.rank_count = ranks
        log.inferred.append(f"collective {log.op}: the log does not name it; {how} on --ranks {ranks}, and no other "
                            "collective's")
    elif len(ns) == 1:
        log.rank_count = ns[0]
        log.inferred.append(f"collective {log.op} on {ns[0]} ranks: the log names neither; {how} on {ns[0]} ranks, "
                            "and no other collective's or rank count's")
    else:
        log.inferred.append(f"collective {log.op}: the log does not name it; {how} on {_ranks_text(ns)}, and no "
                            "other collective's")
        log.unknown.append(f"the number of ranks ({ratio} fits {log.op} on {_ranks_text(ns)}; give --ranks N to "
                           "record it)")


def _op_of(log: NcclTestsLog) -> Optional[str]:
    if log.program:
        found = op_from_name(log.program)
        if found:
            return found
    return op_from_name(Path(log.source).name)


def parse_nccl_tests_file(path, op: Optional[str] = None, ranks: Optional[int] = None) -> List[NcclTestsLog]:
    """Parse a file (streamed; ``-`` is stdin). InputFileError for an unreadable, empty or binary
    file, or one without nccl-tests rows."""
    from gputopo.text_input import text_lines

    with text_lines(str(path), "nccl-tests output (all_reduce_perf & co.)") as lines:
        return parse_nccl_tests_lines(lines, source=str(path), op=op, ranks=ranks)


# ----------------------------------------------------------------------------- what a log must not hide
# A log that stops mid-row or before its footer ("Out of bounds values", "Avg bus bandwidth") is
# from a test that crashed, hung or was killed, or a file that was cut: its last row may be part
# of a line, and its missing sizes are not "fine". Negative times, bandwidths or ``#wrong`` counts
# are not measurements at all. Each such fact is kept per log (``problems`` in its imported.json entry),
# and the report turns it into a finding (report/data_findings.py), so the verdict is not "ok".
# (The inputs an import refuses outright are nccl_tests_import.py's.)

#: Figures of a cell that can never be negative.
_CELL_FIGURES = ("time_us", "algbw_gbps", "busbw_gbps", "wrong")


def _negative(v) -> bool:
    """Negative, or not a finite number at all (nccl-tests printed nan or inf)."""
    return _is_num(v) and not (0 <= v < math.inf)


def _is_num(v) -> bool:
    """A figure read as a number (the parser makes float and int; NotAvailable otherwise)."""
    t = type(v)
    return t is float or t is int or (isinstance(v, (int, float)) and t is not bool)


def _impossible(row, cell, ranks: Optional[int] = None) -> List[str]:
    """Figures no run can print together: a size moved in zero time, an algbw faster than
    size / time or below half of it (printed to 2 decimals, time to 4 digits), a busbw
    above twice the algbw (its factor is below 2 for every op), more wrong elements than the
    ``ranks`` ranks hold. nccl-tests' #wrong is the sum over every rank of the elements each
    found wrong in its result (BenchTime: CheckData, then Allreduce sum), and a rank's result
    holds up to count x ranks elements (all_gather, alltoall): no bound where the log does not
    say its ranks."""
    out = []
    t, alg, bus = cell.time_us, cell.algbw_gbps, cell.busbw_gbps
    if _is_num(t) and t == 0 and row.size_bytes > 0:
        out.append(f"{row.size_bytes} B in 0 us")
    elif _is_num(t) and t > 0 and _is_num(alg):
        expected = row.size_bytes / (t * 1e3)
        # Current nccl-tests print size / time; older ones (issue 37, 2019) printed all_gather's
        # as (n-1)/n of it: anything from half of size / time up to it (rounding allowed) is a
        # real output, beyond that no run can print it.
        if alg > expected * 1.1 + 0.02 or alg < expected * 0.45 - 0.02:
            out.append(f"algbw {alg:g} GB/s but {row.size_bytes} B in {t:g} us is {expected:.3g} GB/s")
    if _is_num(alg) and _is_num(bus) and bus > 2 * alg + 0.02:
        out.append(f"busbw {bus:g} GB/s above twice the algbw {alg:g}")
    if (ranks and _is_num(cell.wrong) and isinstance(row.count, int) and row.count >= 0
            and cell.wrong > row.count * ranks * ranks):
        out.append(f"{cell.wrong} wrong, more than the {row.count * ranks * ranks} elements {ranks} ranks' results "
                   f"hold at count {row.count}")
    return out


def drop_negative_rows(log) -> List[str]:
    """Remove rows with a negative figure from ``log`` (they are no measurement); the problems."""
    problems, kept = [], []
    for row in log.rows:
        bad = [f"{'in-place' if k else 'out-of-place'} {name.split('_')[0]} {getattr(cell, name)}"
               for k, cell in enumerate((row.out_of_place, row.in_place)) if cell is not None
               for name in _CELL_FIGURES if _negative(getattr(cell, name))]
        impossible = [] if bad else [f"{'in-place' if k else 'out-of-place'} {why}"
                                     for k, cell in enumerate((row.out_of_place, row.in_place))
                                     if cell is not None for why in _impossible(row, cell, len(log.ranks))]
        if bad:
            problems.append(f"line {row.line}: negative or non-finite figure(s) ({', '.join(bad)}): row dropped")
        elif impossible:
            problems.append(f"line {row.line}: impossible values ({'; '.join(impossible)}): row dropped")
        else:
            kept.append(row)
    log.rows = kept
    for name in ("avg_busbw_gbps", "out_of_bounds"):
        if _negative(getattr(log, name)):
            problems.append(f"negative or non-finite {name.replace('_gbps', '').replace('_', ' ')} "
                            f"{getattr(log, name)}")
    return problems


def completeness_problems(log) -> List[str]:
    """A log without its footer: the test did not finish, or the file was cut (rows that did
    not parse are noted by the parser as it skips them)."""
    if log.avg_busbw_gbps is not None or log.out_of_bounds is not None:
        return []
    failed = next((f for f in log.flagged if f.get("fails_run")), None)
    if failed is not None:
        # the test said why it stopped (its own failure line, quoted as a tool-flagged error): not
        # "hung, died or cut"
        where = f" on {failed['host']}" if failed.get("host") else ""
        return [f"no footer: the test stopped at its own failure{where} (`{str(failed.get('text'))[:100]}`), "
                + ("before its first result row, so nothing was measured" if not log.rows else
                   f"after line {log.rows[-1].line}, so the sizes after its last row are missing")]
    if not log.rows and log.columns:
        return ["no result row after the column header: the test printed no figure (it hung or died before its "
                "first size, or the log was cut there), so nothing was measured"]
    last = f" after line {log.rows[-1].line}" if log.rows else ""
    return [f"no footer ('Out of bounds values' / 'Avg bus bandwidth'){last}: the test did not finish or "
            "the log was cut, so the sizes after its last row are missing"]


# ----------------------------------------------------------------------------- to Measurements
# A parsed log as Measurements, and the per-log facts of its imported.json entry.


def bus_id_text(printed: str) -> str:
    """What a rank line says of its GPU's PCI address, in words: "0000:b4:00.0", or for the
    older nccl-tests that print only the bus, "bus 0x10 (device and function unknown)"."""
    decoded = from_nccl_tests(printed)
    if isinstance(decoded, BusOnly):
        return f"bus 0x{decoded.bus:02x} (domain, device and function unknown)"
    return decoded.lspci if decoded is not None else printed.strip()


def gpu_bus_id(printed: str):
    """A rank's GPU address for the topology: NVML's form where the line gives one (device 0 of
    a printed device), NotAvailable saying what was printed where it gives only a bus ("0x10":
    two GPUs behind one PCIe switch print the same bus, so no address is made up from it), or
    text it cannot decode."""
    decoded = from_nccl_tests(printed)
    if isinstance(decoded, BusOnly):
        return NotAvailable(f"nccl-tests printed only the bus: {bus_id_text(printed)}")
    if decoded is None:
        return NotAvailable(f"nccl-tests printed {printed.strip()!r}, not a PCI address")
    return decoded.nvml


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


def _op(log: NcclTestsLog) -> str:
    """The log's collective (the parser names it or refuses the log)."""
    if log.op is None:
        raise ValueError(f"{log.source}: which collective the log holds is not known")
    return log.op


def log_busbw_factor(log: NcclTestsLog) -> float:
    """The collective table's factor for the log's op and ranks (busbw / algbw, as nccl-tests
    computed what it printed)."""
    n = log.n_ranks
    if n:
        return OPS[_op(log)].busbw_factor(n)
    # No rank lines: recover n from the printed busbw/algbw ratio at the largest size.
    for r in reversed(log.rows):
        c = r.out_of_place or r.in_place
        if c is not None and isinstance(c.algbw_gbps, float) and isinstance(c.busbw_gbps, float) and c.algbw_gbps > 0:
            return c.busbw_gbps / c.algbw_gbps
    return 1.0


def log_measurements(log: NcclTestsLog, link_class: Optional[str] = None) -> List[Measurement]:
    """One Measurement per printed cell (see :func:`iter_measurements`)."""
    return list(iter_measurements(log, link_class))


def iter_measurements(log: NcclTestsLog, link_class: Optional[str] = None) -> Iterator[Measurement]:
    """One Measurement per printed cell, made as they are asked for (an import writes each as it
    comes: a 200,000-row log never holds 400,000 of them at once)."""
    test = OPS[_op(log)].test
    gpus, _ = device_keys(log)
    factor = log_busbw_factor(log)
    timing = "wall" if log.time_kind == "cputime" else "cuda-events"
    # The log's own facts, once: each walks every row (``validated``), so asking them per cell
    # made 200,000 rows take hours (issue 44).
    validated, n_ranks, file = log.validated, log.n_ranks, Path(log.source).name
    for row, inplace, c in log.cells():
        extra: Dict[str, Any] = {
            "source": "nccl-tests", "file": file, "in_place": inplace,
            "count": row.count, "dtype": row.dtype, "redop": row.redop, "root": row.root,
            "ranks": n_ranks,
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
        if not validated:  # -c 0: nothing was checked, so no #wrong is a result
            extra["data_checked"] = False
        samples = [c.time_us * 1e-6] if isinstance(c.time_us, float) and c.time_us > 0 else []
        if not samples:
            extra["time_not_available"] = "nccl-tests printed no usable time"
        yield Measurement(test=test, gpus=tuple(gpus), size_bytes=row.size_bytes, samples_s=samples,
                          timing=timing, fabric="cuda", figures_of=FIGURES_OF_GPUS, link_class=link_class, direction=None,
                          bytes_per_iter=row.size_bytes, busbw_factor=factor, wrong=wrong, extra=extra)


def _json_num(v):
    if isinstance(v, NotAvailable):
        return v.to_json()
    return v


def log_summary(log: NcclTestsLog) -> Dict[str, Any]:
    """What imported.json keeps per log (the run-level facts a Measurement cannot hold)."""
    peak, peak_size, peak_inplace = log.peak
    gpus, are_devices = device_keys(log)
    wrong_cells = [c.wrong for _, _, c in log.cells()]
    counted = [w for w in wrong_cells if isinstance(w, int)]
    validated = log.validated
    return {
        "file": Path(log.source).name, "path": str(log.source), "op": log.op, "test": OPS[_op(log)].test,
        "program": log.program, "tool": log.tool, "library": log.library, "platform": dict(log.platform),
        "nccl_tests_version": log.version, "nccl_library": log.nccl_library,
        "nccl_headers": log.nccl_headers, "nccl_version": log.nccl_version, "config": dict(log.config), "time_column": log.time_kind,
        "ranks": log.n_ranks, "ranks_from": "rank lines" if log.ranks else ("given or inferred" if log.rank_count else None),
        "hosts": log.hosts, "gpus": gpus, "gpus_are": "devices" if are_devices else "ranks",
        "devices": [{**r.to_json(), "pci": bus_id_text(r.bus_id)} for r in log.ranks], "sizes": len(log.rows),
        "avg_busbw_gbps": log.avg_busbw_gbps,
        "avg_busbw_meaning": "nccl-tests 'Avg bus bandwidth' as printed: the mean busbw over all sizes "
                             "(in-place and out-of-place), not the peak",
        "peak_busbw_gbps": peak, "peak_size_bytes": peak_size, "peak_in_place": peak_inplace,
        "wrong": sum(counted) if counted and validated else None,
        "wrong_checked": len(counted) == len(wrong_cells) and validated,
        "validated": validated, "validation": log.config.get("validation"),
        "out_of_bounds": log.out_of_bounds, "out_of_bounds_status": log.out_of_bounds_status, "errors": list(log.errors), "notes": list(log.notes),
        "flagged_lines": _with_ranks(log), **({"nics_used": log.nics_used} if log.nics_used else {}),
        "problems": list(log.problems),
        "inferred": list(log.inferred), "unknown": list(log.unknown),
    }
