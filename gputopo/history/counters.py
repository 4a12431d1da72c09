"""Compare a scan's error counters with the machine's earlier scans: the measurements the
`counter-growth` finding is made of (gputopo/report/history_findings.py judges them).

A counter that fell (driver reload, reboot, a reset) starts over: nothing before the fall is
compared. The rate is per day of the scans' own times (a simulated machine's clock when its
description sets one). "Keeps rising" needs three growth intervals in a row, each faster than
the one before, so four scans: fewer say only that it grew.
"""

from __future__ import annotations

from dataclasses import dataclass

from .query import CounterKey
from .record import CounterValue

DAY_S = 86400.0
#: Scans before this one that are read: three intervals judge "keeps rising", the rest find
#: since when the counter has grown at every scan.
SCANS_BACK = 30


@dataclass
class CounterGrowth:
    gpu_uuid: str
    nvml_index: int
    bus_id: str | None
    counter: str
    link: int | None
    previous: int
    current: int
    previous_s: float
    current_s: float
    rates_per_day: list[float | None]  # each growth interval's rate, oldest first (None: no time passed)
    since_s: float  # the first scan of the unbroken run of growing scans that saw it higher

    @property
    def delta(self) -> int:
        return self.current - self.previous

    @property
    def rate_per_day(self) -> float | None:
        return self.rates_per_day[-1] if self.rates_per_day else None

    @property
    def keeps_rising(self) -> bool:
        """Three growth intervals in a row, each with a higher rate than the one before."""
        r = self.rates_per_day[-3:]
        return (len(r) == 3 and all(x is not None for x in r)
                and r[0] < r[1] < r[2])  # type: ignore[operator]


def growth(current: list[CounterValue], now_s: float,
           history: dict[CounterKey, list[tuple[float, int]]]) -> list[CounterGrowth]:
    """The counters of ``current`` that are higher than at the last scan (history oldest first)."""
    out: list[CounterGrowth] = []
    for c in current:
        past = history.get((c.gpu_uuid, c.counter, c.link))
        if not past:
            continue
        series = past + [(now_s, c.value)]
        # only the unbroken stretch since the last fall (a reset) is comparable
        start = max((k for k in range(1, len(series)) if series[k][1] < series[k - 1][1]), default=0)
        series = series[start:]
        if len(series) < 2 or series[-1][1] <= series[-2][1]:
            continue
        rates: list[float | None] = []
        since_s = series[-1][0]
        for k in range(len(series) - 1, 0, -1):  # back through the growing intervals
            (t0, v0), (t1, v1) = series[k - 1], series[k]
            if v1 <= v0:
                break
            rates.insert(0, (v1 - v0) / ((t1 - t0) / DAY_S) if t1 > t0 else None)
            since_s = t1
        out.append(CounterGrowth(c.gpu_uuid, c.nvml_index, c.bus_id, c.counter, c.link,
                                 series[-2][1], c.value, series[-2][0], now_s, rates, since_s))
    return out
