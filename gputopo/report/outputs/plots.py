"""PNG plots with matplotlib (Agg, imported inside the functions): heatmaps of GB/s, efficiency,
link class and numerics verdict per pair, and loss curves of flagged pairs against their
reference. Cell (row i, column j) of the bandwidth heatmaps is the direction i -> j; the numerics
heatmap shows DataParallel above the diagonal and DDP below it.

Every figure says what it shows, its unit and where its time came from (``modeled``, ``wall``,
``cuda-events``); a simulated run's figures say SIMULATED in the title. On the bandwidth
heatmaps the pairs with an error finding are outlined in red (a warning: orange), so a pair
that is fast but corrupts data, or whose GPU lost its NVLinks, does not look healthy; a pair that
returned wrong data is, in addition, painted as such (dark, hatched, "wrong data") in every plot
instead of its rate's colour: a green 71 % on a pair that corrupts is a lie by colour.

Modules: plot_common.py (the Plot record, grid, colours, axes, outlines, legends), heatmap_draw.py
(the numeric and categorical heatmap drawers), heatmap_bandwidth.py (GB/s, efficiency),
heatmap_link_class.py, heatmap_numerics.py, loss_curves.py; this module is their public entry.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

from gputopo.report.summary import Summary

from .heatmap_bandwidth import plot_efficiency, plot_gbps
from .heatmap_link_class import CLASS_WORDS, KIND_COLORS, class_color, class_words, plot_link_class
from .heatmap_numerics import NUMERICS_PALETTE, NUMERICS_WORDS, plot_numerics
from .loss_curves import MAX_LOSS_PANELS, WAY_LABELS, plot_loss_curves
from .plot_common import (ANNOTATE_MAX_GPUS, DPI, NOT_MEASURED_COLOR, OUTLINE, SAME_GPU_COLOR, Plot, _plt,
                          _text_color, gpu_indices)

__all__ = ["ANNOTATE_MAX_GPUS", "CLASS_WORDS", "DPI", "KIND_COLORS", "MAX_LOSS_PANELS", "NOT_MEASURED_COLOR",
           "NUMERICS_PALETTE", "NUMERICS_WORDS", "OUTLINE", "Plot", "SAME_GPU_COLOR", "WAY_LABELS", "_text_color",
           "class_color", "class_words", "gpu_indices", "plot_efficiency", "plot_gbps", "plot_link_class",
           "PlotsUnderWay", "plot_loss_curves", "plot_numerics", "start_plots", "write_plots"]


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
    _plt()
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
