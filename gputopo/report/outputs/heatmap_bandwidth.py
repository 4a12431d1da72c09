"""The bandwidth heatmaps: GB/s and efficiency (measured / theoretical) per pair and direction,
row i, column j being GPU i -> GPU j, each saying its series, metric, size and time source.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from gputopo.report.summary import Summary

from .heatmap_draw import _heatmap
from .notes import headline_facts, timing_text
from .plot_common import Plot, _matrix, _title


def _directional(p, i, j, key: str) -> Optional[float]:
    s = p.headline_series
    if not s:
        return None
    d = p.series[s]
    per_dir = d["directions"] if key == "gbps" else d["direction_efficiency"]
    v = per_dir.get(f"{i}->{j}")
    if v is None:  # undirected series (collectives, bidirectional): same both ways
        v = d[key]
    return v


def _gbps_subtitle(summary: Summary) -> str:
    h = headline_facts(summary)
    return (f"{', '.join(h['series']) or 'no series'} ({'/'.join(h['metric']) or 'algbw'}) at "
            f"{', '.join(h['sizes']) or '?'}; time: {timing_text(h['timing'], words=False)}")


def plot_gbps(summary: Summary, out_dir: Path) -> Plot:
    mat = _matrix(summary, lambda p, i, j: _directional(p, i, j, "gbps"))
    h = headline_facts(summary)
    timing = timing_text(h["timing"], words=False)
    path = _heatmap(summary, mat, _title(summary, "GB/s per pair and direction", _gbps_subtitle(summary)),
                    f"GB/s ({'/'.join(h['metric']) or 'algbw'}; time: {timing})",
                    Path(out_dir) / "heatmap_gbps.png", ".3g", vmin=0)
    return Plot(path.name, "Measured GB/s per pair (row -> column)", path,
                f"Row i, column j: GB/s from GPU i to GPU j ({', '.join(h['series'])} "
                f"{'/'.join(h['metric'])} at {', '.join(h['sizes'])}); time source: {timing_text(h['timing'])}. "
                "Colour from 0 GB/s to the fastest pair; grey: same GPU. Pairs outlined in "
                "red have an error finding (e.g. wrong data), orange a warning.")


def plot_efficiency(summary: Summary, out_dir: Path) -> Plot:
    mat = _matrix(summary, lambda p, i, j: _directional(p, i, j, "efficiency"))
    h = headline_facts(summary)
    path = _heatmap(summary, mat, _title(summary, "efficiency: measured / theoretical link rate",
                                         _gbps_subtitle(summary)),
                    "measured GB/s / theoretical GB/s of the pair's link",
                    Path(out_dir) / "heatmap_efficiency.png", ".0%", vmin=0, vmax=1, cmap="RdYlGn", percent=True,
                    missing_label="no efficiency (not measured, or not judged on this fabric)")
    return Plot(path.name, "Efficiency per pair (measured / theoretical)", path,
                "Row i, column j: GB/s from GPU i to GPU j over the theoretical rate of the pair's link "
                "(NVLink version x links, PCIe generation x width); good hardware reaches 80-90 %. Time source: "
                f"{timing_text(h['timing'])}. Outlines as in the GB/s heatmap.")
