"""Peer copies slower than staged ones on a pair whose peer copies still reach the published figure
of a healthy machine of its kind (GPUs across the sockets of an Intel host: ~6 GB/s, NCCL's model)
are how healthy machines of that kind behave: said (info), not a warning that degrades a healthy
machine. Below that figure they stay a warning."""

from __future__ import annotations

from gputopo.model import Gpu, HostInfo, LinkClass, Measurement, Pair, PcieLink, Topology
from gputopo.report.bandwidth_findings import staged_findings

SIZE = 64 << 20


def sys_pair(vendor: str) -> Topology:
    gpus = [Gpu(nvml_index=i, name="NVIDIA RTX A6000", uuid=f"GPU-{i}", pci_bus_id=f"00000000:{16 + 112 * i:02X}:00.0",
                cuda_index=i, pcie=PcieLink(gen_current=4, gen_max=4, width_current=16, width_max=16))
            for i in range(2)]
    return Topology(gpus=gpus, pairs=[Pair(gpus=(0, 1), link_class=LinkClass.parse("SYS"), nvlink_count=0)],
                    host=HostInfo(cpu_vendor=vendor), machine="t")


def copy(test: str, gbps: float, direction: str = "0->1") -> Measurement:
    t = SIZE / (gbps * 1e9)
    return Measurement(test=test, gpus=(0, 1), size_bytes=SIZE, samples_s=[t, t, t], timing="cuda-events",
                       fabric="cuda", figures_of="gpus", link_class="SYS", direction=direction, wrong=0, busbw_factor=1.0)


def test_intel_cross_socket_peer_copies_at_their_published_rate_are_info():
    [f] = staged_findings([copy("p2p.copy", 6.0), copy("p2p.staged", 13.4)], sys_pair("intel"))
    assert f.kind == "p2p-slower-than-staged" and f.severity == "info"
    assert "6 GB/s algbw published for any GPUs across the sockets of an Intel host" in f.message
    assert f.evidence["reference"]["id"] == "intel-sys-p2p"


def test_below_the_published_rate_or_without_one_it_stays_a_warning():
    [f] = staged_findings([copy("p2p.copy", 3.0), copy("p2p.staged", 13.4)], sys_pair("intel"))
    assert f.severity == "warning"  # half the published figure: the peer path is slow
    [f] = staged_findings([copy("p2p.copy", 6.0), copy("p2p.staged", 13.4)], sys_pair("amd"))
    assert f.severity == "warning"  # AMD's socket link is published at 16 GB/s
    [f] = staged_findings([copy("p2p.copy", 6.0), copy("p2p.staged", 13.4)], None)
    assert f.severity == "warning"  # no topology: no class, no published figure
