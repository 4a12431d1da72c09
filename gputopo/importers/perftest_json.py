"""perftest's ``--out_json`` report (``--out_json_file=FILE``, default ``perftest_out.json``) into
the same PerftestOutput as its printed text (perftest_parse.py), so it gets the same findings.

What perftest writes (src/perftest_parameters.c of linux-rdma/perftest, write_test_info_to_file
and write_bw_report_to_file; formats REPORT_FMT_JSON & co. in perftest_parameters.h)::

    {
    "test_info": {
    "test": "RDMA_Write_BW_Test",          (verb, [Bidirectional_], [Post_List_], BW_ | Latency_)
    "Dual_port": "OFF",
    "Device": "mlx5_0",
    "Number_of_qps": 1, ... "Link_type": "IB", ["GID_index": 3,] ... "Data_ex_method": "Ethernet"
    },
    "results": {
    "MsgSize": 1048576,
    "n_iterations": 5000,
    "BW_peak": 11133.60,
    "BW_average": 11129.09,
    "MsgRate": 0.011123
    }
    }

Facts of that format this reader keeps to:

- Before perftest 24.01 (commit f9e82f7 "Make output JSON standard") the keys were written
  unquoted with trailing commas (``test_info: {``, ``MsgSize: 1048576,``): not JSON. The
  ``raw_qos`` results still write ``sl: %d`` unquoted. Such a file is read line by line (each
  ``key: value``), and the note says so.
- The file holds no unit: ``BW_peak`` / ``BW_average`` are in MiB/sec (2^20 bytes/s), or in Gb/sec
  with ``--report_gbits``. print_report_bw computes both figures from the same count and time
  (``bw_avg = size x iters / (time x format_factor)``, ``msgRate = iters / (time x 10^6)``), so
  ``MsgSize x MsgRate x 10^6 / BW_average`` is the run's format_factor: 1048576 (MiB/sec) or
  125000000 (Gb/sec). The unit is taken from that, and said; a file whose figures fit neither is
  not judged.
- No port: the JSON, like the printed header, never names the port perftest used (``-i``).
- The file is rewritten at each report (``open(..., O_TRUNC)``): with ``-a`` it holds the last
  (largest) message size only; a bidirectional run with ``--report-both`` ends with the remote
  side's one-direction figure while its ``test`` still says Bidirectional (perftest pull request
  322 describes this), so a bidirectional figure may be either (report/perftest_findings.py).
- ``--output=bandwidth`` / ``--output=message_rate`` write ``bw_avg`` / ``msgRate_avg`` alone:
  no message size, so no unit; stated, not judged.
"""

from __future__ import annotations

import json
import re
from typing import Any

from gputopo.errors import InputFileError

from .perftest_parse import PerftestOutput, PerftestRow

#: perftest's format_factor per unit (bytes per second of one unit).
_FACTORS = (("MiB/sec", float(1 << 20)), ("Gb/sec", 125_000_000.0))
#: How far MsgSize x MsgRate / BW_average may be from a format_factor (MsgRate is printed with 6
#: decimals in Mpps, so a large message's rate has few digits).
_FACTOR_TOLERANCE = 0.05

_TEST = re.compile(r"^(?P<verb>RDMA_Write_imm|RDMA_Write|RDMA_Read|Send_imm|Send|Atomic)_"
                   r"(?:(?:CMP_AND_SWAP|FETCH_AND_ADD)_)?(?P<bi>Bidirectional_)?(?P<pl>Post_List_)?"
                   r"(?P<kind>BW|Latency)_(?:forwarding_)?(?:Multicast_)?Test$")
_INFO_KEYS = {  # write_test_info_to_file's keys -> the header names perftest_parse uses
    "Dual_port": "dual_port", "Device": "device", "Number_of_qps": "qps", "Transport_type": "transport",
    "Connection_type": "connection", "Using_SRQ": "srq", "Mtu": "mtu", "Link_type": "link_type",
    "TX_depth": "tx_depth", "RX_depth": "rx_depth", "CQ_Moderation": "cq_moderation", "GID_index": "gid_index",
    "Max_inline_data": "max_inline", "Outstand_reads": "outstanding_reads", "rdma_cm_QPs": "rdma_cm",
    "Data_ex_method": "exchange", "Post_List": "post_list", "PCIe_relax_order": "pcie_relax_order",
    "ibv_wr_API": "ibv_wr_api",
}
_LINE = re.compile(r'^\s*"?(?P<key>[^":{}]+?)"?\s*:\s*(?P<value>.*?)\s*,?\s*$')


def looks_like_perftest_json(first_line: str) -> bool:
    return first_line.lstrip().startswith("{")


