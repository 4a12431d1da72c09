"""`bandwidth-cliff`: along an imported nccl-tests size sweep, busbw that falls at one size to
below half of what smaller sizes reached, and never comes back at any larger size; or busbw
that falls below half of the best smaller size's and stays there for at least 3 sizes (the size
it fell to and the next two), even if it comes back later.

A healthy sweep rises with size and levels off; small dips where NCCL switches algorithm or
protocol recover at the next sizes. A cliff that does not recover (a real post: 29.9 GB/s at
8 MB, 1.48 GB/s from 16 MB on) means large transfers take another, much slower path: a fallback
transport, a buffer beyond what a P2P / BAR mapping can hold, or a link that degrades under
sustained load. A sustained drop that does come back (a real post: an alltoall on 2 x 8 RTX
6000D at 29.9 GB/s at 8 MiB, 1.5 GB/s from 16 MiB, back only at 4-8 GiB) costs every size in
between the same way. A dip at one or two sizes, where a protocol switch costs a little, is
neither. Judged per log on the printed busbw, per size the better of the out-of-place
and in-place figures, so one noisy placement alone never makes a cliff. The unrecovered cliff
leaves peaks below 1 GB/s (latency-bound small sizes) unjudged; the sustained drop is judged
relative to the run itself (issue 47 item 9): a size counts once the sweep has reached
LATENCY_FRACTION of its own best figure, so small sizes still bound by latency are never a drop,
while a collapse to well below 1 GB/s in the middle of a fast sweep is one, however it fell (in
one step or several).
"""

from __future__ import annotations

from gputopo.model import Finding, Measurement
from gputopo.model.sizes import size_text

#: busbw below this fraction of the best smaller size's, with no larger size back above it.
CLIFF_FRACTION = 0.5
#: A sweep whose best busbw before the drop is below this (GB/s) is latency-bound: not judged.
MIN_PEAK_GBPS = 1.0
#: At least this many sizes in a row (the one it fell to first) below CLIFF_FRACTION of the best
#: smaller size's busbw is a cliff even if larger sizes come back (one or two are a protocol switch).
DROP_SIZES = 3
#: A size is judged by the sustained-drop rule once the best busbw before it reaches this share of
#: the sweep's own best: below it the sweep is still latency-bound (busbw still rising with size).
LATENCY_FRACTION = 0.25


def _sweeps(measurements: list[Measurement]) -> dict[tuple[str, str, tuple[int, ...]], dict[int, float]]:
    """(file, test, GPUs) -> size -> printed busbw (the better placement), for nccl-tests imports."""
    out: dict[tuple[str, str, tuple[int, ...]], dict[int, float]] = {}
    for m in measurements:
        extra = m.extra or {}
        if extra.get("source") != "nccl-tests":
            continue
        busbw = (extra.get("printed") or {}).get("busbw_gbps")
        if not isinstance(busbw, (int, float)) or isinstance(busbw, bool) or m.size_bytes is None:
            continue
        sizes = out.setdefault((str(extra.get("file", "?")), m.test, tuple(m.gpus)), {})
        sizes[m.size_bytes] = max(sizes.get(m.size_bytes, 0.0), float(busbw))
    return out


def find_cliff(busbw_by_size: dict[int, float]) -> tuple[int, float, int, float, float] | None:
    """(size before, busbw there, size of the drop, busbw there, best busbw after) of the first
    unrecovered cliff, or None."""
    sizes = sorted(busbw_by_size)
    best_before, best_size = 0.0, None
    for k, size in enumerate(sizes):
        bw = busbw_by_size[size]
        if best_size is not None and best_before >= MIN_PEAK_GBPS and bw < CLIFF_FRACTION * best_before:
            after = max(busbw_by_size[s] for s in sizes[k:])
            if after < CLIFF_FRACTION * best_before:
                return best_size, best_before, size, bw, after
        if bw >= best_before:
            best_before, best_size = bw, size
    return None


def find_sustained_drop(busbw_by_size: dict[int, float]) -> tuple[int, float, int, float, int, int | None] | None:
    """(size of the best busbw before it, that busbw, size fallen to, busbw there, last size still
    below half, the size where busbw is back above half or None) of the first run of at least
    DROP_SIZES sizes below CLIFF_FRACTION of the best smaller size's busbw, where that best has
    left the latency-bound start of the sweep (LATENCY_FRACTION of the sweep's own best); None if
    there is none. Relative to the run only: no absolute floor, no single-step factor."""
    sizes = sorted(busbw_by_size)
    if not sizes:
        return None
    top = max(busbw_by_size.values())
    best, best_size = 0.0, None
    for k, size in enumerate(sizes):
        bw = busbw_by_size[size]
        if best_size is not None and best > 0 and best >= LATENCY_FRACTION * top and bw < CLIFF_FRACTION * best:
            low = k
            while low + 1 < len(sizes) and busbw_by_size[sizes[low + 1]] < CLIFF_FRACTION * best:
                low += 1
            if low - k + 1 >= DROP_SIZES:
                back = sizes[low + 1] if low + 1 < len(sizes) else None
                return best_size, best, size, bw, sizes[low], back
        if bw >= best:
            best, best_size = bw, size
    return None


