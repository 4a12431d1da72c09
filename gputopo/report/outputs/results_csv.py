"""results.csv: one row per measurement, written through pandas (imported here, not at load).

Derived columns (median, algbw, busbw, efficiency) come from the raw samples every time; the
raw samples themselves stay in measurements.jsonl. A failed measurement has an ``error`` and
empty figures; a figure that does not exist (no topology, cpu fabric) is empty, never NaN-as-n/a.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import List, Optional

from gputopo.report.headline import efficiency_of, link_class_of, measured_gbps, metric_of
from gputopo.report.summary import Summary

FILENAME = "results.csv"
COLUMNS = ["test", "in_place", "gpus", "link_class", "direction", "size_bytes", "bytes_per_iter",
           "n_samples", "median_us", "iqr_us", "noisy", "algbw_gbps", "busbw_gbps", "busbw_factor",
           "metric", "expected_gbps", "efficiency", "wrong", "first_bad_index", "error", "timing",
           "fabric", "simulated", "extra"]


def _num(x):
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None


def result_rows(summary: Summary) -> List[dict]:
    topo = summary.run.topology
    rows = []
    for m in summary.run.measurements:
        gbps = measured_gbps(m)
        eff, exp = efficiency_of(topo, m, gbps)
        ok_time = m.error is None and bool(m.samples_s)
        wrong: Optional[int] = m.wrong
        if m.extra.get("wrong_not_available"):
            wrong = None  # nccl-tests printed N/A: validation was off, nothing was checked
        rows.append({
            "test": m.test, "in_place": bool(m.extra.get("in_place", False)),
            "gpus": "-".join(map(str, m.gpus)), "link_class": link_class_of(topo, m),
            "direction": m.direction, "size_bytes": m.size_bytes, "bytes_per_iter": m.bytes_per_iter,
            "n_samples": m.n, "median_us": _num(m.median_us) if ok_time else None,
            "iqr_us": _num(m.iqr_s * 1e6) if ok_time else None, "noisy": m.noisy,
            "algbw_gbps": _num(m.algbw_gbps) if ok_time else None,
            "busbw_gbps": _num(m.busbw_gbps) if ok_time else None, "busbw_factor": m.busbw_factor,
            "metric": metric_of(m), "expected_gbps": exp.gbps, "efficiency": eff,
            "wrong": wrong, "first_bad_index": m.first_bad_index,
            "error": m.error.error if m.error is not None else None, "timing": m.timing,
            "fabric": m.fabric, "simulated": summary.simulated,
            "extra": json.dumps(m.extra, sort_keys=True, default=str) if m.extra else "",
        })
    return rows


def write_results_csv(summary: Summary, out_dir) -> Path:
    import pandas as pd

    path = Path(out_dir) / FILENAME
    df = pd.DataFrame(result_rows(summary), columns=COLUMNS)
    # Integer columns that may be empty keep integers (not 1.0) thanks to the nullable dtype.
    for col in ("wrong", "first_bad_index"):
        df[col] = df[col].astype("Int64")
    df.to_csv(path, index=False)
    return path
