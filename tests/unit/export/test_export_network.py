"""Prometheus families of the network part of a scan: NIC ports, nearest NIC per GPU, NCCL's GDR
distance rule, the kernel side of GPUDirect RDMA (in-process, from a simulated scan)."""

from __future__ import annotations

from gputopo.export.cache import HistoryFacts, Snapshot
from gputopo.sim.description import parse_description
from gputopo.sim.scan import scan_description, scan_simulated
from helpers.metric_samples import snapshot_samples


def samples(topo):
    snap = Snapshot(topology=topo, findings=[], history=HistoryFacts(), scanned_s=1.0, scan_duration_s=0.1,
                    scans=1, scan_errors=0)
    return snapshot_samples(snap)


def find(ss, name, **labels):
    return [s.value for s in ss if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]


def test_network_families_of_the_one_socket_machine():
    ss = samples(scan_simulated("h100-nics-one-socket"))
    assert find(ss, "gputopo_rdma_nics") == [4.0]
    assert find(ss, "gputopo_nic_port_active", nic="mlx5_0", port="1") == [1.0]
    assert find(ss, "gputopo_nic_port_rate_bits_per_second", nic="mlx5_2") == [400e9]
    assert find(ss, "gputopo_gpu_gdr_by_distance", gpu="0") == [1.0]
    assert find(ss, "gputopo_gpu_gdr_by_distance", gpu="5") == [0.0]
    assert find(ss, "gputopo_gpu_nearest_nic_info", gpu="0", nic="mlx5_0", link_class="PIX") == [1.0]
    assert find(ss, "gputopo_gpudirect_rdma", what="available") == [1.0]
    assert find(ss, "gputopo_nic_pcie_link_width_lanes", nic="mlx5_0", state="current") == [16.0]


def test_errors_and_a_down_port_are_exported():
    toml = ('extends = "dgx-h100"\nname = "t"\n[[nic]]\nname = "mlx5_0"\nbus_id = "0000:19:00.0"\ngpu = 0\n'
            'state = "Down"\ncounters = { symbol_error = 5 }\n')
    ss = samples(scan_description(parse_description(toml, "t.toml")))
    assert find(ss, "gputopo_nic_port_active", nic="mlx5_0") == [0.0]
    assert find(ss, "gputopo_nic_port_errors_total", nic="mlx5_0", counter="symbol_error") == [5.0]


def test_machine_without_nics_exports_zero_nics_and_no_gdr():
    ss = samples(scan_simulated("h100-sxm-1gpu"))
    assert find(ss, "gputopo_rdma_nics") == [0.0]
    assert find(ss, "gputopo_gpudirect_rdma") == []
