"""Read nccl-tests text output (all_reduce_perf & co.) into gputopo Measurements.

The text is parsed by nccl_parse.py into NcclTestsLog (nccl_tests_records.py); the ops and their busbw
factors are in nccl_ops.py. This module turns a parsed log into Measurements and the per-log
facts of nccl_tests.json, and is the public entry for the names of the other three.

Numbers are kept as printed: nccl-tests rounds algbw/busbw to two decimals, so size/time will
not give back the printed algbw exactly. Each row becomes one Measurement per placement with
one sample (the printed time, which nccl-tests already averaged over its iterations); the
printed time/algbw/busbw go to ``extra["printed"]``. nccl-tests' "Avg bus bandwidth" is the
mean busbw over all sizes (both placements), not the peak; both are kept per log.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from gputopo.model import Measurement, NotAvailable

from .nccl_tests_records import Cell, NcclTestsLog, Rank, Row
from .nccl_ops import OPS, check_op, op_from_name
from .nccl_parse import parse_nccl_tests, parse_nccl_tests_file

__all__ = ["OPS", "Cell", "NcclTestsLog", "Rank", "Row", "busbw_factor", "check_op", "device_keys",
           "log_measurements", "log_summary", "normalize_bus_id", "op_from_name", "parse_nccl_tests",
           "parse_nccl_tests_file"]


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


def _op(log: NcclTestsLog) -> str:
    """The log's collective (the parser names it or refuses the log)."""
    if log.op is None:
        raise ValueError(f"{log.source}: which collective the log holds is not known")
    return log.op


def busbw_factor(log: NcclTestsLog) -> float:
    """The collective table's factor for the log's op and ranks (busbw / algbw, as nccl-tests
    computed what it printed)."""
    n = len(log.ranks)
    if n >= 1:
        return OPS[_op(log)].busbw_factor(n)
    # No rank lines: recover n from the printed busbw/algbw ratio at the largest size.
    for r in reversed(log.rows):
        c = r.out_of_place or r.in_place
        if c is not None and isinstance(c.algbw_gbps, float) and isinstance(c.busbw_gbps, float) and c.algbw_gbps > 0:
            return c.busbw_gbps / c.algbw_gbps
    return 1.0


def log_measurements(log: NcclTestsLog, link_class: Optional[str] = None) -> List[Measurement]:
    test = OPS[_op(log)].test
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
        "file": Path(log.source).name, "path": str(log.source), "op": log.op, "test": OPS[_op(log)].test,
        "program": log.program, "nccl_tests_version": log.version, "nccl_library": log.nccl_library,
        "nccl_headers": log.nccl_headers, "nccl_version": log.nccl_version, "config": dict(log.config), "time_column": log.time_kind,
        "ranks": len(log.ranks) or None, "hosts": log.hosts, "gpus": gpus, "gpus_are": "devices" if are_devices else "ranks",
        "devices": [r.to_json() for r in log.ranks], "sizes": len(log.rows),
        "avg_busbw_gbps": log.avg_busbw_gbps,
        "avg_busbw_meaning": "nccl-tests 'Avg bus bandwidth' as printed: the mean busbw over all sizes "
                             "(in-place and out-of-place), not the peak",
        "peak_busbw_gbps": peak, "peak_size_bytes": peak_size, "peak_in_place": peak_inplace,
        "wrong": sum(counted) if counted else None,
        "wrong_checked": len(counted) == len(wrong_cells),
        "out_of_bounds": log.out_of_bounds, "out_of_bounds_status": log.out_of_bounds_status, "errors": list(log.errors), "notes": list(log.notes),
        "problems": list(log.problems),
    }
