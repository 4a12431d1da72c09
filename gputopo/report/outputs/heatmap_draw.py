"""The two heatmap drawers every per-pair plot is made with: ``_heatmap`` for numbers (GB/s,
efficiency: a colour bar, the value in each cell) and ``_categorical`` for categories (link
class, numerics verdict: a legend of the categories). Both paint a pair that returned wrong data
as such (wrong_data.py) and outline the pairs with findings (plot_common.py), so no drawer can
forget to.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

from gputopo.report.summary import Summary

from .plot_common import (ANNOTATE_MAX_GPUS, DPI, NOT_MEASURED_COLOR, OUTLINE, _axes, _data_legend, _figsize,
                          _hex_rgb, _legend_below, _outline_flagged, _pair_rows, _plt, _shade_diagonal, _text_color,
                          gpu_indices)
from .wrong_data import WRONG_DATA_LABEL, paint_wrong_data, wrong_data_cells, wrong_data_handle


def _heatmap(summary: Summary, mat, title: str, cbar_label: str, path: Path, fmt: str,
             vmin=None, vmax=None, cmap="viridis", percent: bool = False,
             xlabel: str = "to GPU (destination)", ylabel: str = "from GPU (source)",
             missing_label: str = "not measured") -> Path:
    plt = _plt()
    import numpy as np
    from matplotlib.colors import Normalize

    idx = gpu_indices(summary)
    n = len(idx)
    arr = np.array([[np.nan if v is None else float(v) for v in row] for row in mat], dtype=float) \
        if n else np.zeros((0, 0))
    fig, ax = plt.subplots(figsize=_figsize(n))
    cm = plt.get_cmap(cmap).with_extremes(bad=NOT_MEASURED_COLOR)
    finite = arr[np.isfinite(arr)]
    lo = vmin if vmin is not None else (float(finite.min()) if finite.size else 0.0)
    hi = vmax if vmax is not None else (float(finite.max()) if finite.size else 1.0)
    norm = Normalize(vmin=lo, vmax=max(hi, lo + 1e-9))
    im = ax.imshow(np.ma.masked_invalid(arr), cmap=cm, norm=norm)
    cbar = fig.colorbar(im, ax=ax, shrink=0.8)
    cbar.set_label(cbar_label)
    if percent:
        from matplotlib.ticker import PercentFormatter

        cbar.ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    _axes(ax, idx, xlabel, ylabel)
    _shade_diagonal(ax, n)
    wrong = wrong_data_cells(*_pair_rows(summary))
    values = [[format(arr[a, b], fmt) if math.isfinite(arr[a, b]) else None for b in range(n)] for a in range(n)]
    if n <= ANNOTATE_MAX_GPUS:
        for a in range(n):
            for b in range(n):
                v = arr[a, b]
                if math.isfinite(v) and (a, b) not in wrong:
                    ax.text(b, a, values[a][b], ha="center", va="center", fontsize=8, zorder=5,
                            color=_text_color(cm(norm(v))))
    counts = _outline_flagged(summary, ax)
    counts[WRONG_DATA_LABEL] = paint_wrong_data(ax, *_pair_rows(summary), values, n <= ANNOTATE_MAX_GPUS)
    measured_all = all(math.isfinite(arr[a, b]) for a in range(n) for b in range(n) if a != b)
    _legend_below(ax, _data_legend(summary, counts, measured_all, missing_label))
    ax.set_title(title, fontsize=10)
    fig.savefig(path, dpi=DPI, bbox_inches="tight", pad_inches=0.15)
    plt.close(fig)
    return path


def _categorical(summary: Summary, labels: List[List[Optional[str]]], palette: Dict[str, str],
                 title: str, path: Path, xlabel: str = "GPU", ylabel: str = "GPU",
                 texts: Optional[List[List[Optional[str]]]] = None,
                 legend_labels: Optional[Dict[str, str]] = None, legend_title: Optional[str] = None,
                 wrong_cells: Optional[Set[Tuple[int, int]]] = None) -> Path:
    """A heatmap of categories: ``labels[a][b]`` picks the colour from ``palette`` (None: left
    white), ``texts[a][b]`` is written in the cell (default: the label). ``wrong_cells``: the
    cells painted as wrong data (default: both cells of every pair with wrong data)."""
    plt = _plt()
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch
    import numpy as np

    idx = gpu_indices(summary)
    n = len(idx)
    cats = [c for c in palette]
    code = {c: k for k, c in enumerate(cats)}
    arr = np.full((n, n), np.nan)
    for a in range(n):
        for b in range(n):
            lab = labels[a][b]
            if lab is not None and lab in code:
                arr[a, b] = code[lab]
    cmap = ListedColormap([palette[c] for c in cats]).with_extremes(bad="#ffffff")
    fig, ax = plt.subplots(figsize=_figsize(n))
    ax.imshow(np.ma.masked_invalid(arr), cmap=cmap, vmin=-0.5, vmax=len(cats) - 0.5)
    _axes(ax, idx, xlabel, ylabel)
    texts = texts or labels
    wrong = wrong_data_cells(*_pair_rows(summary)) if wrong_cells is None else wrong_cells
    if n <= ANNOTATE_MAX_GPUS:
        for a in range(n):
            for b in range(n):
                if texts[a][b] and (a, b) not in wrong:
                    lab = labels[a][b]
                    color = _text_color(_hex_rgb(palette.get(lab, "#ffffff") if lab is not None else "#ffffff"))
                    ax.text(b, a, texts[a][b], ha="center", va="center", fontsize=7 if n <= 10 else 6, color=color)
    counts: Dict[str, int] = {}
    for a in range(n):
        for b in range(n):
            lab = labels[a][b]
            if lab is not None and lab in code:
                counts[lab] = counts.get(lab, 0) + 1
    used = [c for c in cats if counts.get(c)]
    names = legend_labels or {}
    handles = [Patch(facecolor=palette[c], edgecolor="#999999", label=names.get(c, c)) for c in used]
    flagged = _outline_flagged(summary, ax)
    n_wrong = paint_wrong_data(ax, *_pair_rows(summary), texts, n <= ANNOTATE_MAX_GPUS, wrong)
    if n_wrong:
        handles.append(wrong_data_handle(n_wrong))
    for verdict, what in (("broken", "error"), ("degraded", "warning")):
        if flagged.get(verdict):
            handles.append(Patch(facecolor="white", edgecolor=OUTLINE[verdict], lw=2,
                                 label=f"outlined: pair with an {what} finding"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title=legend_title,
              title_fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.savefig(path, dpi=DPI, bbox_inches="tight", pad_inches=0.15)
    plt.close(fig)
    return path
