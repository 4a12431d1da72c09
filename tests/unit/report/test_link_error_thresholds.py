"""The link-errors rule (report/topology_checks.py): NVML's counters count since the driver
loaded, so one scan's small counts are info that marks no pair; a PCIe replay count above DCGM's
diag limit (80, github.com/NVIDIA/DCGM nvvs/plugin_src/pcie/Pcie.cpp max_pcie_replays) is a
warning that marks the GPU's PCIe pairs degraded."""

from __future__ import annotations

from gputopo.report.placement import scan_states
from gputopo.report.topology_checks import PCIE_REPLAY_LIMIT, topology_findings
from conftest_report import seed_topology


def _link_errors(topo):
    return [f for f in topology_findings(topo) if f.kind == "link-errors"]


def test_a_handful_of_nvlink_crc_errors_is_info_and_marks_no_pair_degraded():
    topo = seed_topology(["link-errors"])  # GPU 3: crc_flit = 7 on each NVLink
    fs = _link_errors(topo)
    assert [(f.severity, f.gpus) for f in fs] == [("info", [3])]
    assert fs[0].evidence["nvlink0.crc_flit"] == 7 and fs[0].evidence["counted_since"] == "driver load"
    assert "driver loaded" in fs[0].message and "rate" in fs[0].message
    states, _out = scan_states(topo, fs)
    assert all(st.state == "ok" for st in states.values())


def test_small_pcie_replays_are_info_and_above_dcgm_limit_a_warning_on_pcie_pairs():
    topo = seed_topology()
    topo.gpu(2).pcie.replay_counter = 5
    fs = _link_errors(topo)
    assert [(f.severity, f.evidence["pcie.replay"]) for f in fs] == [("info", 5)]
    topo.gpu(2).pcie.replay_counter = PCIE_REPLAY_LIMIT  # the limit itself passes the diag
    assert [f.severity for f in _link_errors(topo)] == ["info"]
    topo.gpu(2).pcie.replay_counter = PCIE_REPLAY_LIMIT + 1
    fs = _link_errors(topo)
    assert [(f.severity, f.gpus) for f in fs] == [("warning", [2])]
    assert "DCGM" in fs[0].message and fs[0].evidence["limit"] == 80
    states, _out = scan_states(topo, fs)
    degraded = {p for p, st in states.items() if st.state == "degraded"}
    nv = {(2, 3)}  # GPU 2's NVLink peer: its traffic never crosses the PCIe link
    assert degraded == {p for p in states if 2 in p} - nv


def test_a_warning_and_small_counts_on_one_gpu_are_two_findings():
    topo = seed_topology(["link-errors"])
    topo.gpu(3).pcie.replay_counter = 500
    fs = _link_errors(topo)
    assert sorted(f.severity for f in fs) == ["info", "warning"]
    warn = next(f for f in fs if f.severity == "warning")
    assert not any(k.startswith("nvlink") for k in warn.evidence)  # NVLink pairs are not blamed
    states, _out = scan_states(topo, fs)
    assert states[(2, 3)].state == "ok" and states[(0, 3)].state == "degraded"