def cliff_findings(measurements: list[Measurement]) -> list[Finding]:
    out = []
    for (file, test, gpus), by_size in sorted(_sweeps(measurements).items()):
        cliff = find_cliff(by_size)
        if cliff is None:
            sustained = find_sustained_drop(by_size)
            if sustained is not None:
                out.append(_drop_finding(file, test, gpus, by_size, sustained))
            continue
        at, before, drop, bw, after = cliff
        op = test.split(".", 1)[-1]
        out.append(Finding(
            "bandwidth-cliff", "warning",
            f"nccl-tests {op} busbw falls from {before:g} GB/s at {size_text(at)} to {bw:g} GB/s at {size_text(drop)} "
            f"and stays below {CLIFF_FRACTION:.0%} of it at every larger size (best {after:g} GB/s; {file})",
            gpus=list(gpus) or None,
            evidence={"file": file, "test": test, "peak_before_gbps": before, "peak_before_size_bytes": at,
                      "cliff_size_bytes": drop, "busbw_at_cliff_gbps": bw, "best_after_gbps": after,
                      "fraction": CLIFF_FRACTION, "figures": "printed busbw (GB/s = 1e9 B/s), better placement per size"},
            cause="transfers from this size on take a much slower path; which is not known from this output: a "
                  "transport fallback (e.g. P2P to SHM or socket), a buffer larger than a peer mapping can hold, or "
                  "a link that degrades under load; the job's NCCL_DEBUG=INFO log tells the transport",
            remedies=[("rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH and import the log with "
                      "`gputopo import nccl-debug` to see the transport per pair"),
                      "rerun the sizes around the cliff alone (-b/-e) to see whether it moves"]))
    return out


def _drop_finding(file: str, test: str, gpus: tuple[int, ...], by_size: dict[int, float],
                  drop: tuple[int, float, int, float, int, int | None]) -> Finding:
    at, before, fell, bw, last_low, back = drop
    op = test.split(".", 1)[-1]
    low = [s for s in sorted(by_size) if fell <= s <= last_low]
    worst = min(by_size[s] for s in low)
    back_text = (f"; back to {by_size[back]:g} GB/s at {size_text(back)}" if back is not None
                 else "; the sweep ends there")
    return Finding(
        "bandwidth-cliff", "warning",
        f"nccl-tests {op} busbw falls from {before:g} GB/s at {size_text(at)} to {bw:g} GB/s at {size_text(fell)} "
        f"({before / bw if bw > 0 else float('inf'):.0f}x) and stays below {CLIFF_FRACTION:.0%} of it from "
        f"{size_text(fell)} to {size_text(last_low)} ({len(low)} sizes, lowest {worst:g} GB/s){back_text} ({file})",
        gpus=list(gpus) or None,
        evidence={"file": file, "test": test, "peak_before_gbps": before, "peak_before_size_bytes": at,
                  "cliff_size_bytes": fell, "busbw_at_cliff_gbps": bw, "last_low_size_bytes": last_low,
                  "low_sizes": len(low), "lowest_gbps": worst, "recovered_size_bytes": back,
                  "recovered_gbps": by_size[back] if back is not None else None,
                  "fraction": CLIFF_FRACTION, "latency_fraction": LATENCY_FRACTION,
                  "figures": "printed busbw (GB/s = 1e9 B/s), better placement per size"},
        cause=("sizes in this range take a much slower path than the sizes around them; which is not known "
               "from this output: a transport or protocol fallback (e.g. P2P to SHM or a socket, a proxy path), "
               "a buffer larger than a peer mapping or registration cache holds, or network congestion at these "
               "message sizes; the job's NCCL_DEBUG=INFO log tells the transport"),
        remedies=[("rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,NET and import the log with "
                   "`gputopo import nccl-debug` to see the transport per pair"),
                  f"rerun {size_text(at)} to {size_text(back if back is not None else last_low)} alone (-b/-e) to see "
                  "whether the drop moves or persists",
                  "try NCCL_PROTO / NCCL_ALGO pinned to one value to see whether a protocol switch causes it"])
