"""The numerics heatmap: the training verdict per pair, nn.DataParallel above the diagonal and
DDP below it, with the step a run went bad (nan@N, diverged@N).
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

from gputopo.numerics.result import record_gpus
from gputopo.report.summary import Summary

from .heatmap_draw import _categorical
from .wrong_data import wrong_data_cells
from .plot_common import NOT_MEASURED_COLOR, SAME_GPU_COLOR, Plot, _pair_rows, _title, gpu_indices


NUMERICS_PALETTE = {"ok": "#66bd63", "diverged": "#fdae61", "nan": "#d73027", "hang": "#7b3294",
                    "crash": "#40004b", "not measured": NOT_MEASURED_COLOR, "same GPU": SAME_GPU_COLOR}
NUMERICS_WORDS = {"ok": "ok: matched the one-GPU reference", "diverged": "diverged from the reference",
                  "nan": "loss or gradient went NaN/Inf", "hang": "training run hung",
                  "crash": "training run crashed", "not measured": "not measured", "same GPU": "same GPU"}


def plot_numerics(summary: Summary, out_dir: Path) -> Optional[Plot]:
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
