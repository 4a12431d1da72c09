"""The report's PNG figures, drawn with matplotlib (Agg, imported inside the functions through
``pyplot()``, never when this module is imported): heatmaps of GB/s, efficiency, link class and
numerics verdict per pair, and loss curves of flagged pairs against their reference. Cell (row
i, column j) of the bandwidth heatmaps is the direction i -> j; the numerics heatmap shows
DataParallel above the diagonal and DDP below it.

Every figure says what it shows, its unit and where its time came from (``modeled``, ``wall``,
``cuda-events``); a simulated run's figures say SIMULATED in the title. On the bandwidth
heatmaps the pairs with an error finding are outlined in red (a warning: orange), so a pair
that is fast but corrupts data, or whose GPU lost its NVLinks, does not look healthy; a pair that
returned wrong data is, in addition, painted as such (dark, hatched, "wrong data", wrong_data.py)
in every plot instead of its rate's colour: a green 71 % on a pair that corrupts is a lie by
colour.

In this module, in order: what every figure shares (the Plot record, the GPU grid of a Summary,
titles, colours, axes, the grey diagonal, outlines and legends); start_plots / write_plots, the
entry (some figures are drawn in a forked child, plot_fork.py); the two heatmap drawers (numbers
and categories), which paint wrong data and outline the pairs with findings so no heatmap can
forget to; then each figure: GB/s and efficiency, link class, numerics verdict, loss curves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

from gputopo.model import LinkClass
from gputopo.numerics.result import record_gpus
from gputopo.numerics.verdict import BAD_VERDICTS
from gputopo.report.pairs import PairRow
from gputopo.report.summary import Summary

from .notes import headline_facts, timing_text
from .wrong_data import WRONG_DATA_LABEL, paint_wrong_data, wrong_data_cells, wrong_data_handle


# ------------------------------------------------------------------------- what every figure shares

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


def pyplot():
    """matplotlib.pyplot on the Agg backend (files only, no display), imported on first use:
    every figure of gputopo draws through it."""
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


# ------------------------------------------------------------------------------------------- entry


def write_plots(summary: Summary, out_dir) -> List[Plot]:
    """Every plot that has data; returns them in display order."""
    return start_plots(summary, out_dir).result()


class PlotsUnderWay:
    """Plots started by :func:`start_plots`: :meth:`result` finishes them (display order),
    :meth:`cancel` stops the child still drawing (the caller failed meanwhile)."""

    def __init__(self, plots: List[Plot], later=None, numerics: Optional[Plot] = None):
        self._plots, self._later, self._numerics = plots, later, numerics

    def result(self) -> List[Plot]:
        """Every figure made, in display order: GB/s, efficiency, link class, numerics, loss."""
        link_class, loss = self._later.result() if self._later is not None else (None, None)
        self._later = None
        return [p for p in (*self._plots, link_class, self._numerics, loss) if p is not None]

    def cancel(self) -> None:
        if self._later is not None:
            self._later.cancel()
            self._later = None


def start_plots(summary: Summary, out_dir) -> PlotsUnderWay:
    """Start drawing every plot that has data. Between this and ``.result()`` the caller may
    write what needs no plot.

    The link-class heatmap and the loss curves (the costliest figure: two axes per flagged
    run) are drawn in a forked child process (plot_fork.py) while this one draws the other
    heatmaps and the caller writes the tables: on two cores a report's plotting takes about
    half as long (measured on the demo's report: 1.2 s of CPU on either side).
    matplotlib is imported first, so the child has it. Where no child can be forked, or it
    fails, its figures are drawn here as before. The order of the figures is the same either
    way: GB/s, efficiency, link class, numerics, loss curves.
    """
    from .plot_fork import in_child

    out_dir = Path(out_dir)
    if not gpu_indices(summary):
        return PlotsUnderWay([])
    pyplot()
    later = in_child(lambda: _child_plots(summary, out_dir))
    plots: List[Plot] = []
    try:
        if summary.pairs:
            plots += [plot_gbps(summary, out_dir), plot_efficiency(summary, out_dir)]
        numerics = plot_numerics(summary, out_dir)
    except BaseException:
        later.cancel()
        raise
    return PlotsUnderWay(plots, later, numerics)


def _child_plots(summary: Summary, out_dir: Path) -> List[Optional[Plot]]:
    """The figures start_plots leaves to its child: [link class, loss curves] (None: no data)."""
    return [plot_link_class(summary, out_dir) if summary.pairs else None,
            plot_loss_curves(summary, out_dir)]


# --------------------------------------------------------------------------------- heatmap drawers


def _heatmap(summary: Summary, mat, title: str, cbar_label: str, path: Path, fmt: str,
             vmin=None, vmax=None, cmap="viridis", percent: bool = False,
             xlabel: str = "to GPU (destination)", ylabel: str = "from GPU (source)",
             missing_label: str = "not measured") -> Path:
    """A heatmap of numbers (GB/s, efficiency): ``mat[a][b]`` coloured on a colour bar and
    written in its cell (None: not measured)."""
    plt = pyplot()
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
    plt = pyplot()
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


# ----------------------------------------------------------------------------- GB/s and efficiency


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


# -------------------------------------------------------------------------------------- link class


#: Fixed colour per class kind (green NVLink ... red SYS), so plots of different runs compare.
KIND_COLORS = {"NV": "#1a9850", "PIX": "#a6d96a", "PXB": "#d9ef8b", "PHB": "#fee08b", "NODE": "#fdae61",
               "SYS": "#f46d43", "X": SAME_GPU_COLOR}
#: What each class means, for the link-class legend.
CLASS_WORDS = {"PIX": "PCIe, one PCIe switch", "PXB": "PCIe, several PCIe switches",
               "PHB": "PCIe, through the CPU's host bridge", "NODE": "PCIe, host bridges in one NUMA node",
               "SYS": "PCIe, across the CPU interconnect (sockets)", "X": "same GPU"}


def class_color(name: str) -> str:
    try:
        lc = LinkClass.parse(name)
    except ValueError:
        return "#999999"
    if lc.is_nvlink:  # more links: darker green
        return ["#a1d99b", "#74c476", "#41ab5d", "#238b45", "#006d2c"][min(4, (lc.nvlinks - 1) // 4)]
    return KIND_COLORS[lc.kind]


def class_words(name: str) -> str:
    try:
        lc = LinkClass.parse(name)
    except ValueError:
        return CLASS_WORDS.get(name, "link class not known")
    if lc.is_nvlink:
        return f"NVLink, {lc.nvlinks} link{'s' if lc.nvlinks != 1 else ''}"
    return CLASS_WORDS.get(lc.kind, lc.kind)


def plot_link_class(summary: Summary, out_dir: Path) -> Plot:
    """How each pair is connected as the scan read it, one fixed colour per class kind (green
    NVLink, darker with more links ... red SYS) so plots of different runs compare."""
    idx = gpu_indices(summary)
    pos, pairs = _pair_rows(summary)
    labels: List[List[Optional[str]]] = [[None] * len(idx) for _ in idx]
    classes: Dict[str, int] = {}
    for p in pairs:
        if p.link_class:
            a, b = pos[p.gpus[0]], pos[p.gpus[1]]
            labels[a][b] = labels[b][a] = p.link_class
            classes[p.link_class] = classes.get(p.link_class, 0) + 1
    for k in range(len(idx)):
        labels[k][k] = "X"

    def rank(c):
        try:
            return LinkClass.parse(c).rank
        except ValueError:
            return (99, 0)

    ordered = sorted(classes, key=rank)
    palette = {c: class_color(c) for c in ordered}
    palette["X"] = SAME_GPU_COLOR
    names = {c: f"{c}: {class_words(c)} ({classes[c]} pair{'s' if classes[c] != 1 else ''})" for c in ordered}
    names["X"] = "X: same GPU"
    path = _categorical(summary, labels, palette, _title(summary, "link class per pair", "as read by the scan (NVML)"),
                        Path(out_dir) / "heatmap_link_class.png", legend_labels=names, legend_title="link class")
    return Plot(path.name, "Link class per pair", path,
                "How each pair is connected, as the scan read it: NV# = # NVLinks; PIX/PXB/PHB/NODE/SYS = PCIe "
                "paths from one switch up to across sockets (as nvidia-smi topo -m).")


# -------------------------------------------------------------------------------- numerics verdict


NUMERICS_PALETTE = {"ok": "#66bd63", "diverged": "#fdae61", "nan": "#d73027", "hang": "#7b3294",
                    "crash": "#40004b", "not measured": NOT_MEASURED_COLOR, "same GPU": SAME_GPU_COLOR}
NUMERICS_WORDS = {"ok": "ok: matched the one-GPU reference", "diverged": "diverged from the reference",
                  "nan": "loss or gradient went NaN/Inf", "hang": "training run hung",
                  "crash": "training run crashed", "not measured": "not measured", "same GPU": "same GPU"}


def plot_numerics(summary: Summary, out_dir: Path) -> Optional[Plot]:
    """The training verdict per pair, nn.DataParallel above the diagonal and DDP below it, with
    the step a run went bad (nan@N, diverged@N); None when the run has no numerics."""
    if not summary.run.numerics:
        return None
    idx = gpu_indices(summary)
    n = len(idx)
    pos, pairs = _pair_rows(summary)
    labels: List[List[Optional[str]]] = [["not measured"] * n for _ in idx]
    texts: List[List[Optional[str]]] = [[None] * n for _ in idx]
    steps = {}
    for rec in summary.run.numerics:
        if rec.get("step") is not None and rec.get("verdict") not in (None, "ok"):
            steps[(record_gpus(rec), rec.get("way"))] = rec["step"]
    for p in pairs:
        a, b = pos[p.gpus[0]], pos[p.gpus[1]]
        for (r, c), way in (((a, b), "dp"), ((b, a), "ddp")):  # above the diagonal: DataParallel; below: DDP
            v = p.numerics.get(way)
            if v is None:
                continue
            labels[r][c] = v if v in NUMERICS_PALETTE else "not measured"
            step = steps.get((tuple(p.gpus), way))
            texts[r][c] = v if step is None or v == "ok" else f"{v}\n@{step}"
    for k in range(n):
        labels[k][k] = "same GPU"
    # Wrong data is painted over DataParallel's cell (raw peer copies, the path the bench found
    # wrong) and over cells with no verdict, never over a verdict DDP measured itself: its NCCL
    # may route around the broken path, and its "ok" is its own result.
    wrong = {(r, c) for r, c in wrong_data_cells(pos, pairs)
             if r < c or labels[r][c] == "not measured"}
    path = _categorical(summary, labels, NUMERICS_PALETTE,
                        _title(summary, "training numerics verdict per pair",
                               "above the diagonal: nn.DataParallel  |  below the diagonal: DDP  (@N: from step N)"),
                        Path(out_dir) / "heatmap_numerics.png", texts=texts,
                        xlabel="GPU (column)", ylabel="GPU (row)", legend_labels=NUMERICS_WORDS, legend_title="verdict",
                        wrong_cells=wrong)
    return Plot(path.name, "Numerics verdict per pair (above the diagonal DataParallel, below DDP)", path,
                "The same training job on each pair: cell (i, j) above the diagonal is nn.DataParallel on GPUs i,j, "
                "below it DDP; each compared with the job on one GPU (the reference). nan@N / diverged@N: from step N.")


# ------------------------------------------------------------------------------------- loss curves


#: Most flagged runs drawn in loss_curves.png (the rest are in numerics_losses.csv). Each is
#: two axes, and matplotlib spends about 50 ms on an axes: 16 panels were half a report's CPU.
MAX_LOSS_PANELS = 8


def _finite(xs):
    return [(k, x) for k, x in enumerate(xs) if isinstance(x, (int, float)) and math.isfinite(x)]


WAY_LABELS = {"dp": "nn.DataParallel", "ddp": "DDP", "reference": "one GPU (reference)"}


def _rel_dev(losses, ref) -> List[tuple]:
    """(step, |loss - ref| / |ref|) where both are finite and the deviation is not zero."""
    out = []
    for k, (x, r) in enumerate(zip(losses, ref)):
        if all(isinstance(v, (int, float)) and math.isfinite(v) for v in (x, r)) and r != 0 and x != r:
            out.append((k, abs(x - r) / abs(r)))
    return out


def panels(flagged: List[dict], most: int = MAX_LOSS_PANELS) -> List[dict]:
    """The flagged runs to draw, in GPU order: every kind of failure first (one run of each
    verdict, link class and way, NaN before diverged), then more of each kind in turn, up to
    ``most``. The first ``most`` runs in GPU order were often one kind only (every diverged
    run of GPU 0's pairs), while a NaN on another class went undrawn."""
    def kind(r):
        return (0 if r.get("verdict") == "nan" else 1, str(r.get("link_class") or ""),
                str(r.get("way") or ""))

    groups: dict = {}
    for r in sorted(flagged, key=lambda r: (kind(r), record_gpus(r))):
        groups.setdefault(kind(r), []).append(r)
    chosen: List[dict] = []
    depth = 0
    while len(chosen) < min(most, len(flagged)):
        for runs in groups.values():
            if depth < len(runs) and len(chosen) < most:
                chosen.append(runs[depth])
        depth += 1
    return sorted(chosen, key=lambda r: (record_gpus(r), r.get("way") or ""))


def plot_loss_curves(summary: Summary, out_dir: Path) -> Optional[Plot]:
    """Loss per step of each flagged (nan/diverged) pair and way, against the one-GPU reference
    and the other way on the same GPUs; below each, the relative deviation from the reference
    against the tolerance (so a divergence too small to see in the loss still shows)."""
    recs = summary.run.numerics
    flagged = [r for r in recs if r.get("verdict") in BAD_VERDICTS and r.get("way") != "reference"
               and isinstance(r.get("losses"), list)]
    if not flagged:
        return None
    flagged.sort(key=lambda r: (record_gpus(r), r.get("way") or ""))
    refs = [r for r in recs if r.get("way") == "reference" and isinstance(r.get("losses"), list)]
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    shown = panels(flagged)
    n = len(shown)
    cols = min(4 if n > 9 else 3, n)
    rows = (n + cols - 1) // cols
    more = len(flagged) - n
    legend_cols = 5 if cols >= 3 else 3
    title_in = 0.55 + (0.2 if more else 0)  # suptitle lines, inches
    header_in = title_in + (0.3 if legend_cols == 5 else 0.5) + 0.25  # + legend rows + panel title
    height = 4.0 * rows + header_in
    width = max(4.6 * cols, 8.0)
    fig = plt.figure(figsize=(width, height))
    # Margins set here, not by savefig's bbox_inches="tight" (which draws the 2 x 16 panels twice:
    # half of the report's plotting time): room for the y labels left, little right.
    outer = fig.add_gridspec(rows, cols, hspace=0.32, wspace=0.3, top=1 - header_in / height,
                             bottom=0.55 / height, left=0.75 / width, right=1 - 0.2 / width)
    for k, rec in enumerate(shown):
        inner = outer[k // cols, k % cols].subgridspec(2, 1, height_ratios=[3, 1.3], hspace=0.08)
        ax = fig.add_subplot(inner[0])
        dax = fig.add_subplot(inner[1], sharex=ax)
        gpus = record_gpus(rec)
        way, verdict, step = str(rec.get("way")), rec.get("verdict"), rec.get("step")
        ref = next((r for r in refs if record_gpus(r) == gpus), None) or (refs[0] if refs else None)
        if isinstance(rec.get("reference_losses"), list):
            ref_losses = rec["reference_losses"]
        else:
            ref_losses = ref["losses"] if ref else None
        other_way = {"dp": "ddp", "ddp": "dp"}.get(way)
        other = next((r for r in recs if r.get("way") == other_way and record_gpus(r) == gpus
                      and isinstance(r.get("losses"), list)), None)
        pts = _finite(rec["losses"])
        series = [pts]
        if ref_losses:
            rp = _finite(ref_losses)
            series.append(rp)
            ax.plot([p[0] for p in rp], [p[1] for p in rp], "-", color="black", lw=2.2, alpha=0.45, zorder=2,
                    label=WAY_LABELS["reference"])
        if other:
            op = _finite(other["losses"])
            series.append(op)
            ax.plot([p[0] for p in op], [p[1] for p in op], "--", color="#4575b4", lw=1.2, zorder=3,
                    label=f"{WAY_LABELS.get(str(other_way), str(other_way))} ({other.get('verdict')})")
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color="#d73027", ms=2.5, lw=1.2, zorder=4,
                label=f"{WAY_LABELS.get(way, way)} ({verdict})")
        values = [v for s in series for _, v in s]
        log = bool(values) and min(values) > 0 and max(values) / min(values) > 50
        if log:
            ax.set_yscale("log")
        if verdict == "nan" and isinstance(step, int):
            before = [p for p in pts if p[0] < step] or pts
            y = before[-1][1] if before else 1.0
            ax.plot([step], [y], "X", color="#d73027", ms=9, zorder=5)
            ax.axvspan(step - 0.5, len(rec["losses"]) - 0.5, color="#d73027", alpha=0.08, lw=0)
        if step is not None:
            ax.axvline(step, color="#d73027", ls=":", lw=1)
            dax.axvline(step, color="#d73027", ls=":", lw=1)
        ax.set_title(f"GPUs {','.join(map(str, gpus))} ({rec.get('link_class') or '?'}): "
                     f"{WAY_LABELS.get(way, way)} {verdict}" + (f"@{step}" if step is not None else ""), fontsize=9,
                     y=1.0)  # a fixed place: matplotlib's automatic one measures every tick label
        ax.set_ylabel("loss" + (" (log scale)" if log else ""), fontsize=8)
        ax.tick_params(labelsize=7, labelbottom=False)
        # Relative deviation from the reference, with the tolerance the verdict used.
        if ref_losses:
            d = _rel_dev(rec["losses"], ref_losses)
            if d:
                dax.plot([p[0] for p in d], [p[1] for p in d], "o-", color="#d73027", ms=2, lw=1)
            if other:
                od = _rel_dev(other["losses"], ref_losses)
                if od:
                    dax.plot([p[0] for p in od], [p[1] for p in od], "--", color="#4575b4", lw=1)
        tol = (rec.get("tolerance") or {}).get("loss_rel")
        if isinstance(tol, (int, float)) and tol > 0:
            dax.axhline(tol, color="black", ls="--", lw=0.8)
            dax.text(0.01, tol, " tolerance", transform=dax.get_yaxis_transform(), va="bottom", fontsize=6.5)
        dax.set_yscale("log")
        dax.set_ylabel("|loss - ref|\n/ ref", fontsize=7)
        dax.set_xlabel("training step", fontsize=8)
        dax.tick_params(labelsize=7)
        dax.xaxis.set_major_locator(MaxNLocator(integer=True))
    sub = ("upper panels: training loss per step; lower panels: |loss - reference| / reference (log scale) "
           "against the measured tolerance")
    if more:
        sub += f"\n{n} of {len(flagged)} flagged runs shown; all are in numerics_losses.csv"
    fig.suptitle(_title(summary, "loss curves of flagged pairs", sub), fontsize=11, y=1 - 0.1 / height, va="top")
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    fig.legend(handles=[Line2D([], [], color="#d73027", marker="o", ms=3, label="flagged run (title: way, verdict@step)"),
                        Line2D([], [], color="black", lw=2.2, alpha=0.45, label="same job on one GPU (reference)"),
                        Line2D([], [], color="#4575b4", ls="--", label="the other way on the same GPUs"),
                        Line2D([], [], color="#d73027", ls=":", label="step it went bad (NaN, or off by > 1 %)"),
                        Patch(facecolor="#d73027", alpha=0.15, label="NaN/Inf from here on")],
               loc="upper center", bbox_to_anchor=(0.5, 1 - title_in / height), ncol=legend_cols,
               fontsize=8, frameon=False)
    path = Path(out_dir) / "loss_curves.png"
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    caption = ("Training loss per step (x: step, y: loss, log scale where the values span more than 50x) of "
               "each run flagged nan or diverged, against the one-GPU reference and the other way on the same "
               "GPUs; below each, |loss - reference| / reference against the measured tolerance. diverged@N: "
               "the step the curves part (off the reference by more than 1 %); nan@N: the first NaN/Inf.")
    if more:
        caption += f" {n} of {len(flagged)} flagged runs are drawn; numerics_losses.csv has all."
    return Plot(path.name, "Loss curves of flagged pairs against their reference", path, caption)
