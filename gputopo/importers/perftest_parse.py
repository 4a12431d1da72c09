"""linux-rdma/perftest bandwidth output (``ib_write_bw``, ``ib_read_bw``, ``ib_send_bw``, with
or without ``--use_cuda``) into a PerftestOutput: the test's title and header (device, transport,
link type, connection, queue pairs, MTU), the GPU buffer lines of ``--use_cuda``, every result
row as printed, and the failures perftest prints instead of results.

Units, as perftest's source has them (src/perftest_parameters.h and print_report_bw in
src/perftest_parameters.c of linux-rdma/perftest):

- ``BW peak[MB/sec]`` / ``BW average[MB/sec]`` (before 24.07) and ``[MiB/sec]`` (since 24.07:
  commit 1d202bb "Display proper unit for MiB/sec results" only renamed the header) are the same
  figure: bytes / (seconds x ``format_factor``) with ``format_factor = 0x100000`` (2^20 bytes).
- ``[Gb/sec]`` (``--report_gbits``): ``format_factor = 125000000`` bytes, i.e. 10^9 bits.

Every figure is kept as printed with its unit, and as Gb/s (10^9 bits) beside it. A bidirectional
test (``-b``) prints the sum of both directions. The peak is printed as 0.00 where perftest does
not measure it (``-D`` duration runs, ``--run_infinitely``), so only the average is judged.

Failures (stderr lines: ``Couldn't allocate MR``, ``Failed to create MR``, ``Completion with error
at client`` and its ``Failed status`` line, ``Couldn't read remote address``, ``Couldn't connect
to``, `` Port number 1 state is Down``...) are kept per line; the report says what each usually
means (report/perftest_findings.py).

The port: perftest's header (ctx_print_test_info) prints the device but never the port it used
(``-i`` / ``--ib-port``, default 1: DEF_IB_PORT), and neither does its ``--out_json`` report. It is
taken from what the output does show: perftest's own error about the port (`` Port number 2 state
is Down``, `` Unable to query port 2 attributes``), else the command line where the paste shows
it at a prompt (``-i 2``, ``-i2``, ``--ib-port=2``; no ``-i`` there is perftest's default, 1).
Without either the port is not known and PerftestOutput.port_used says it is assumed to be 1.
The device comes from the header (``Device : mlx5_0``), else from the command line's ``-d``.

With ``--bidirectional --report-both`` perftest prints the combined table, then `` Local
results:`` and `` Remote results:`` tables of one direction each: their rows are kept with
``part`` "local" / "remote" and are not the run's figure.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gputopo.model.flagged_lines import flagged_line, line_where
from gputopo.text_input import CappedList, elision_problem

#: perftest's format_factor per printed unit: bytes per second of one unit ("MB" is 2^20 bytes
#: in perftest's source before 24.07 printed "MiB"; "Gb" is 10^9 bits).
UNIT_BYTES_PER_S = {"MB/sec": float(1 << 20), "MiB/sec": float(1 << 20), "Gb/sec": 125_000_000.0}

_TITLE = re.compile(r"^(?P<verb>RDMA_Write|RDMA_Read|Send|Atomic|Write_imm|Send_imm|\w+)\s+"
                    r"(?:(?!Bidirectional\b|Post\b|BW\b)\w+\s+)?"
                    r"(?P<bi>Bidirectional\s+)?(?P<pl>Post List\s+)?BW\s+(?:forwarding\s+)?(?:Multicast\s+)?Test\s*$")
_LAT_TITLE = re.compile(r"^\S+\s+(?:\w+\s+)?Latency\s+.*Test\s*$")
_RESULT_HEADER = re.compile(
    r"^#bytes\s+(?P<sl>#sl\s+)?#?iterations\s+BW peak\[(?P<u1>[^\]]+)\]\s+BW average\[(?P<u2>[^\]]+)\]"
    r"\s+MsgRate\[Mpps\]")
_NUM = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|-?nan|-?inf)"
_ROW = re.compile(rf"^(\d+)\s+(\d+)\s+{_NUM}\s+{_NUM}\s+{_NUM}(?:\s+(.*))?$", re.IGNORECASE)
_ROW_QOS = re.compile(rf"^(\d+)\s+(\d+)\s+(\d+)\s+{_NUM}\s+{_NUM}\s+{_NUM}\s*$", re.IGNORECASE)
_DASHES = re.compile(r"^-{20,}$")
#: perftest's own warnings, printed wherever the test is when it reads the CPU's frequency
#: (get_cpu_mhz in perftest's get_clock.c): inside the result table too, between its header and rows
#: when the governor is not pinned; they end nothing.
_PERFTEST_WARNING = re.compile(r"^(?:Conflicting CPU frequency values detected|Test integrity may be harmed"
                               r"|Warning: measured timestamp frequency)", re.IGNORECASE)
_HEADER_KEYS = {  # as perftest prints them (ctx_print_test_info) -> our name
    "Dual-port": "dual_port", "Device": "device", "Number of qps": "qps", "Transport type": "transport",
    "Connection type": "connection", "Using SRQ": "srq", "Mtu": "mtu", "Link type": "link_type",
    "TX depth": "tx_depth", "RX depth": "rx_depth", "CQ Moderation": "cq_moderation", "GID index": "gid_index",
    "Max inline data": "max_inline", "Outstand reads": "outstanding_reads", "rdma_cm QPs": "rdma_cm",
    "Data ex. method": "exchange", "Post List": "post_list", "PCIe relax order": "pcie_relax_order",
    "ibv_wr* API": "ibv_wr_api", "Lock-free": "lock_free", "Using DDP": "ddp",
}
_HEADER_RE = {k: re.compile(rf"(?:^|\s){re.escape(k)}\s*:\s*(\S+)") for k in _HEADER_KEYS}
_CUDA_NAME = re.compile(r"\[pid = \d+, dev = (\d+)\] device name = \[(.*)\]")
_CUDA_PICK = re.compile(r"Picking device No\.\s*(\d+)")
_CUDA_LIST = re.compile(r"^CUDA device (\d+): PCIe address is ([0-9A-Fa-f]+:[0-9A-Fa-f]+)")
_TOOL = re.compile(r"\b(ib_(?:write|read|send|atomic)_bw)\b")
_MR_ERRNO = re.compile(r"Couldn't allocate MR(?: with error=(\d+))?", re.IGNORECASE)
_STATUS = re.compile(r"Failed status(?:-(?P<text>.*?)\s*\((?P<n1>\d+)\)|\s+(?P<n2>\d+))\s*:", re.IGNORECASE)
_COMPLETION = re.compile(r"Completion with error at (client|server)", re.IGNORECASE)
#: perftest's own lines naming the port (set_link_layer in perftest_parameters.c, stderr)
_PORT_STATE = re.compile(r"Port number (\d+) state is (\S+(?: \S+)?)")
_PORT_QUERY = re.compile(r"Unable to query port (\d+) attributes|Link layer on port (\d+) is Unknown")
_PART = re.compile(r"^(Local|Remote) results:\s*$")
#: perftest's -i default (DEF_IB_PORT in perftest_parameters.h)
DEFAULT_IB_PORT = 1

#: How perftest marks its own errors (perftest_resources.c, perftest_parameters.c, perftest_communication.c:
#: fprintf(stderr, ...)): "Couldn't ...", "Unable to ...", "Failed to ...", " Completion with error at
#: ...", "Failed status N: ...", "ERROR: ...". perftest exits after each.
_FLAGGED = re.compile(r"(?:Couldn't|Could not|Unable to|Failed to|failed to|Completion with error|Failed status|"
                      r"ERROR\b)")
#: (pattern, failure kind); the first that matches a line names its failure.
_FAILURES: tuple[tuple[re.Pattern, str], ...] = (
    (_PORT_STATE, "port-not-active"),
    (_PORT_QUERY, "device"),
    (_MR_ERRNO, "memory-registration"),
    (re.compile(r"failed to create mr", re.IGNORECASE), "memory-registration"),
    (re.compile(r"OFED stack does not support DMA-BUF|DMA-BUF is not supported", re.IGNORECASE),
     "memory-registration"),
    (_COMPLETION, "completion-error"),
    (re.compile(r"Couldn't read remote address|Couldn't connect to \S+|Unable to init the socket connection|"
                r"Failed to exchange data between server and clients|Couldn't get remote|"
                r"Unable to open file descriptor for socket connection|Failed to connect|"
                r"Couldn't exchange", re.IGNORECASE), "peer-unreachable"),
    (re.compile(r"No IB devices found|IB device \S+ not found|Couldn't get context for the device|"
                r"Unable to find the Infiniband/RoCE device", re.IGNORECASE), "device"),
    (re.compile(r"Couldn't set the link layer|Couldn't create IB resources|Failed to create QP|Couldn't create QP|Failed to modify QP|"
                r"Couldn't create CQ|Couldn't allocate PD|Failed to init", re.IGNORECASE), "setup"),
)


def to_gbps(value: float, unit: str) -> float | None:
    """A figure in one of perftest's units as Gb/s (10^9 bits per second); None for another unit."""
    per = UNIT_BYTES_PER_S.get(unit)
    return None if per is None else value * per * 8 / 1e9


