"""`gputopo history --plot FILE.png`: a pair's or class's GB/s over time, findings marked.

One line per series (and direction), each point the run's headline figure (median busbw, or
algbw where the two are one). A run that had a drift finding is ringed orange, one with an
error finding red; SIMULATED leads the title when any run is simulated. matplotlib is imported
here only when a plot is drawn.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any


def draw_history(runs: list[dict[str, Any]], what: str, path) -> Path:
    """Draw the figures of ``runs`` (history.query.list_runs with a pair/class filter)."""
    from .plot_common import _plt

    plt = _plt()
    lines: dict[tuple[str, str], list[tuple[_dt.datetime, float, dict[str, Any]]]] = {}
    for r in runs:
        t = _dt.datetime.fromtimestamp(r["time_s"], _dt.timezone.utc)
        by_series: dict[tuple[str, str], list[float]] = {}
        for f in r["figures"]:
            if f["gbps"] is not None:
                by_series.setdefault((f["series"], f["direction"] or ""), []).append(f["gbps"])
        for key, vals in by_series.items():  # a class: the median of its pairs in that run
            vals.sort()
            lines.setdefault(key, []).append((t, vals[len(vals) // 2], r))
    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=90)
    try:
        for (series, direction), pts in sorted(lines.items()):
            pts.sort(key=lambda p: p[0])
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=4,
                    label=f"{series} {direction}".strip())
            for t, v, r in pts:
                kinds = {f["kind"] for f in r["findings"]}
                sev = {f["severity"] for f in r["findings"]}
                if "drift" in kinds or "counter-growth" in kinds or "error" in sev:
                    ax.plot([t], [v], marker="o", ms=11, mfc="none",
                            mec="#c62828" if "error" in sev else "#ef6c00", mew=1.8)
        sim = any(r["simulated"] for r in runs)
        ax.set_title(("SIMULATED: " if sim else "") + f"{what}: GB/s over time "
                     "(ringed: runs with drift, counter-growth or error findings)", fontsize=10)
        ax.set_ylabel("GB/s (headline size; busbw, algbw for copies)")
        ax.set_xlabel("run time (UTC)")
        ax.set_ylim(bottom=0)
        if lines:
            ax.legend(fontsize=7, loc="best")
        fig.autofmt_xdate()
        fig.tight_layout()
        out = Path(path)
        fig.savefig(out)
    finally:
        plt.close(fig)
    return out
