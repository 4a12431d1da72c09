"""What every gputopo plot shares: the Plot record, the GPU grid of a Summary (cell (row i,
column j) is the direction i -> j), figure size, titles (SIMULATED first on a simulated run),
cell text colour, axes, the grey diagonal, the red/orange outline of pairs with findings and
the legend of those cells. matplotlib is imported inside the functions (``_plt``), never when
this module is imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

from gputopo.report.pairs import PairRow
from gputopo.report.summary import Summary

from .wrong_data import WRONG_DATA_LABEL, wrong_data_handle

#: Above this many GPUs the cells are too small for numbers.
ANNOTATE_MAX_GPUS = 16
#: Cell colours that are not data.
SAME_GPU_COLOR = "#9e9e9e"
NOT_MEASURED_COLOR = "#eeeeee"
OUTLINE = {"broken": "#c62828", "degraded": "#ef6c00"}
DPI = 90


@dataclass
class Plot:
    name: str  # file name
    title: str
    path: Path
    caption: str = ""  # how to read it: unit, time source, colours


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def gpu_indices(summary: Summary) -> List[int]:
    topo = summary.run.topology
    if topo is not None and topo.gpus:
        return sorted(topo.indices)
    found: Set[int] = set()
    for p in summary.pairs:
        found.update(p.gpus)
    for m in summary.run.measurements:
        found.update(m.gpus)
    return sorted(found)


def _pair_rows(summary: Summary) -> Tuple[Dict[int, int], List[PairRow]]:
    idx = gpu_indices(summary)
    pos = {g: k for k, g in enumerate(idx)}
    return pos, [p for p in summary.pairs if len(p.gpus) == 2 and p.gpus[0] in pos and p.gpus[1] in pos]


def _matrix(summary: Summary, value) -> List[List[Optional[float]]]:
    """N x N of value(pair_row, i, j) for directions i -> j; None where nothing was measured."""
    pos, pairs = _pair_rows(summary)
    mat: List[List[Optional[float]]] = [[None] * len(pos) for _ in pos]
    for p in pairs:
        i, j = p.gpus
        mat[pos[i]][pos[j]] = value(p, i, j)
        mat[pos[j]][pos[i]] = value(p, j, i)
    return mat


def _title(summary: Summary, what: str, sub: str = "") -> str:
    t = f"{what} - {summary.run.machine or 'run'}"
    t = ("SIMULATED - " + t) if summary.simulated else t
    return t + (f"\n{sub}" if sub else "")


def _figsize(n: int):
    side = min(14.0, max(4.5, 0.55 * n + 2.5))
    return (side + 1.5, side)


def _text_color(rgba) -> str:
    """Black or white, whichever reads on a cell of colour ``rgba``."""
    r, g, b = rgba[:3]
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"


def _hex_rgb(h: str):
    h = h.lstrip("#")
    return tuple(int(h[k:k + 2], 16) / 255 for k in (0, 2, 4))


def _axes(ax, idx, xlabel: str = "GPU", ylabel: str = "GPU"):
    n = len(idx)
    step = 1 if n <= 32 else max(1, n // 16)
    ticks = list(range(0, n, step))
    ax.set_xticks(ticks)
    ax.set_yticks(ticks)
    ax.set_xticklabels([f"GPU{idx[k]}" for k in ticks], rotation=0 if n <= 12 else 90, fontsize=8)
    ax.set_yticklabels([f"GPU{idx[k]}" for k in ticks], fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)


def _shade_diagonal(ax, n: int):
    from matplotlib.patches import Rectangle

    for k in range(n):
        ax.add_patch(Rectangle((k - 0.5, k - 0.5), 1, 1, facecolor=SAME_GPU_COLOR, edgecolor="none", zorder=2))


def _outline_flagged(summary: Summary, ax) -> Dict[str, int]:
    """Outline the cells of pairs whose verdict is broken / degraded; returns counts per verdict."""
    from matplotlib.patches import Rectangle

    pos, pairs = _pair_rows(summary)
    counts: Dict[str, int] = {}
    for p in pairs:
        color = OUTLINE.get(p.verdict)
        if color is None:
            continue
        counts[p.verdict] = counts.get(p.verdict, 0) + 1
        a, b = pos[p.gpus[0]], pos[p.gpus[1]]
        for r, c in ((a, b), (b, a)):
            ax.add_patch(Rectangle((c - 0.45, r - 0.45), 0.9, 0.9, fill=False, edgecolor=color, lw=2.2, zorder=4))
    return counts


def _legend_below(ax, handles, ncol: int = 2):
    if handles:
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=ncol, fontsize=8,
                  frameon=False)


def _data_legend(summary: Summary, counts: Dict[str, int], measured_all: bool, missing_label: str):
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=SAME_GPU_COLOR, label="same GPU")]
    if counts.get(WRONG_DATA_LABEL):
        handles.append(wrong_data_handle(counts[WRONG_DATA_LABEL]))
    if not measured_all:
        handles.append(Patch(facecolor=NOT_MEASURED_COLOR, edgecolor="#cccccc", label=missing_label))
    for verdict, what in (("broken", "error"), ("degraded", "warning")):
        if counts.get(verdict):
            handles.append(Patch(facecolor="white", edgecolor=OUTLINE[verdict], lw=2,
                                 label=f"outlined: pair with an {what} finding ({counts[verdict]} "
                                       f"pair{'s' if counts[verdict] != 1 else ''})"))
    return handles
