"""The spec's ``[history]`` rule: each headline figure against this machine's own baseline.

``baseline_fraction = 0.8, runs = 5``: every pair's (and class's) headline figure must be at
least 80 % of the median of the machine's last 5 error-free runs at the same series, size and
time source. With no baseline yet (a new machine, or --no-history) the rule is skipped and says
why (a strict spec fails it): nothing was measured to judge against.
"""

from __future__ import annotations

from gputopo.history.drift import DriftPoint

from .rules import FAILED, PASSED, SKIPPED, Outcome
from .spec import Spec

RULE = "history.baseline_fraction"


def drift_outcomes(spec: Spec, points: list[DriftPoint], baseline_runs: int,
                     unavailable: str | None = None) -> list[Outcome]:
    fraction = spec.history_fraction
    assert fraction is not None
    if unavailable or not points:
        why = unavailable or ("no baseline: the history holds no earlier error-free run of this "
                              "machine with the same series and sizes")
        status = FAILED if spec.strict else SKIPPED
        return [Outcome(RULE, "machine", status,
                        ("strict spec: no data to judge: " if spec.strict else "") + why)]
    out = []
    for p in points:
        subject = "-".join(map(str, p.gpus)) if p.gpus else f"class {p.link_class}"
        series = p.series + (f" {p.direction}" if p.direction and p.direction != "both" else "")
        ok = p.ratio >= fraction
        out.append(Outcome(
            RULE, f"{subject} {series}", PASSED if ok else FAILED,
            f"{p.gbps:.2f} GB/s is {p.ratio:.1%} of the baseline {p.baseline_gbps:.2f} GB/s "
            f"(median of {p.baseline_runs} runs; needs >= {fraction:.0%})",
            gpus=list(p.gpus) if p.gpus else None, link_class=p.link_class,
            evidence={"gbps": round(p.gbps, 4), "baseline_gbps": round(p.baseline_gbps, 4),
                      "ratio": round(p.ratio, 4), "fraction": fraction, "series": p.series,
                      "size_bytes": p.size_bytes, "baseline_runs": p.baseline_runs,
                      "baseline_runs_wanted": spec.history_runs, "timing": p.timing}))
    return out
