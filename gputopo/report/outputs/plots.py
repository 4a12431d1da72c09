"""PNG plots with matplotlib (Agg, imported inside the functions): heatmaps of GB/s, efficiency,
link class and numerics verdict per pair, and loss curves of flagged pairs against their
reference. Cell (row i, column j) of the bandwidth heatmaps is the direction i -> j; the numerics
heatmap shows DataParallel above the diagonal and DDP below it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from gputopo.model import LinkClass
from gputopo.numerics.findings import BAD_VERDICTS, record_gpus
from gputopo.report.summary import Summary

#: Above this many GPUs the cells are too small for numbers.
ANNOTATE_MAX_GPUS = 16


@dataclass
class Plot:
    name: str  # file name
    title: str
    path: Path


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def gpu_indices(summary: Summary) -> List[int]:
    topo = summary.run.topology
    if topo is not None and topo.gpus:
        return sorted(topo.indices)
    found = set()
    for p in summary.pairs:
        found.update(p.gpus)
    for m in summary.run.measurements:
        found.update(m.gpus)
    return sorted(found)


def _matrix(summary: Summary, value) -> List[List[Optional[float]]]:
    """N x N of value(pair_row, i, j) for directions i -> j; None where nothing was measured."""
    idx = gpu_indices(summary)
    pos = {g: k for k, g in enumerate(idx)}
    mat = [[None] * len(idx) for _ in idx]
    for p in summary.pairs:
        if len(p.gpus) != 2 or p.gpus[0] not in pos or p.gpus[1] not in pos:
            continue
        i, j = p.gpus
        mat[pos[i]][pos[j]] = value(p, i, j)
        mat[pos[j]][pos[i]] = value(p, j, i)
    return mat


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


def _title(summary: Summary, what: str) -> str:
    t = f"{what} - {summary.run.machine or 'run'}"
    return ("SIMULATED - " + t) if summary.simulated else t


def _figsize(n: int):
    side = min(14.0, max(4.5, 0.55 * n + 2.5))
    return (side + 1.5, side)


def _heatmap(summary: Summary, mat, title: str, cbar_label: str, path: Path, fmt: str,
             vmin=None, vmax=None, cmap="viridis") -> Path:
    plt = _plt()
    import numpy as np

    idx = gpu_indices(summary)
    n = len(idx)
    arr = np.array([[np.nan if v is None else float(v) for v in row] for row in mat], dtype=float) \
        if n else np.zeros((0, 0))
    fig, ax = plt.subplots(figsize=_figsize(n))
    cm = plt.get_cmap(cmap).with_extremes(bad="#dddddd")
    im = ax.imshow(np.ma.masked_invalid(arr), cmap=cm, vmin=vmin, vmax=vmax)
    fig.colorbar(im, ax=ax, label=cbar_label, shrink=0.8)
    _axes(ax, idx)
    if n <= ANNOTATE_MAX_GPUS:
        finite = arr[np.isfinite(arr)]
        mid = (np.nanmin(finite) + np.nanmax(finite)) / 2 if finite.size else 0
        for a in range(n):
            for b in range(n):
                v = arr[a, b]
                if math.isfinite(v):
                    ax.text(b, a, format(v, fmt), ha="center", va="center", fontsize=8,
                            color="white" if v < mid else "black")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _axes(ax, idx):
    n = len(idx)
    step = 1 if n <= 32 else max(1, n // 16)
    ticks = list(range(0, n, step))
    ax.set_xticks(ticks)
    ax.set_yticks(ticks)
    ax.set_xticklabels([f"GPU{idx[k]}" for k in ticks], rotation=90, fontsize=8)
    ax.set_yticklabels([f"GPU{idx[k]}" for k in ticks], fontsize=8)
    ax.set_xlabel("to GPU")
    ax.set_ylabel("from GPU")


def _categorical(summary: Summary, labels: List[List[Optional[str]]], palette: Dict[str, str],
                 title: str, path: Path, xlabel: str = "GPU", ylabel: str = "GPU") -> Path:
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
    _axes(ax, idx)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if n <= ANNOTATE_MAX_GPUS:
        for a in range(n):
            for b in range(n):
                if labels[a][b]:
                    ax.text(b, a, labels[a][b], ha="center", va="center", fontsize=7)
    used = sorted({labels[a][b] for a in range(n) for b in range(n) if labels[a][b] in code}, key=cats.index)
    ax.legend(handles=[Patch(color=palette[c], label=c) for c in used], loc="upper left",
              bbox_to_anchor=(1.01, 1.0), fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


#: Fixed colour per class kind (green NVLink ... red SYS), so plots of different runs compare.
KIND_COLORS = {"NV": "#1a9850", "PIX": "#a6d96a", "PXB": "#d9ef8b", "PHB": "#fee08b", "NODE": "#fdae61",
               "SYS": "#f46d43", "X": "#bbbbbb"}


def class_color(name: str) -> str:
    try:
        lc = LinkClass.parse(name)
    except ValueError:
        return "#999999"
    if lc.is_nvlink:  # more links: darker green
        return ["#a1d99b", "#74c476", "#41ab5d", "#238b45", "#006d2c"][min(4, (lc.nvlinks - 1) // 4)]
    return KIND_COLORS[lc.kind]

NUMERICS_PALETTE = {"ok": "#66bd63", "diverged": "#fdae61", "nan": "#d73027", "hang": "#7b3294",
                    "crash": "#40004b"}


def plot_gbps(summary: Summary, out_dir: Path) -> Plot:
    mat = _matrix(summary, lambda p, i, j: _directional(p, i, j, "gbps"))
    series = sorted({p.headline_series for p in summary.pairs if p.headline_series})
    path = _heatmap(summary, mat, _title(summary, "GB/s per pair (" + ", ".join(series[:2]) + ")"),
                    "GB/s", Path(out_dir) / "heatmap_gbps.png", ".3g", vmin=0)
    return Plot(path.name, "Measured GB/s per pair (row -> column)", path)


def plot_efficiency(summary: Summary, out_dir: Path) -> Plot:
    mat = _matrix(summary, lambda p, i, j: _directional(p, i, j, "efficiency"))
    path = _heatmap(summary, mat, _title(summary, "efficiency vs theoretical link rate"), "measured / theoretical",
                    Path(out_dir) / "heatmap_efficiency.png", ".0%", vmin=0, vmax=1, cmap="RdYlGn")
    return Plot(path.name, "Efficiency per pair (measured / theoretical)", path)


def plot_link_class(summary: Summary, out_dir: Path) -> Plot:
    idx = gpu_indices(summary)
    pos = {g: k for k, g in enumerate(idx)}
    labels: List[List[Optional[str]]] = [[None] * len(idx) for _ in idx]
    classes = set()
    for p in summary.pairs:
        if len(p.gpus) == 2 and p.link_class and p.gpus[0] in pos and p.gpus[1] in pos:
            a, b = pos[p.gpus[0]], pos[p.gpus[1]]
            labels[a][b] = labels[b][a] = p.link_class
            classes.add(p.link_class)
    for k in range(len(idx)):
        labels[k][k] = "X"

    def rank(c):
        try:
            return LinkClass.parse(c).rank
        except ValueError:
            return (99, 0)

    ordered = sorted(classes, key=rank)
    palette = {c: class_color(c) for c in ordered}
    palette["X"] = "#bbbbbb"
    path = _categorical(summary, labels, palette, _title(summary, "link class per pair"),
                        Path(out_dir) / "heatmap_link_class.png")
    return Plot(path.name, "Link class per pair", path)


def plot_numerics(summary: Summary, out_dir: Path) -> Optional[Plot]:
    if not summary.run.numerics:
        return None
    idx = gpu_indices(summary)
    pos = {g: k for k, g in enumerate(idx)}
    labels: List[List[Optional[str]]] = [[None] * len(idx) for _ in idx]
    for p in summary.pairs:
        if len(p.gpus) != 2 or p.gpus[0] not in pos or p.gpus[1] not in pos:
            continue
        a, b = pos[p.gpus[0]], pos[p.gpus[1]]
        labels[a][b] = p.numerics.get("dp")  # above the diagonal: DataParallel
        labels[b][a] = p.numerics.get("ddp")  # below: DDP
    path = _categorical(summary, labels, NUMERICS_PALETTE,
                        _title(summary, "numerics verdict (upper: DataParallel, lower: DDP)"),
                        Path(out_dir) / "heatmap_numerics.png", xlabel="GPU", ylabel="GPU")
    return Plot(path.name, "Numerics verdict per pair (above the diagonal DataParallel, below DDP)", path)


def _finite(xs):
    return [(k, x) for k, x in enumerate(xs) if isinstance(x, (int, float)) and math.isfinite(x)]


def plot_loss_curves(summary: Summary, out_dir: Path) -> Optional[Plot]:
    """Loss per step of each flagged (nan/diverged) pair and way, against its reference."""
    recs = summary.run.numerics
    flagged = [r for r in recs if r.get("verdict") in BAD_VERDICTS and r.get("way") != "reference"
               and isinstance(r.get("losses"), list)]
    if not flagged:
        return None
    refs = [r for r in recs if r.get("way") == "reference" and isinstance(r.get("losses"), list)]
    plt = _plt()
    n = len(flagged[:12])
    cols = min(3, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.4 * rows), squeeze=False)
    for k, rec in enumerate(flagged[:12]):
        ax = axes[k // cols][k % cols]
        gpus = record_gpus(rec)
        ref = next((r for r in refs if record_gpus(r) == gpus), None) or (refs[0] if refs else None)
        if isinstance(rec.get("reference_losses"), list):
            ref_losses = rec["reference_losses"]
        else:
            ref_losses = ref["losses"] if ref else None
        other_way = {"dp": "ddp", "ddp": "dp"}.get(rec.get("way"))
        other = next((r for r in recs if r.get("way") == other_way and record_gpus(r) == gpus
                      and isinstance(r.get("losses"), list)), None)
        pts = _finite(rec["losses"])
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color="#d73027", ms=3, zorder=3,
                label=f"{rec.get('way')} ({rec.get('verdict')})")
        step = rec.get("step")
        if rec.get("verdict") == "nan" and isinstance(step, int):
            before = [p for p in pts if p[0] < step] or pts
            y = before[-1][1] if before else 0.0
            ax.plot([step], [y], "X", color="#d73027", ms=10, zorder=4)
            ax.annotate(f"NaN from step {step}", (step, y), textcoords="offset points", xytext=(8, -14),
                        color="#d73027", fontsize=8)
        if other:
            op = _finite(other["losses"])
            ax.plot([p[0] for p in op], [p[1] for p in op], "s--", color="#4575b4", ms=3,
                    label=f"{other_way} ({other.get('verdict')})")
        if ref_losses:
            rp = _finite(ref_losses)
            ax.plot([p[0] for p in rp], [p[1] for p in rp], "-", color="black", lw=1, label="reference")
        if rec.get("step") is not None:
            ax.axvline(rec["step"], color="#d73027", ls=":", lw=1)
        ax.set_title(f"GPUs {','.join(map(str, gpus))}: {rec.get('way')} {rec.get('verdict')}", fontsize=10)
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
        ax.legend(fontsize=7)
    for k in range(n, rows * cols):
        axes[k // cols][k % cols].axis("off")
    fig.suptitle(_title(summary, "loss curves of flagged pairs"))
    fig.tight_layout()
    path = Path(out_dir) / "loss_curves.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return Plot(path.name, "Loss curves of flagged pairs against their reference", path)


def write_plots(summary: Summary, out_dir) -> List[Plot]:
    """Every plot that has data; returns them in display order."""
    out_dir = Path(out_dir)
    plots = []
    if not gpu_indices(summary):
        return plots
    if summary.pairs:
        plots += [plot_gbps(summary, out_dir), plot_efficiency(summary, out_dir),
                  plot_link_class(summary, out_dir)]
    for fn in (plot_numerics, plot_loss_curves):
        p = fn(summary, out_dir)
        if p is not None:
            plots.append(p)
    return plots