@dataclass
class PerftestRow:
    """One result row as printed: message size in bytes, iterations, BW peak and average in
    ``unit``, message rate in Mpps (millions of messages per second)."""

    line: int
    size_bytes: int
    iterations: int
    bw_peak: float
    bw_average: float
    msg_rate_mpps: float
    unit: str
    sl: int | None = None
    #: "local" / "remote" for the one-direction tables of --report-both; None for the run's own
    part: str | None = None

    def to_json(self) -> dict[str, Any]:
        avg = to_gbps(self.bw_average, self.unit)
        peak = to_gbps(self.bw_peak, self.unit)
        return {"line": self.line, "size_bytes": self.size_bytes, "iterations": self.iterations,
                "bw_peak": self.bw_peak, "bw_average": self.bw_average, "unit": self.unit,
                "msg_rate_mpps": self.msg_rate_mpps, "sl": self.sl, "part": self.part,
                "bw_average_gbps": round(avg, 4) if avg is not None else None,
                "bw_peak_gbps": round(peak, 4) if peak is not None else None}


@dataclass
class PerftestFailure:
    """What perftest printed instead of (or after) its results: ``kind`` is memory-registration,
    completion-error, peer-unreachable, device or setup; ``lines`` the lines as printed."""

    kind: str
    line: int
    message: str
    lines: list[str] = field(default_factory=list)
    errno: int | None = None
    wc_status: int | None = None
    wc_status_text: str | None = None
    side: str | None = None  # "client" | "server" for a completion error
    port: int | None = None  # the port of " Port number N state is Down"
    port_state: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items()}


