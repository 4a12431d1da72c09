"""Growing error counters (`counter-growth`, judged against the history) and an unhealthy or
unregistered NVLink fabric (`nvlink-fabric`) mark the pairs whose traffic uses that link: in
`gputopo place` (degraded) and in the report's pair rows. NVLink counters and the fabric bear on
NVLink pairs, PCIe replays on PCIe pairs, other counters (ECC, Xids, a NIC's) on none; info never."""

from __future__ import annotations

import pynvml as P

from gputopo.history.counters import CounterGrowth
from gputopo.report.history_findings import counter_growth_findings
from gputopo.report.pairs import pair_rows
from gputopo.report.placement import rank, scan_states
from gputopo.report.topology_checks import topology_findings
from conftest_report import seed_topology
from helpers.fake_scan import nvml_topology

DAY = 86400.0


def _growth(gpu: int, counter: str, link, rates, uuid=None) -> CounterGrowth:
    return CounterGrowth(gpu_uuid=uuid or f"GPU-{gpu:08d}", nvml_index=gpu, bus_id=None, counter=counter,
                         link=link, previous=10, current=20, previous_s=0.0, current_s=DAY,
                         rates_per_day=rates, since_s=0.0)


def _degraded(topo, findings):
    states, _out = scan_states(topo, findings)
    return {p for p, st in states.items() if st.state == "degraded"}, states


def test_growing_nvlink_counters_mark_the_gpus_nvlink_pairs_degraded():
    topo = seed_topology()
    fs = counter_growth_findings([_growth(3, "nvlink_crc_flit", 1, [50.0])])
    assert [f.severity for f in fs] == ["warning"]
    degraded, states = _degraded(topo, fs)
    assert degraded == {(2, 3)}  # GPU 3's NVLinks are wired to GPU 2 only
    assert "NVLink error counters growing" in " ".join(states[(2, 3)].reasons)
    placed, _notes = rank(topo, 2, states, {}, set())
    assert all(3 not in pl.gpus for pl in placed)  # not recommended as if clean


def test_growing_pcie_replays_mark_the_gpus_pcie_pairs_and_slow_growth_none():
    topo = seed_topology()
    fs = counter_growth_findings([_growth(2, "pcie_replay", None, [5000.0])])
    assert [f.severity for f in fs] == ["warning"]
    degraded, _ = _degraded(topo, fs)
    assert degraded == {p for p in _degraded(topo, [])[1] if 2 in p} - {(2, 3)}
    slow = counter_growth_findings([_growth(2, "pcie_replay", None, [10.0])])
    assert [f.severity for f in slow] == ["info"]
    assert _degraded(topo, slow)[0] == set()


def test_growth_of_counters_that_are_no_link_marks_no_pair():
    topo = seed_topology()
    fs = counter_growth_findings([_growth(1, "ecc_corrected_volatile", None, [50.0]),
                                  _growth(1, "xid", None, [50.0]),
                                  _growth(0, "nic_symbol_error", 1, [50.0], uuid="nic:mlx5_0:1")])
    assert {f.severity for f in fs} == {"warning"}
    assert _degraded(topo, fs)[0] == set()


def test_a_rising_nvlink_counter_flags_the_pair_row_broken_and_only_its_pairs():
    topo = seed_topology()
    fs = counter_growth_findings([_growth(6, "nvlink_replay", 0, [1.0, 2.0, 3.0])])
    assert [f.severity for f in fs] == ["error"]
    rows = {r.gpus: r for r in pair_rows(topo, [], [], {}, fs)}
    assert [k for k, r in rows.items() if r.findings] == [(6, 7)]
    assert rows[(6, 7)].verdict == "broken" and rows[(0, 1)].verdict == "not-measured"


def _switch_scan(tmp_path):
    return nvml_topology(tmp_path, 'extends = "dgx-h100"\nname = "fh"\n', "fh")


def _mask(**true):
    healthy = {"DEGRADED_BW": P.NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_FALSE,
               "ROUTE_RECOVERY": P.NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_RECOVERY_FALSE,
               "ROUTE_UNHEALTHY": P.NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_FALSE,
               "ACCESS_TIMEOUT_RECOVERY": P.NVML_GPU_FABRIC_HEALTH_MASK_ACCESS_TIMEOUT_RECOVERY_FALSE,
               "INCORRECT_CONFIGURATION": P.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NONE}
    healthy.update(true)
    return sum(v << getattr(P, f"NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_{k}") for k, v in healthy.items())


def test_an_unhealthy_fabric_route_marks_that_gpus_pairs_degraded(tmp_path):
    topo = _switch_scan(tmp_path)
    for g in topo.gpus:
        g.fabric.health_mask = _mask()
    assert _degraded(topo, topology_findings(topo))[0] == set()  # healthy: nothing marked
    topo.gpu(3).fabric.health_mask = _mask(ROUTE_UNHEALTHY=P.NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_TRUE)
    fs = [f for f in topology_findings(topo) if f.kind == "nvlink-fabric"]
    assert [(f.severity, f.gpus) for f in fs] == [("error", [3])]
    degraded, states = _degraded(topo, topology_findings(topo))
    assert degraded == {p for p in states if 3 in p}
    placed, _notes = rank(topo, 4, states, {}, set())
    assert placed and all(3 not in pl.gpus and pl.state == "ok" for pl in placed)


def test_a_degraded_fabric_bandwidth_on_two_gpus_flags_each_pair_row_once(tmp_path):
    topo = _switch_scan(tmp_path)
    for g in topo.gpus:
        g.fabric.health_mask = _mask(DEGRADED_BW=P.NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE
                                     if g.nvml_index in (2, 5) else P.NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_FALSE)
    fs = [f for f in topology_findings(topo) if f.kind == "nvlink-fabric"]
    assert [(f.severity, f.gpus) for f in fs] == [("warning", [2, 5])]
    rows = {r.gpus: r for r in pair_rows(topo, [], [], {}, fs)}
    flagged = {k for k, r in rows.items() if r.findings}
    assert flagged == {p for p in rows if len(p) == 2 and (2 in p or 5 in p)}
    assert len(rows[(2, 5)].findings) == 1 and rows[(2, 5)].verdict == "degraded"
    degraded, states = _degraded(topo, fs)
    assert degraded == flagged
