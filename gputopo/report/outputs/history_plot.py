"""`gputopo history --plot FILE.png`: a pair's or class's GB/s over time, findings marked.

One line per series and direction, each point the run's headline figure (median busbw, or
algbw where the two are one; a class's point is the median of its pairs, one line per way
i->j / j->i). A point whose run had a `drift` finding on that very series is ringed orange; a
run with an error finding (a counter that keeps rising, corruption...) gets a red dotted line
across the plot. SIMULATED leads the title when any run is simulated. matplotlib is imported
here only when a plot is drawn.
"""

from __future__ import annotations

import datetime as _dt
import statistics
from pathlib import Path
from typing import Any

from gputopo.history.drift import class_direction

DRIFT_RING = "#ef6c00"
ERROR_LINE = "#c62828"


def _drifted(run: dict[str, Any], series: str, direction: str, scope: str) -> bool:
    for f in run["findings"]:
        ev = f.get("evidence") or {}
        if (f["kind"] == "drift" and ev.get("scope") == scope and ev.get("series") == series
                and (ev.get("direction") or "") == direction):
            return True
    return False


def draw_history(runs: list[dict[str, Any]], what: str, path, scope: str = "pair",
                 flag: str = "--plot") -> Path:
    """Draw the figures of ``runs`` (history.query.list_runs with a pair/class filter, oldest
    first); ``scope`` is "pair" or "class". The image is made in memory, in the format the
    name's ending says, and written as every file the user names is (writable.write_file_bytes:
    a FIFO, /dev/full or a read-only place is one line naming ``flag``, never a hang)."""
    import io

    from gputopo.writable import write_file_bytes

    from .plots import pyplot

    plt = pyplot()
    lines: dict[tuple[str, str], list[tuple[_dt.datetime, float, dict[str, Any]]]] = {}
    for r in runs:
        t = _dt.datetime.fromtimestamp(r["time_s"], _dt.timezone.utc)
        by_series: dict[tuple[str, str], list[float]] = {}
        for f in r["figures"]:
            if f["gbps"] is None:
                continue
            d = f["direction"] if scope == "pair" else class_direction(tuple(f["gpus"]), f["direction"])
            by_series.setdefault((f["series"], d or ""), []).append(f["gbps"])
        for key, vals in by_series.items():  # a class: the median of its pairs, as drift takes it
            lines.setdefault(key, []).append((t, statistics.median(vals), r))
    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=90)
    try:
        for (series, direction), pts in sorted(lines.items()):
            pts.sort(key=lambda p: p[0])
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=4,
                    label=f"{series} {direction}".strip())
            ringed = [(t, v) for t, v, r in pts if _drifted(r, series, direction, scope)]
            if ringed:
                ax.plot([t for t, _v in ringed], [v for _t, v in ringed], linestyle="none", marker="o",
                        ms=11, mfc="none", mec=DRIFT_RING, mew=1.8)
        errors = [r for r in runs if any(f["severity"] == "error" for f in r["findings"])]
        for k, r in enumerate(errors):
            ax.axvline(_dt.datetime.fromtimestamp(r["time_s"], _dt.timezone.utc), color=ERROR_LINE,
                       linestyle=":", linewidth=1.2, label="run with error findings" if k == 0 else None)
        sim = any(r["simulated"] for r in runs)
        ax.set_title(("SIMULATED: " if sim else "") + f"{what}: GB/s over time "
                     "(orange ring: drift from the machine's baseline)", fontsize=10)
        ax.set_ylabel("GB/s (headline size; busbw, algbw for copies)")
        ax.set_xlabel("run time (UTC)")
        ax.set_ylim(bottom=0)
        if lines:
            ax.legend(fontsize=7, loc="best")
        fig.autofmt_xdate()
        fig.tight_layout()
        out = Path(path)
        image = io.BytesIO()
        fig.savefig(image, format=out.suffix[1:].lower())
    finally:
        plt.close(fig)
    write_file_bytes(out, image.getvalue(), flag)
    return out