@dataclass
class PerftestOutput:
    source: str
    tool: str | None = None  # ib_write_bw ... when a prompt line names it
    title: str | None = None
    verb: str | None = None  # RDMA_Write | RDMA_Read | Send | ...
    bidirectional: bool = False
    latency_test: bool = False
    role: str | None = None  # "server" when it waited for a client
    header: dict[str, str] = field(default_factory=dict)
    unit: str | None = None
    units_seen: list[str] = field(default_factory=list)
    use_cuda: bool = False
    #: --use_rocm (perftest's AMD GPU memory option): the buffers were GPU memory, on ROCm
    use_rocm: bool = False
    #: --run_infinitely on its command line: a row per interval, the same size repeated
    run_infinitely: bool = False
    cuda_dmabuf: bool = False
    gpu_name: str | None = None
    gpu_index: int | None = None
    #: CUDA device -> its PCIe "bus:device" as perftest lists them ("CUDA device 0: PCIe address is 17:00")
    cuda_devices: dict[int, str] = field(default_factory=dict)
    rows: list[PerftestRow] = field(default_factory=list)
    failures: list[PerftestFailure] = field(default_factory=list)
    #: every line perftest marked as an error (model/flagged_lines.py), whether a failure kind
    #: above knows it or not
    flagged: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=lambda: CappedList(200))
    notes: list[str] = field(default_factory=lambda: CappedList(50))
    hostname: str | None = None
    run_number: int | None = None  # k of runs_in_file, where a file holds several runs
    runs_in_file: int | None = None
    #: "text" (what perftest printed) or "out_json" (its --out_json report, perftest_json.py)
    source_format: str = "text"
    #: how the unit of an --out_json figure was told (the file holds none)
    unit_derived: str | None = None
    #: --out_json's bw_avg / msgRate_avg written alone (--output=bandwidth): {key, value}
    json_only_figure: dict[str, Any] | None = None
    #: the port perftest names (its error about the port, else -i on the command line), and where
    ib_port: int | None = None
    ib_port_from: str | None = None
    #: the line of the command line at a prompt (its -i / -d are read), where the paste has one
    command_line: int | None = None
    command_device: str | None = None
    dual_port_cmd: bool = False

    @property
    def device(self) -> str | None:
        return self.header.get("device") or self.command_device

    def port_used(self) -> tuple[int, str, bool]:
        """(port, where that comes from, whether it is assumed): perftest's error or -i where the
        output shows one; the -i default (1) where the command line shows none; else 1, assumed."""
        if self.ib_port is not None:
            return self.ib_port, self.ib_port_from or "printed", False
        if self.command_line is not None:
            return (DEFAULT_IB_PORT, f"perftest's -i default: the command line (line {self.command_line}) "
                                     "gives no -i", False)
        return DEFAULT_IB_PORT, (f"port not printed: assumed {DEFAULT_IB_PORT} (perftest's -i default; "
                                 "perftest prints no port" + (" in --out_json" if self.source_format == "out_json"
                                                               else "") + ")"), True

    @property
    def test_name(self) -> str:
        """``ib_write_bw`` & co. from the prompt, else from the title."""
        if self.tool:
            return self.tool
        verb = {"RDMA_Write": "ib_write_bw", "RDMA_Read": "ib_read_bw", "Send": "ib_send_bw",
                "Atomic": "ib_atomic_bw"}.get(self.verb or "")
        return verb or "perftest"

    def summary(self) -> dict[str, Any]:
        return {"tool": "perftest", "test": self.test_name, "file": self.source.rsplit("/", 1)[-1],
                "run": self.run_number, "runs_in_file": self.runs_in_file,
                "path": self.source, "title": self.title, "verb": self.verb, "bidirectional": self.bidirectional,
                "role": self.role, "header": dict(self.header), "device": self.device, "unit": self.unit,
                "unit_meaning": _unit_meaning(self.unit), "use_cuda": self.use_cuda,
                "use_rocm": self.use_rocm, "run_infinitely": self.run_infinitely, "cuda_dmabuf": self.cuda_dmabuf, "gpu_name": self.gpu_name, "gpu_index": self.gpu_index,
                "source_format": self.source_format, "unit_derived": self.unit_derived,
                "json_only_figure": self.json_only_figure, "command_device": self.command_device,
                **dict(zip(("ib_port", "ib_port_from", "ib_port_assumed"), self.port_used())),
                "gpu_pci": self.cuda_devices.get(self.gpu_index) if self.gpu_index is not None else None,
                "rows": [r.to_json() for r in self.rows],
                "perftest_failures": [f.to_json() for f in self.failures],
                "flagged_lines": list(self.flagged),
                # "failures" is nvbandwidth's testcase failures in imported.json; perftest's are above
                "failures": [], "problems": list(self.problems), "notes": list(self.notes)}


