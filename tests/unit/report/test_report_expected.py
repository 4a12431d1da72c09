"""Theoretical rates per pair and the headline figure / efficiency of a series."""

from __future__ import annotations

import pytest

from conftest_report import _m, seed_topology
from gputopo.model import NotAvailable
from gputopo.model.topology import class_of
from gputopo.report.expected import group_rate, pair_rate
from gputopo.report.headline import efficiency_of, expected_for, headlines


def test_nvlink_rate_is_version_times_links():
    topo = seed_topology()
    r = pair_rate(topo, 0, 1)
    assert r.gbps == pytest.approx(100.0)  # NVLink v3, 4 links x 25 GB/s
    assert "NVLink v3 x 4 links" in r.basis


def test_pcie_rate_uses_max_gen_and_current_width_of_the_narrower_end():
    topo = seed_topology(["pcie-width"])  # GPU 1 trained at x8, idle at Gen1
    assert pair_rate(topo, 0, 2).gbps == pytest.approx(31.5)  # Gen4 (max) x16, not the idle Gen1
    r = pair_rate(topo, 1, 2)
    assert r.gbps == pytest.approx(15.75)
    assert "narrower end: GPU 1" in r.basis


def test_unknown_facts_give_no_rate_not_a_number():
    topo = seed_topology()
    topo.gpu(3).pcie.gen_max = NotAvailable("n/a")
    topo.gpu(3).pcie.gen_current = NotAvailable("n/a")
    assert pair_rate(topo, 2, 4).gbps == pytest.approx(31.5)
    r = pair_rate(topo, 3, 4)
    assert r.gbps is None and "GPU 3" in r.basis
    assert pair_rate(None, 0, 1).gbps is None


def test_group_rate_is_the_slowest_pair_and_class_the_worst():
    topo = seed_topology()
    assert group_rate(topo, [0, 1, 2]).gbps == pytest.approx(31.5)
    assert str(class_of(topo, [0, 1, 2])) == "NODE"
    assert str(class_of(topo, [0, 1, 4])) == "SYS"


def test_bidirectional_copies_compare_with_twice_the_link():
    topo = seed_topology()
    m = _m("p2p.copy_bidir", (0, 1), 64 << 20, 170.0, "both")
    assert expected_for(topo, m).gbps == pytest.approx(200.0)
    eff, _ = efficiency_of(topo, m, 170.0)
    assert eff == pytest.approx(0.85)
    # Collectives with direction "both" are not doubled.
    c = _m("collective.all_reduce", (0, 1), 64 << 20, 80.0, "both")
    assert expected_for(topo, c).gbps == pytest.approx(100.0)


def test_cpu_fabric_has_no_efficiency():
    topo = seed_topology()
    m = _m("p2p.copy", (0, 1), 64 << 20, 1.2, "0->1", fabric="cpu", timing="wall")
    eff, exp = efficiency_of(topo, m, 1.2)
    assert eff is None and "cpu fabric" in exp.basis


def test_headline_takes_the_largest_size_at_least_1mib():
    topo = seed_topology()
    ms = [_m("p2p.copy", (0, 1), 65536, 10.0, "0->1"), _m("p2p.copy", (0, 1), 4 << 20, 60.0, "0->1"),
          _m("p2p.copy", (0, 1), 64 << 20, 85.0, "0->1"), _m("p2p.latency", (0, 1), 8 << 20, 1.0, "0->1")]
    hs = headlines(ms, topo)
    assert len(hs) == 1
    h = hs[0]
    assert h.size_bytes == 64 << 20 and h.gbps == pytest.approx(85.0) and h.efficiency == pytest.approx(0.85)
    assert headlines([_m("p2p.copy", (0, 1), 65536, 10.0, "0->1")], topo) == []
