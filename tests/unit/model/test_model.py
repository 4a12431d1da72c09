"""The model records: link classes, typed missing values, statistics and JSON round trips."""

import json
import math

import pytest

from gputopo.model import (Finding, Gpu, HostInfo, LinkClass, Measurement, NotAvailable, NvLink,
                           Pair, Topology, topology_from_json, topology_to_json)
from gputopo.model.bandwidth import nvlink_gbps, pcie_gbps
from gputopo.model.topology import AcsBridge, PcieLink
from gputopo.model.values import Failed


@pytest.mark.parametrize("text,kind,n", [("NV4", "NV", 4), ("nv18", "NV", 18), ("PIX", "PIX", 0),
                                         (" SYS ", "SYS", 0), ("SOC", "SYS", 0), ("X", "X", 0)])
def test_linkclass_parse(text, kind, n):
    lc = LinkClass.parse(text)
    assert (lc.kind, lc.nvlinks) == (kind, n)


@pytest.mark.parametrize("bad", ["NVX", "NV", "FOO", "", "NV0"])
def test_linkclass_parse_rejects(bad):
    with pytest.raises(ValueError):
        LinkClass.parse(bad)


def test_linkclass_order_best_first():
    names = ["SYS", "PIX", "NV4", "NODE", "NV18", "PHB", "PXB"]
    assert [str(c) for c in sorted(map(LinkClass.parse, names))] == \
        ["NV18", "NV4", "PIX", "PXB", "PHB", "NODE", "SYS"]


def test_nvml_levels():
    assert [str(LinkClass.from_nvml_level(v)) for v in (0, 10, 20, 30, 40, 50)] == \
        ["PIX", "PIX", "PXB", "PHB", "NODE", "SYS"]
    with pytest.raises(ValueError):
        LinkClass.from_nvml_level(60)


def test_missing_values_are_falsy_and_distinct():
    na, err = NotAvailable("unsupported"), Failed("boom")
    assert not na and not err and na != err
    assert str(na) == "n/a" and str(err) == "ERR"


def test_pair_orders_and_rejects_self():
    assert Pair((6, 5), LinkClass.parse("SYS")).gpus == (5, 6)
    with pytest.raises(ValueError):
        Pair((3, 3), LinkClass.parse("SYS"))


def test_measurement_stats_from_raw_samples():
    m = Measurement("p2p.copy", (0, 1), size_bytes=1_000_000_000,
                    samples_s=[1.0, 2.0, 3.0, 4.0, 100.0], timing="wall", fabric="cpu", figures_of="cpu-processes")
    assert m.median_s == 3.0
    assert m.iqr_s == pytest.approx(2.0)  # 4 - 2
    assert m.algbw_gbps == pytest.approx(1 / 3)
    assert m.noisy  # IQR/median = 0.67
    m2 = Measurement("collective.all_reduce", (0, 1), size_bytes=8_000_000, samples_s=[0.001] * 5,
                     timing="modeled", fabric="sim", figures_of="simulated-gpus", busbw_factor=1.0)
    assert m2.busbw_gbps == pytest.approx(8.0) and not m2.noisy
    with pytest.raises(ValueError):
        Measurement("x", (0,), 1, [1.0], timing="guess", fabric="cpu", figures_of="cpu-processes")
    with pytest.raises(ValueError, match="figures_of must be one of"):
        Measurement("x", (0,), 1, [1.0], timing="wall", fabric="cpu", figures_of="cpus")


def test_measurement_json_round_trip_keeps_samples_not_derived():
    m = Measurement("p2p.copy", (0, 1), 4096, [1e-6, 2e-6, 3e-6], "cuda-events", "cuda", "gpus",
                    link_class="NV4", direction="0->1", wrong=3, first_bad_index=17,
                    error=Failed("x"), extra={"peer_access": True})
    d = json.loads(json.dumps(m.to_json()))
    assert d["derived"]["median_s"] == pytest.approx(2e-6)
    back = Measurement.from_json(d)
    assert back == m and back.median_s == m.median_s
    empty = Measurement("p2p.copy", (0, 1), 1, [], "wall", "cpu", "cpu-processes")
    assert math.isnan(empty.median_s) and empty.to_json()["derived"]["median_s"] is None


@pytest.mark.parametrize("samples", [[], [2.5e-4], [0.0], [math.nan], [math.inf], [1e-6, 3e-6],
                                     [5e-6, 1e-6, 2e-6, 9e-6], [1.0, 1.0, 1.0]])
def test_written_statistics_are_the_properties(samples):
    """to_json computes the derived figures once (fast for a 400,000-record import); they are
    exactly what the properties say, one sample or many."""
    m = Measurement("collective.all_reduce", (0, 1), 1 << 20, samples, "cuda-events", "cuda", "gpus",
                    busbw_factor=1.5)
    want = {"median_s": m.median_s, "iqr_s": m.iqr_s, "algbw_gbps": m.algbw_gbps, "busbw_gbps": m.busbw_gbps}
    got = m.to_json()["derived"]
    for k, v in want.items():
        assert got[k] == (v if math.isfinite(v) else None), k
    assert got["noisy"] is m.noisy


def test_finding_validates_kind():
    with pytest.raises(ValueError):
        Finding("bogus", "error", "x")
    f = Finding("corrupt", "error", "x", gpus=(5, 6), link_class="SYS")
    assert Finding.from_json(json.loads(json.dumps(f.to_json()))) == f


def test_topology_json_round_trip():
    g0 = Gpu(0, name="A100", uuid="GPU-1", pci_bus_id="00000000:07:00.0", cuda_index=0,
             numa_node=0, cpu_affinity="0-31", pcie=PcieLink(4, 4, 8, 16, 0), mig_mode="disabled",
             nvlinks=[NvLink(0, True, 3, "00000000:0F:00.0", "GPU", {"replay": 0, "crc_flit": NotAvailable("n")})])
    g1 = Gpu(1, lost=Failed("GPU is lost"))
    topo = Topology([g0, g1], [Pair((0, 1), LinkClass.parse("NV1"), 1, {"read": "OK", "atomics": NotAvailable("x")})],
                    HostInfo(iommu_mode="translated", iommu_evidence=["intel_iommu=on"],
                             acs=[AcsBridge("0000:00:01.0", ["0000:07:00.0"], {"ReqRedir": True})]),
                    source="sim:t", simulated=True, machine="t")
    d = json.loads(json.dumps(topology_to_json(topo)))
    assert d["pairs"][0] == {"gpus": [0, 1], "link_class": "NV1", "nvlink_count": 1,
                             "p2p": {"read": "OK", "atomics": {"not_available": "x"}}}
    assert d["host"]["acs"][0]["redirects"] is True
    back = topology_from_json(d)
    assert topology_to_json(back) == topology_to_json(topo)
    assert back.gpu(1).lost == Failed("GPU is lost") and back.link_class(1, 0).nvlinks == 1


def test_theoretical_bandwidth_table():
    assert nvlink_gbps(4, 18) == 450.0 and nvlink_gbps(3, 12) == 300.0
    assert pcie_gbps(4, 16) == 31.5 and pcie_gbps(3, 8) == pytest.approx(7.875)
    assert nvlink_gbps(9, 1) is None