def _lenient(text: str) -> dict[str, dict[str, str]]:
    """perftest's pre-24.01 file (and raw_qos's ``sl:``), line by line: {section: {key: value}}."""
    doc: dict[str, dict[str, str]] = {}
    section = ""
    for line in text.splitlines():
        s = line.strip()
        if not s or s in ("{", "}", "},", "}}"):
            continue
        m = _LINE.match(s)
        if not m:
            continue
        key, value = m.group("key").strip(), m.group("value").strip()
        if value == "{":
            section = key
            doc.setdefault(section, {})
            continue
        doc.setdefault(section, {})[key] = value.strip('"')
    return doc


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    try:
        f = float(str(v).strip())
    except ValueError:
        return None
    return f if f == f and f not in (float("inf"), float("-inf")) else None


def derive_unit(size: float, msg_rate_mpps: float, bw: float) -> tuple[str | None, float | None]:
    """(unit, format_factor the figures give): MiB/sec or Gb/sec where MsgSize x MsgRate x 10^6 /
    BW_average is within 5 % of that unit's format_factor; (None, factor) otherwise."""
    if size <= 0 or msg_rate_mpps <= 0 or bw <= 0:
        return None, None
    factor = size * msg_rate_mpps * 1e6 / bw
    for unit, ff in _FACTORS:
        if abs(factor / ff - 1) <= _FACTOR_TOLERANCE:
            return unit, factor
    return None, factor


def parse_perftest_json(text: str, source: str) -> PerftestOutput:
    out = PerftestOutput(source=source)
    out.source_format = "out_json"
    try:
        loaded = json.loads(text)
        if not isinstance(loaded, dict):
            raise InputFileError(source, "JSON, but not perftest's --out_json report (no \"test_info\" object)")
        doc: dict[str, Any] = loaded
    except json.JSONDecodeError:
        doc = _lenient(text)
        if "test_info" in doc:
            out.notes.append("not valid JSON (perftest before 24.01 wrote its keys unquoted, and raw_qos's "
                             "'sl' still is): read line by line")
    info, results = doc.get("test_info"), doc.get("results")
    if not isinstance(info, dict):
        raise InputFileError(source, "JSON, but not perftest's --out_json report (no \"test_info\" object)")
    test = str(info.get("test", "")).strip()
    out.title = test or None
    m = _TEST.match(test)
    if m:
        out.verb, out.bidirectional = m.group("verb"), bool(m.group("bi"))
        out.latency_test = m.group("kind") == "Latency"
    elif test:
        out.notes.append(f"test {test!r}: not a name perftest writes; read as a bandwidth test")
    for key, name in _INFO_KEYS.items():
        if key in info:
            out.header[name] = str(info[key])
    if "cuda_device" in info:
        out.use_cuda = True
        idx = _number(info["cuda_device"])
        out.gpu_index = int(idx) if idx is not None else None
    if not isinstance(results, dict):
        out.problems.append("the report has no \"results\" object: perftest stopped before its results "
                            "(nothing was measured)")
        return out
    if out.latency_test:
        return out
    size, iters = _number(results.get("MsgSize")), _number(results.get("n_iterations"))
    peak, avg, rate = (_number(results.get(k)) for k in ("BW_peak", "BW_average", "MsgRate"))
    if avg is None and _number(results.get("bw_avg")) is not None:
        out.json_only_figure = {"key": "bw_avg", "value": _number(results.get("bw_avg"))}
        return out
    if avg is None and _number(results.get("msgRate_avg")) is not None:
        out.json_only_figure = {"key": "msgRate_avg", "value": _number(results.get("msgRate_avg")), "unit": "Mpps"}
        return out
    if size is None or avg is None or rate is None:
        out.problems.append("the \"results\" object lacks MsgSize, BW_average or MsgRate: its bandwidth is not read")
        return out
    if avg < 0 or rate < 0 or (peak is not None and peak < 0):
        out.problems.append(f"a negative figure in \"results\" (BW_average {avg}, MsgRate {rate}): left out")
        return out
    unit, factor = derive_unit(size, rate, avg)
    if unit is None:
        what = f"gives {factor:.4g} bytes/s per unit" if factor else "has a zero figure"
        out.problems.append(f"\"results\": MsgSize x MsgRate / BW_average {what}, neither MiB/sec (2^20) nor "
                            "Gb/sec (125000000): the file holds no unit, so its bandwidth is not judged")
        return out
    out.unit, out.units_seen, out.unit_derived = unit, [unit], (
        f"the file holds no unit: MsgSize x MsgRate x 10^6 / BW_average = {factor:.6g} bytes/s per unit, "
        f"perftest's format_factor for {unit}" + (" (--report_gbits)" if unit == "Gb/sec" else ""))
    sl = _number(results.get("sl"))
    out.rows.append(PerftestRow(0, int(size), int(iters or 0), peak or 0.0, avg, rate, unit,
                                sl=int(sl) if sl is not None else None))
    return out
