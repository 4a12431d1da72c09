"""Published reference figures: the table is well-formed and sourced, the closest row is chosen,
and `slow` is judged against it (citing the row) before falling back to the theoretical rate."""

from __future__ import annotations

import re
from itertools import combinations

import pytest

from gputopo.model import Gpu, HostInfo, LinkClass, Measurement, NvLink, Pair, PcieLink, Topology
from gputopo.report.bandwidth_findings import slow_findings
from gputopo.report.expected_basis import SLOW_EFFICIENCY, judge_rate
from gputopo.report.headline import HEADLINE_ORDER, headlines
from gputopo.report.references import REFERENCE_FRACTION, closest_reference, reference_rows
from helpers.paths import REPO

H100 = "NVIDIA H100 80GB HBM3"
A6000 = "NVIDIA RTX A6000"


def machine(name: str, n: int, cls: str, vendor="intel", gen=4, nvlinks=0, nvlink_version=4) -> Topology:
    gpus = [Gpu(nvml_index=i, name=name, uuid=f"GPU-{i}", pci_bus_id=f"00000000:{16 + i:02X}:00.0",
                cuda_index=i, pcie=PcieLink(gen_current=gen, gen_max=gen, width_current=16, width_max=16),
                nvlinks=[NvLink(link=k, active=True, version=nvlink_version, remote_type="SWITCH")
                         for k in range(nvlinks)])
            for i in range(n)]
    pairs = [Pair(gpus=(i, j), link_class=LinkClass.parse(cls), nvlink_count=LinkClass.parse(cls).nvlinks)
             for i, j in combinations(range(n), 2)]
    return Topology(gpus=gpus, pairs=pairs, host=HostInfo(cpu_vendor=vendor), machine="t")


def measured(test, gpus, gbps, busbw_factor=1.0, cls=None, size=256 << 20):
    t = size * busbw_factor / (gbps * 1e9)
    return Measurement(test=test, gpus=tuple(gpus), size_bytes=size, samples_s=[t, t, t], timing="cuda-events",
                       fabric="cuda", figures_of="gpus", link_class=cls, direction=None, wrong=0, busbw_factor=busbw_factor)


def test_every_row_is_sourced_and_names_a_real_series():
    rows = reference_rows()
    assert len(rows) >= 15
    assert len({r.id for r in rows}) == len(rows)
    known = set(HEADLINE_ORDER) | {"self.h2d", "self.d2h"}
    for r in rows:
        assert r.test in known, r.id
        assert r.gbps > 0 and r.gpus >= 1 and r.metric in ("algbw", "busbw")
        assert re.search(r"(issue \d+|pull request \d+|\.md|\.h|blog\.\w+\.\w+)", r.source), f"{r.id}: no public source"
        assert r.link_class in ("PCIe", "host", "MNNVL") or LinkClass.parse(r.link_class)


def test_closest_row_prefers_exact_class_then_platform_then_model():
    sys_intel = closest_reference("p2p.copy", 2, "SYS", [A6000, A6000], "intel")
    assert sys_intel is not None and sys_intel.id == "intel-sys-p2p"
    node = closest_reference("p2p.copy", 2, "NODE", [A6000, A6000], "intel")
    assert node is not None and node.id == "a6000-pcie-p2p"
    # an unknown class, another GPU count, a mixed pair of models: nothing to compare with
    assert closest_reference("p2p.copy", 2, None, [H100, H100], None) is None
    assert closest_reference("collective.all_reduce", 4, "NV18", [H100] * 4, None) is None
    assert closest_reference("p2p.copy", 2, "NV18", [H100, A6000], None) is None
    nv18 = closest_reference("p2p.copy", 2, "NV18", [H100, H100], None)
    assert nv18 is not None and nv18.gbps == 376


def test_h100_all_reduce_below_the_published_figure_is_slow_and_cites_it():
    topo = machine(H100, 8, "NV18", nvlinks=18, gen=5)
    busbw_factor = 2 * 7 / 8
    slow = slow_findings(headlines([measured("collective.all_reduce", range(8), 250, busbw_factor, "NV18")], topo), topo)
    assert len(slow) == 1
    f = slow[0]
    assert f.evidence["basis"] == "reference" and f.evidence["threshold"] == REFERENCE_FRACTION
    assert "68% of the 365 GB/s busbw published for 8x H100 SXM" in f.message
    assert "NVIDIA/nccl issue 1455" in f.message
    assert f.evidence["measured"][0]["reference"]["id"] == "h100-sxm-nv18-allreduce-8"
    # 350 GB/s is 96 % of the published figure: nothing to say
    fine = headlines([measured("collective.all_reduce", range(8), 350, busbw_factor, "NV18")], topo)
    assert slow_findings(fine, topo) == []


def test_cross_socket_copies_on_intel_are_expected_there_not_a_fault():
    """9 GB/s across the sockets of a PCIe Gen4 host is 29 % of the link's 31.5 GB/s: a fault by
    the theoretical basis, but what an Intel host's socket link gives by design."""
    for vendor, model in (("intel", A6000), ("amd", A6000), (None, A6000), (None, "NVIDIA L40S")):
        topo = machine(model, 2, "SYS", vendor=vendor)
        hs = headlines([measured("p2p.copy", (0, 1), 9.0, cls="SYS")], topo)
        judged = judge_rate(hs[0], topo)
        found = slow_findings(hs, topo)
        if vendor == "intel":
            assert judged.basis == "reference" and judged.fraction == pytest.approx(1.5)
            assert found == []
        elif vendor == "amd":
            assert judged.basis == "reference" and judged.reference.id == "amd-sys-p2p"
            assert [f.evidence["basis"] for f in found] == ["reference"]
        elif model == A6000:  # platform unknown: the A6000 box's published figure
            assert judged.reference.id == "a6000-pcie-p2p"
            assert "41% of the 21.8 GB/s algbw published for 6x RTX A6000" in found[0].message
        else:
            assert judged.basis == "theoretical" and judged.threshold == SLOW_EFFICIENCY
            assert [f.evidence["basis"] for f in found] == ["theoretical"]
            assert "of the link's theoretical 31.5 GB/s" in found[0].message


def test_series_with_no_basis_are_not_judged_slow():
    """A collective with no published row and no theoretical basis: nothing is concluded."""
    topo = machine(A6000, 4, "NODE")
    hs = headlines([measured("collective.all_reduce", range(4), 1.0, 1.5, "NODE")], topo)
    assert judge_rate(hs[0], topo) is None and slow_findings(hs, topo) == []


def test_docs_list_every_row():

    page = (REPO / "docs" / "report.md").read_text()
    for r in reference_rows():
        assert f"`{r.id}`" in page, f"docs/report.md's reference table lacks {r.id}"
