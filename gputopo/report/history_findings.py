"""Findings against the machine's own history: `drift` and `counter-growth`.

The history package measures (gputopo/history/drift.py, counters.py); this module judges, as
every finding is made in report/. A drift is a warning: a pair or class below a fraction of
its own baseline, even when it still passes the link-rate and class thresholds. A counter that
grew since the last scan is a warning; one whose rate rose over three growth intervals in a
row is an error (the link is failing; a public report had an NVLink's recovery counter climb
for five days before the link died). PCIe replays growing slower than NVIDIA's DCGM warns at
on any link are info (a warning when rising): a few a day are normal on a healthy link.

Each finding's evidence says ``"basis": "history"``: it was judged against the database, not
from the run folder's own data, and the folder keeps it in history_findings.json
(history_record.py) so the report shows it without the database.
"""

from __future__ import annotations

import datetime as _dt

from gputopo.history.counters import CounterGrowth
from gputopo.history.drift import DriftPoint
from gputopo.model import Finding
from gputopo.model.finding import where_text
from gputopo.model.sizes import size_text


def when(t: float) -> str:
    """A history time as people read it: UTC, to the minute."""
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def drift_findings(points: list[DriftPoint], fraction: float) -> list[Finding]:
    out = []
    for p in points:
        series = p.series + (f" {p.direction}" if p.direction and p.direction != "both" else "")
        where = (f"{p.link_class} pairs (median of {p.pairs})" if p.scope == "class"
                 else where_text(list(p.gpus or ()), p.link_class))
        out.append(Finding(
            kind="drift", severity="warning", gpus=list(p.gpus) if p.gpus else None,
            link_class=p.link_class,
            message=(f"{where}: {series} at {size_text(p.size_bytes, compact=True)} {p.gbps:.1f} GB/s is "
                     f"{p.ratio:.1%} of this machine's baseline {p.baseline_gbps:.1f} GB/s (median "
                     f"of its last {p.baseline_runs} error-free runs since {when(p.baseline_since_s)}; "
                     f"below {fraction:.0%} is drift)"),
            evidence={"basis": "history", "scope": p.scope, "series": p.series, "direction": p.direction,
                      "size_bytes": p.size_bytes, "gbps": round(p.gbps, 4),
                      "baseline_gbps": round(p.baseline_gbps, 4), "baseline_runs": p.baseline_runs,
                      "ratio": round(p.ratio, 4), "fraction": fraction, "timing": p.timing,
                      "pairs": p.pairs},
            cause="this machine measures slower than it used to (a link, a GPU's clocks or "
                  "its PCIe link changed since the baseline runs)",
            remedies=["compare with an earlier run: `gputopo history --pair I,J` / `gputopo diff A B`",
                      "scan for downtrained PCIe, NVLinks down or growing error counters: `gputopo scan`"]))
    return out


def _nic(g: CounterGrowth) -> str | None:
    """The RDMA device of a NIC port's counter (history/record.py nic_counters_of), else None."""
    if not g.gpu_uuid.startswith("nic:"):
        return None
    return g.gpu_uuid[len("nic:"):].rsplit(":", 1)[0]


def _link_text(g: CounterGrowth) -> str:
    nic = _nic(g)
    if nic is not None:
        return f"NIC {nic} port {g.link}"
    return f"GPU {g.nvml_index} NVLink {g.link}" if g.link is not None else f"GPU {g.nvml_index}"


def _rate(r: float | None) -> str:
    return "n/a (no time between the scans)" if r is None else f"{r:,.1f}/day"


#: PCIe replays a day below which growth is under the rate NVIDIA's DCGM PCIe health watch warns
#: at on any link: it warns above ceil(1e-12 BER x lane rate x 60 s x lanes) replays a minute
#: (github.com/NVIDIA/DCGM modules/health/DcgmHealthWatch.cpp, GetExpectedPcieReplayRate), at
#: least 1 a minute (Gen1 x1), 16 on Gen4 x16, 31 on Gen5 x16. A few replays a day on a healthy
#: link are normal: such growth is info (a warning when its rate rose three scans in a row).
PCIE_REPLAY_DCGM_FLOOR_PER_DAY = 1440.0


def _slow_pcie_replays(g: CounterGrowth) -> bool:
    r = g.rate_per_day
    return g.counter == "pcie_replay" and r is not None and r < PCIE_REPLAY_DCGM_FLOOR_PER_DAY


def counter_growth_findings(growths: list[CounterGrowth]) -> list[Finding]:
    out = []
    for g in growths:
        rising = g.keeps_rising
        slow = _slow_pcie_replays(g)
        rates = ", ".join(_rate(r) for r in g.rates_per_day[-3:])
        msg = (f"{_link_text(g)}: {g.counter} grew by {g.delta:,} ({g.previous:,} -> {g.current:,}) "
               f"since the scan of {when(g.previous_s)}, {_rate(g.rate_per_day)}; growing at every "
               f"scan since {when(g.since_s)}")
        if rising:
            msg += f"; the rate rose over the last three scans ({rates}): the link is getting worse"
        if slow:
            msg += ("; averaged over the interval that is under 1 a minute, below the rate NVIDIA's DCGM "
                    "PCIe health watch warns at on any link (16 a minute on Gen4 x16)")
        nic = _nic(g)
        evidence = {"basis": "history", "counter": g.counter, "link": g.link, "gpu_uuid": g.gpu_uuid,
                    "bus_id": g.bus_id, "previous": g.previous, "current": g.current,
                    "delta": g.delta, "previous_time": when(g.previous_s),
                    "time": when(g.current_s), "rate_per_day": g.rate_per_day,
                    "rates_per_day": g.rates_per_day, "since": when(g.since_s),
                    "keeps_rising": rising}
        if nic is not None:
            evidence.update(nic=nic, port=g.link)
        out.append(Finding(
            kind="counter-growth",
            severity=("warning" if rising else "info") if slow else ("error" if rising else "warning"),
            gpus=None if nic is not None else [g.nvml_index], link_class=None, message=msg,
            evidence=evidence,
            cause=("error counters only grow while something is wrong: a marginal NIC port (cable, "
                   "transceiver, switch port)" if nic is not None else
                   "error counters only grow while something is wrong: a marginal NVLink (cable, "
                   "connector, NVSwitch port) or PCIe link, or a GPU's memory"),
            remedies=["watch it: `gputopo history` after each scan, or `gputopo export` to Prometheus",
                      "reseat or replace the part if it keeps growing; drain the node before the link fails"]))
    return out
