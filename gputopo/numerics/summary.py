"""Plain-text lines summing up a numerics run, for a terminal (the CLI may put them in a table).

One row per pair: link class and each way's verdict (``nan@3`` = NaN from step 3), then how
DataParallel split the batch and the measured tolerance. Plain strings, no rich, no torch.
"""

from __future__ import annotations

from typing import Dict, List, Tuple

from .result import WAYS, NumericsResult

SHORT = {"reference": "1 GPU", "dp": "DataParallel", "ddp": "DDP"}


def verdict_text(rec: NumericsResult) -> str:
    """'ok', 'nan@3', 'diverged@0', 'hang', 'crash'."""
    return rec.verdict if rec.step is None else f"{rec.verdict}@{rec.step}"


def rows(results: List[NumericsResult]) -> List[Dict[str, str]]:
    """One dict per pair: gpus, link_class, reference, dp, ddp, dp_split, final losses."""
    by_pair: Dict[Tuple[int, ...], Dict[str, NumericsResult]] = {}
    for r in results:
        by_pair.setdefault(tuple(r.gpus), {})[r.way] = r
    out = []
    for pair, ways in by_pair.items():
        any_rec = next(iter(ways.values()))
        row = {"gpus": ",".join(map(str, pair)), "link_class": any_rec.link_class}
        for way in WAYS:
            row[way] = verdict_text(ways[way]) if way in ways else "-"
        dp = ways.get("dp")
        row["dp_split"] = "+".join(map(str, dp.dp_split)) if dp is not None and dp.dp_split else "-"
        out.append(row)
    return out


def summary_lines(run) -> List[str]:
    """The rows as aligned text, then the tolerance and the notes (a NumericsRun)."""
    table = rows(run.results)
    head = {"gpus": "GPUs", "link_class": "class", "reference": SHORT["reference"],
            "dp": SHORT["dp"], "ddp": SHORT["ddp"], "dp_split": "DP split"}
    cols = list(head)
    widths = {c: max([len(head[c])] + [len(r[c]) for r in table]) for c in cols}
    lines = ["  ".join(head[c].ljust(widths[c]) for c in cols)]
    lines += ["  ".join(r[c].ljust(widths[c]) for c in cols) for r in table]
    o = run.options
    lines.append(f"job: {o.model}, {o.steps} steps, batch {o.batch}, SGD lr {o.lr:g} momentum "
                 f"{o.momentum:g}, seed {o.seed}; fabric {run.fabric}")
    lines += run.tolerance_lines()
    return lines
