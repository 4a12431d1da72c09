"""loss_curves.png: the loss per step of each flagged (nan/diverged) run against the one-GPU
reference and the other way on the same GPUs, with the relative deviation from the reference
against the tolerance below each (a divergence too small to see in the loss still shows).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import List, Optional

from gputopo.numerics.result import record_gpus
from gputopo.numerics.verdict import BAD_VERDICTS
from gputopo.report.summary import Summary

from .plot_common import DPI, Plot, _plt, _title

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
    plt = _plt()
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
