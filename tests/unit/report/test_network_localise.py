"""A class fault of GPU pairs cites the scan's IOMMU/ACS findings about the GPUs' peer path, not
an ACS finding about the path between a GPU and its NIC (evidence "nic")."""

from __future__ import annotations

from conftest_report import _m, seed_topology
from gputopo.model import Finding
from gputopo.report.why.localise import localise


def test_class_fault_does_not_cite_acs_between_a_gpu_and_its_nic():
    topo = seed_topology()
    sys_pairs = [(i, j) for i in range(8) for j in range(i + 1, 8) if str(topo.link_class(i, j)) == "SYS"]
    assert sys_pairs
    fs = [Finding("corrupt", "error", f"GPUs {i},{j}: wrong", gpus=[i, j], link_class="SYS",
                  evidence={"tests": {"p2p.copy": {"path": "peer", "wrong": 5}}, "clean_tests": ["p2p.staged"]})
          for i, j in sys_pairs]
    gpu_acs = Finding("acs", "warning", "ACS redirect is on in 4 PCIe bridge(s) above GPU(s) 0-7: ...",
                      gpus=list(range(8)), evidence={"bridges": []})
    nic_acs = Finding("acs", "warning", "ACS redirect on bridge(s) 0000:17:00.0 between GPU 0 and NIC mlx5_0: ...",
                      gpus=[0], evidence={"nic": "mlx5_0", "bridges": ["0000:17:00.0"]})
    ran = [_m("p2p.copy", p, 64 << 20, 20.0, f"{p[0]}->{p[1]}") for p in
           [(i, j) for i in range(8) for j in range(i + 1, 8)]]
    (cf,) = [f for f in localise(fs + [gpu_acs, nic_acs], topo, ran, []) if f.kind == "class-fault"]
    cited = [f for f in cf.evidence["_explains"] if f.kind == "acs"]
    assert cited == [gpu_acs]
    assert not any("mlx5_0" in r for r in cf.evidence["reasoning"])