def _unit_meaning(unit: str | None) -> str | None:
    if unit in ("MB/sec", "MiB/sec"):
        return f"{unit}: 2^20 bytes per second (perftest's format_factor 0x100000)"
    if unit == "Gb/sec":
        return "Gb/sec: 10^9 bits per second (perftest's format_factor 125000000 bytes, --report_gbits)"
    return None


class _Parser:
    def __init__(self, out: PerftestOutput):
        self.out = out
        self.runs = [out]
        self.in_rows = False
        self.row_unit: str | None = None
        self.qos = False
        self.part: str | None = None  # "local" / "remote" after --report-both's headings

    def _next_run(self, lineno: int) -> None:
        """A second test in the same file (a loop over devices, server and client pasted
        together): its rows and failures are its own, never merged with the first's device."""
        cur = self.out
        if cur.title is None and not cur.rows and not cur.failures:
            return
        self.out = PerftestOutput(source=cur.source)
        self.out.notes.append(f"line {lineno}: another perftest run starts here (run {len(self.runs) + 1} of the file)")
        self.runs.append(self.out)
        self.in_rows = False
        self.part = None

    def feed(self, lineno: int, raw: str) -> None:
        s = raw.strip()
        out = self.out
        if not s:
            return
        if _FLAGGED.match(s) and len(out.flagged) < 200:
            out.flagged.append(flagged_line(s, tool="perftest", where=line_where(out.source, lineno), host=out.hostname,
                                            fails_run=True))
        if _PERFTEST_WARNING.match(s):
            if not any("perftest's CPU-frequency warning" in n for n in out.notes):
                out.notes.append(f"line {lineno}: perftest's CPU-frequency warning ({s[:90]!r}): the CPU governor "
                                 "is not pinned (cpupower frequency-set -g performance); the rows around it are read")
            return
        if self.in_rows:
            if self._row(lineno, s):
                return
            self.in_rows = False
        mp = _PART.match(s)
        if mp:
            self.part = mp.group(1).lower()
            return
        if _DASHES.match(s) or s.startswith("*"):
            if "Waiting for client" in s:
                if out.rows or out.failures:
                    self._next_run(lineno)
                self.out.role = "server"
            return
        m = _RESULT_HEADER.match(s)
        if m:
            u1, u2 = m.group("u1").strip(), m.group("u2").strip()
            if u1 != u2 or u1 not in UNIT_BYTES_PER_S:
                out.problems.append(f"line {lineno}: result header with unit {u1!r}/{u2!r}, not one perftest "
                                    "prints (MB/sec, MiB/sec, Gb/sec): its rows are not read")
                return
            self.in_rows, self.row_unit, self.qos = True, u1, bool(m.group("sl"))
            if out.unit is None:
                out.unit = u1
            if u1 not in out.units_seen:
                out.units_seen.append(u1)
            return
        if self._failure(lineno, s):
            return
        m = _TITLE.match(s)
        if m:
            if out.title is not None or out.rows or out.failures:
                self._next_run(lineno)
                out = self.out
            out.title, out.verb, out.bidirectional = s, m.group("verb"), bool(m.group("bi"))
            return
        if _LAT_TITLE.match(s):
            if out.title is not None or out.rows or out.failures:
                self._next_run(lineno)
                out = self.out
            out.title, out.latency_test = s, True
            return
        hit = False
        for key, rx in _HEADER_RE.items():
            mm = rx.search(s)
            if mm and (s.startswith(key) or f"\t{key}" in raw or f"  {key}" in raw):
                out.header[_HEADER_KEYS[key]] = mm.group(1)
                hit = True
        if hit:
            return
        if "Waiting for client" in s:
            out.role = "server"
            return
        self._other(lineno, s)

    def _row(self, lineno: int, s: str) -> bool:
        unit = self.row_unit or ""
        if self.qos:
            m = _ROW_QOS.match(s)
            if m:
                self.out.rows.append(PerftestRow(lineno, int(m.group(1)), int(m.group(3)), float(m.group(4)),
                                                 float(m.group(5)), float(m.group(6)), unit, sl=int(m.group(2)),
                                                 part=self.part))
                return True
        else:
            m = _ROW.match(s)
            if m:
                vals = [float(m.group(k)) for k in (3, 4, 5)]
                if any(v != v or v in (float("inf"), float("-inf")) or v < 0 for v in vals):
                    self.out.problems.append(f"line {lineno}: a result row with a negative or non-finite "
                                             f"figure ({s[:80]!r}): left out")
                    return True
                self.out.rows.append(PerftestRow(lineno, int(m.group(1)), int(m.group(2)), vals[0], vals[1], vals[2],
                                                 unit, part=self.part))
                return True
        if re.match(r"^\d+(\s+[\d.]+)*\s*$", s):
            self.out.problems.append(f"line {lineno}: result row cut short ({s[:80]!r}): its figures are "
                                     "not all there, so it is left out")
            return True
        return False

    def _failure(self, lineno: int, s: str) -> bool:
        out = self.out
        st = _STATUS.search(s)
        if st and out.failures and out.failures[-1].kind == "completion-error":
            f = out.failures[-1]
            f.wc_status = int(st.group("n1") or st.group("n2"))
            f.wc_status_text = (st.group("text") or "").strip() or None
            f.lines.append(s)
            return True
        for rx, kind in _FAILURES:
            m = rx.search(s)
            if not m:
                continue
            last = out.failures[-1] if out.failures else None
            if kind == "setup" and last is not None:  # "Couldn't create IB resources" after its cause
                last.lines.append(s)
                return True
            if last is not None and last.kind == "port-not-active" and kind == "device":
                last.lines.append(s)  # " Couldn't get context for the device": check_link's caller, after it
                return True
            if last is not None and last.kind == kind and lineno - last.line <= 4 + len(last.lines):
                last.lines.append(s)
            else:
                last = PerftestFailure(kind=kind, line=lineno, message=s, lines=[s])
                out.failures.append(last)
            if rx is _MR_ERRNO and m.group(1):
                last.errno = int(m.group(1))
            if rx is _PORT_STATE or rx is _PORT_QUERY:
                port = int(next(g for g in m.groups() if g and g.isdigit()))
                if rx is _PORT_STATE:
                    last.port, last.port_state = port, m.group(2)
                if out.ib_port is None or not (out.ib_port_from or "").startswith("perftest's error"):
                    out.ib_port, out.ib_port_from = port, f"perftest's error {s.strip()[:60]!r} (line {lineno})"
            if kind == "completion-error":
                last.side = m.group(1).lower()
                st = _STATUS.search(s)  # printed on one line when pasted so
                if st:
                    last.wc_status = int(st.group("n1") or st.group("n2"))
                    last.wc_status_text = (st.group("text") or "").strip() or None
            return True
        if re.match(r"^s?cnt=\d+|^rcnt=\d+|^ccnt=", s) and out.failures:
            out.failures[-1].lines.append(s)
            return True
        return False

    def _command(self, lineno: int, args: str) -> None:
        """The -i (port) and -d (device) of a command line shown at a prompt (getopt's forms:
        ``-i 2``, ``-i2``, ``--ib-port=2``, ``--ib-port 2``); -O runs on ports 1 and 2."""
        out = self.out
        try:
            toks = shlex.split(args, comments=False)
        except ValueError:  # an unbalanced quote in a paste
            toks = args.split()
        port: str | None = None
        flag = ""
        k = 0
        while k < len(toks):
            t = toks[k]
            if t in ("|", "|&", ">", ">>", "&&", "||", ";", "2>&1", "&") or t.startswith((">", "2>")):
                break
            nxt = toks[k + 1] if k + 1 < len(toks) else None
            if t in ("-i", "--ib-port") and nxt is not None:
                port, flag, k = nxt, f"{t} {nxt}", k + 2
                continue
            if t.startswith("--ib-port="):
                port, flag = t.split("=", 1)[1], t
            elif re.fullmatch(r"-i\d+", t):
                port, flag = t[2:], t
            elif t in ("-d", "--ib-dev") and nxt is not None:
                out.command_device, k = nxt, k + 2
                continue
            elif t.startswith("--ib-dev="):
                out.command_device = t.split("=", 1)[1]
            elif re.fullmatch(r"-d[A-Za-z]\S*", t):
                out.command_device = t[2:]
            elif t in ("-O", "--dualport"):
                out.dual_port_cmd = True
            k += 1
        out.command_line = lineno
        if port is None:
            return
        if port.isdigit() and 1 <= int(port) <= 255:
            if out.ib_port is None:
                out.ib_port, out.ib_port_from = int(port), f"the command line ({flag}, line {lineno})"
        else:
            out.problems.append(f"line {lineno}: the command line's {flag!r} is not a port number perftest "
                                "takes: the port is not known")
            out.command_line = None

    def _other(self, lineno: int, s: str) -> None:
        out = self.out
        m = _TOOL.search(s)
        if m and ("$" in s or "#" in s or s.startswith(m.group(1)) or "/" in s):
            if out.rows or out.failures or (out.title is not None and out.tool is not None):
                self._next_run(lineno)  # the prompt of the next test
                out = self.out
            out.tool = out.tool or m.group(1)
            self._command(lineno, s[m.end():])
            if "--use_cuda" in s:
                out.use_cuda = True
            if "--use_rocm" in s:
                out.use_rocm = True
            if "--run_infinitely" in s:
                out.run_infinitely = True
            if "--use_cuda_dmabuf" in s:
                out.cuda_dmabuf = True
            host = re.match(r"^\[?[\w.-]+@([\w.-]+)[:\s\]]", s)  # user@host:/dir# or [user@host dir]#
            if host:
                out.hostname = out.hostname or host.group(1)
            return
        m = _CUDA_LIST.match(s)
        if m:
            out.use_cuda = True
            out.cuda_devices[int(m.group(1))] = m.group(2).lower()
            return
        if s.startswith(("initializing CUDA", "creating CUDA Ctx", "making it the current CUDA Ctx",
                         "cuMemAlloc()", "allocated GPU buffer", "Listing all CUDA devices", "CUDA device ",
                         "There are ", "Perftest doesn't supports CUDA")):
            out.use_cuda = True
            return
        if s.startswith("using DMA-BUF") or "Calling ibv_reg_dmabuf_mr" in s or "mlx5dv_reg_dmabuf_mr" in s:
            out.use_cuda = out.use_cuda or "GPU" in s
            out.cuda_dmabuf = True
            return
        m = _CUDA_NAME.search(s)
        if m:
            out.use_cuda, out.gpu_index, out.gpu_name = True, int(m.group(1)), m.group(2).strip()
            return
        m = _CUDA_PICK.search(s)
        if m:
            out.use_cuda, out.gpu_index = True, int(m.group(1))
            return
        if s.startswith(("local address:", "remote address:", "GID:", "ulimit", "unlimited", "WARNING:")):
            return
        if _ROW.match(s) or _ROW_QOS.match(s):
            # a result row where no table is open (a line perftest does not print came between its
            # header and this row): a measurement left out is said, never dropped silently
            out.problems.append(f"line {lineno}: a result row outside its table ({s[:80]!r}): a line that is not "
                                "perftest's came between the table's header and this row, so it is left out")
            return
        elided = elision_problem(s, lineno)
        if elided:
            out.problems.append(elided)
            return
        out.notes.append(f"line {lineno}: not a perftest line, left out: {s[:80]!r}")


def parse_perftest_runs(lines: Iterable[tuple[int, str]], source: str) -> list[PerftestOutput]:
    """Every perftest run in the text, in order (usually one)."""
    p = _Parser(PerftestOutput(source=source))
    last = 0
    for lineno, line in lines:
        p.feed(lineno, line)
        last = lineno
    out = p.out
    if p.in_rows and out.rows and not out.failures and not any(q.startswith(f"line {last}:") for q in out.problems):
        out.problems.append(f"line {last}: the output ends inside the result table, without perftest's closing "
                            "dashes: it may have been cut, so larger message sizes may be missing")
    for run in p.runs:
        if len(run.units_seen) > 1:
            run.problems.append(f"result tables in several units ({', '.join(run.units_seen)}): each row keeps its own")
    runs = [r for r in p.runs if r.title is not None or r.rows or r.failures]
    if len(runs) > 1:
        for k, r in enumerate(runs, start=1):
            r.run_number, r.runs_in_file = k, len(runs)
    return runs or p.runs[:1]


def parse_perftest_lines(lines: Iterable[tuple[int, str]], source: str) -> PerftestOutput:
    """The text's one perftest run (the first, where it holds several: parse_perftest_runs)."""
    return parse_perftest_runs(lines, source)[0]
