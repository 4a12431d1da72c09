"""counter-growth judged by rate (report/history_findings.py): PCIe replays growing slower than
NVIDIA DCGM's PCIe health watch warns at on any link (1 a minute) are info; faster, a warning;
NVLink recovery growth (DCGM fails any) stays a warning."""

from __future__ import annotations

from gputopo.history.counters import DAY_S, CounterGrowth
from gputopo.report.history_findings import counter_growth_findings


def _growth(counter, previous, current, rates, link=None):
    return CounterGrowth("GPU-a", 0, "00000000:18:00.0", counter, link, previous, current,
                         0.0, DAY_S, rates, 0.0)


def _severity(g):
    (f,) = counter_growth_findings([g])
    return f.severity, f.message


def test_a_few_pcie_replays_a_day_are_info():
    sev, msg = _severity(_growth("pcie_replay", 3, 5, [2.0]))
    assert sev == "info" and "DCGM" in msg and "under 1 a minute" in msg


def test_pcie_replays_above_dcgms_floor_are_a_warning():
    sev, msg = _severity(_growth("pcie_replay", 0, 5000, [5000.0]))
    assert sev == "warning" and "DCGM" not in msg


def test_slow_pcie_replays_rising_three_times_are_a_warning_not_an_error():
    assert _severity(_growth("pcie_replay", 10, 18, [1.0, 3.0, 8.0]))[0] == "warning"
    assert _severity(_growth("pcie_replay", 10, 18000, [100.0, 3000.0, 18000.0]))[0] == "error"


def test_nvlink_recovery_growth_stays_a_warning_and_rising_an_error():
    assert _severity(_growth("nvlink_recovery", 0, 2, [2.0], link=3))[0] == "warning"
    assert _severity(_growth("nvlink_recovery", 0, 14, [2.0, 4.0, 8.0], link=3))[0] == "error"


def test_no_time_between_scans_is_never_judged_slow():
    assert _severity(_growth("pcie_replay", 3, 9, [None]))[0] == "warning"
