"""What an nccl-tests log must not hide once imported: a log cut short, rows with negative,
non-finite or impossible figures (the inputs an import refuses outright are in nccl_inputs.py).

A log that stops mid-row or before its footer ("Out of bounds values", "Avg bus bandwidth") is
from a test that crashed, hung or was killed, or a file that was cut: its last row may be part
of a line, and its missing sizes are not "fine". Negative times, bandwidths or ``#wrong`` counts
are not measurements at all. Each such fact is kept per log (``problems`` in nccl_tests.json),
and the report turns it into a finding (report/data_findings.py), so the verdict is not "ok".
"""

from __future__ import annotations

import math
from typing import List

#: Figures of a cell that can never be negative.
_CELL_FIGURES = ("time_us", "algbw_gbps", "busbw_gbps", "wrong")


def _negative(v) -> bool:
    """Negative, or not a finite number at all (nccl-tests printed nan or inf)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not (0 <= v < math.inf)


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _impossible(row, cell) -> List[str]:
    """Figures no run can print together: a size moved in zero time, an algbw faster than
    size / time or below half of it (printed to 2 decimals, time to 4 digits), a busbw
    above twice the algbw (its factor is below 2 for every op), more wrong elements than the
    row has."""
    out = []
    t, alg, bus = cell.time_us, cell.algbw_gbps, cell.busbw_gbps
    if _num(t) and t == 0 and row.size_bytes > 0:
        out.append(f"{row.size_bytes} B in 0 us")
    elif _num(t) and t > 0 and _num(alg):
        expected = row.size_bytes / (t * 1e3)
        # Current nccl-tests print size / time; older ones (issue 37, 2019) printed all_gather's
        # as (n-1)/n of it: anything from half of size / time up to it (rounding allowed) is a
        # real output, beyond that no run can print it.
        if alg > expected * 1.1 + 0.02 or alg < expected * 0.45 - 0.02:
            out.append(f"algbw {alg:g} GB/s but {row.size_bytes} B in {t:g} us is {expected:.3g} GB/s")
    if _num(alg) and _num(bus) and bus > 2 * alg + 0.02:
        out.append(f"busbw {bus:g} GB/s above twice the algbw {alg:g}")
    if _num(cell.wrong) and isinstance(row.count, int) and row.count >= 0 and cell.wrong > row.count:
        out.append(f"{cell.wrong} wrong of {row.count} elements")
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
                                     if cell is not None for why in _impossible(row, cell)]
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
    last = f" after line {log.rows[-1].line}" if log.rows else ""
    return [f"no footer ('Out of bounds values' / 'Avg bus bandwidth'){last}: the test did not finish or "
            "the log was cut, so the sizes after its last row are missing"]
