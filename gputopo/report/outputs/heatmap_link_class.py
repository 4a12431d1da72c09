"""The link-class heatmap: how each pair is connected as the scan read it, one fixed colour per
class kind (green NVLink, darker with more links ... red SYS) so plots of different runs compare.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional

from gputopo.model import LinkClass
from gputopo.report.summary import Summary

from .heatmap_draw import _categorical
from .plot_common import SAME_GPU_COLOR, Plot, _pair_rows, _title, gpu_indices


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
