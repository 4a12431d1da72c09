"""The NVML reader on simulated machines (gputopo.sim's fake NVML), scenario by scenario.

The same probe code reads real NVML; here each scenario is a built-in machine description plus
the fault hooks of FakeNvml (lost GPUs, unsupported or missing functions, injected error codes).
"""


import pytest

from gputopo.model.topology import P2P_CAPS
from gputopo.model.values import Failed, NotAvailable, is_value
from gputopo.probe.nvml_reader import gpu_bus_ids, read_topology
from gputopo.sim.description import builtin_names
from gputopo.sim.description import load_description
from gputopo.sim.fake_nvml import FakeNvml

ENV = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}  # CUDA index must not depend on the test runner's env
_DESCS = {}


def desc_of(name):
    if name not in _DESCS:
        _DESCS[name] = load_description(name)
    return _DESCS[name]


def scan(name, **hooks):
    """Read a simulated machine; the socket NUMA nodes come from its fake host's sysfs."""
    from gputopo.sim.fake_host import FakeHost

    desc = desc_of(name)
    lib = FakeNvml(desc, **hooks)
    lib.nvmlInit()
    try:
        with FakeHost(desc) as host:
            return read_topology(lib, machine=name, source=f"sim:{name}", simulated=True, env=ENV,
                                 sysfs_root=host.root), desc, lib
    finally:
        lib.nvmlShutdown()


def classes(topo):
    return {p.gpus: str(p.link_class) for p in topo.pairs}


def fixture_matrix(path):
    """{(i, j): class} and per-GPU (cpu affinity, numa) from `nvidia-smi topo -m` text."""
    rows = [ln.split("\t") for ln in path.read_text().splitlines() if ln.startswith("GPU")]
    n = len(rows)
    pairs = {(i, j): rows[i][1 + j].strip() for i in range(n) for j in range(i + 1, n)}
    affinity = {i: (rows[i][1 + n].strip(), int(rows[i][2 + n])) for i in range(n)}
    return pairs, affinity


def described_classes(desc):
    return {(i, j): str(desc.link_class(i, j)) for i, j in desc.pairs()}


def assert_complete(g):
    """Every field of a healthy GPU read as data."""
    assert g.lost is None
    for v in (g.name, g.uuid, g.pci_bus_id, g.cuda_index, g.numa_node, g.cpu_affinity,
              g.pcie.gen_current, g.pcie.gen_max, g.pcie.width_current, g.pcie.width_max,
              g.pcie.replay_counter):
        assert is_value(v), (g.nvml_index, v)


# ----------------------------------------------------------------------------- healthy machines


@pytest.mark.parametrize("name", ["seed-8gpu", "seed-8gpu-healthy"])
def test_seed_machine_matches_nvidia_smi_fixture(name, fixtures_dir):
    topo, desc, _ = scan(name)
    want, affinity = fixture_matrix(fixtures_dir / "topo" / "seed-8gpu-nv4-pairs.txt")
    assert classes(topo) == want
    for (i, j), cls in want.items():
        p = topo.pair(i, j)
        assert p.nvlink_count == (4 if cls == "NV4" else 0)
    for g in topo.gpus:
        assert_complete(g)
        assert (g.cpu_affinity, g.numa_node) == affinity[g.nvml_index]


def test_seed_machine_details():
    topo, desc, _ = scan("seed-8gpu")
    assert topo.simulated and topo.source == "sim:seed-8gpu" and topo.machine == "seed-8gpu"
    assert [g.pci_bus_id for g in topo.gpus] == [g.bus_id for g in desc.gpus]
    assert [g.uuid for g in topo.gpus] == [g.uuid for g in desc.gpus]
    assert [g.cuda_index for g in topo.gpus] == list(range(8))
    g0 = topo.gpu(0)
    assert g0.name == "NVIDIA RTX A6000" and g0.pcie.gen_max == 4 and g0.pcie.width_current == 16
    active = g0.active_nvlinks()
    assert len(active) == 4 and all(lk.remote_bus_id == desc.gpus[1].bus_id for lk in active)
    assert all(lk.version == 3 and lk.remote_type == "GPU" for lk in active)  # NVML enum 5 -> NVLink 3
    assert all(set(lk.errors) == {"replay", "recovery", "crc_flit", "crc_data"} for lk in active)
    assert topo.host.driver_version == desc.host.driver_version
    assert topo.host.cuda_driver_version == "12.2"
    for i, j in desc.pairs():
        assert topo.pair(i, j).p2p == desc.p2p_status(i, j)


@pytest.mark.parametrize("name", builtin_names())
def test_every_builtin_machine_reads_its_described_classes(name):
    topo, desc, _ = scan(name)
    assert len(topo.gpus) == len(desc.gpus)
    assert classes(topo) == described_classes(desc)
    for g in topo.gpus:
        assert g.lost is None and is_value(g.name) and is_value(g.pci_bus_id)
        for p in topo.pairs:
            assert set(p.p2p) == set(P2P_CAPS)


@pytest.mark.parametrize("name, n", [("dgx-a100", 12), ("dgx-h100", 18)])
def test_nvswitch_box_is_nv_everywhere(name, n):
    topo, desc, _ = scan(name)
    assert set(classes(topo).values()) == {f"NV{n}"}
    assert all(p.nvlink_count == n for p in topo.pairs)
    for g in topo.gpus:
        assert len(g.active_nvlinks()) == n
        assert {lk.remote_type for lk in g.active_nvlinks()} == {"SWITCH"}


def test_pcie_only_box():
    topo, desc, _ = scan("pcie-4gpu")
    assert all(not p.link_class.is_nvlink for p in topo.pairs)
    assert all(g.nvlinks == [] for g in topo.gpus)  # NOT_SUPPORTED on link 0: no NVLink at all


def test_degraded_nvlink_gpu_falls_back_to_pcie():
    topo, desc, _ = scan("degraded-nvlink")
    broken = 5
    for p in topo.pairs:
        if broken in p.gpus:
            assert p.link_class.kind in ("NODE", "SYS") and p.nvlink_count == 0, p
        else:
            assert str(p.link_class) == "NV12"
    g5 = topo.gpu(broken)
    assert g5.lost is None and len(g5.nvlinks) == 12
    assert all(lk.active is False for lk in g5.nvlinks)
    assert g5.nvlinks[2].errors["crc_flit"] == 1287 and g5.nvlinks[7].errors["recovery"] == 1
    assert str(topo.link_class(4, 5)) == "NODE" and str(topo.link_class(0, 5)) == "SYS"


# ----------------------------------------------------------------------------- faults


def test_gpu_lost_others_complete():
    topo, desc, _ = scan("seed-8gpu", lost=[5])
    g5 = topo.gpu(5)
    assert isinstance(g5.lost, Failed) and "GPU_IS_LOST" in g5.lost.error
    na = NotAvailable("GPU lost")
    assert g5.name == na and g5.pci_bus_id == na and g5.cpu_affinity == na and g5.nvlinks == []
    assert g5.cuda_index == na and g5.pcie.gen_current == na and g5.mig_mode == na
    for k in (0, 1, 2, 3, 4, 6, 7):
        assert_complete(topo.gpu(k))
    # The other GPUs' pairs are all there and right.
    want = described_classes(desc)
    got = classes(topo)
    for (i, j), cls in want.items():
        if 5 not in (i, j):
            assert got[(i, j)] == cls
    # GPU 4's four active links go to a GPU bus id no readable GPU has: the lost GPU 5.
    assert got[(4, 5)] == "NV4" and all(v == na for v in topo.pair(4, 5).p2p.values())
    # For the rest of GPU 5's pairs nothing tells the class (topology call says lost, NUMA
    # unknown): those pairs are omitted rather than invented.
    assert {p for p in got if 5 in p} == {(4, 5)}
    # CUDA cannot use a lost GPU: the other seven are numbered 0..6 in PCI order.
    assert [topo.gpu(k).cuda_index for k in (0, 1, 2, 3, 4, 6, 7)] == list(range(7))


def test_function_not_supported_is_not_available_with_reason():
    topo, _, _ = scan("seed-8gpu", unsupported=["nvmlDeviceGetPcieReplayCounter", "nvmlDeviceGetMigMode"])
    for g in topo.gpus:
        v = g.pcie.replay_counter
        assert isinstance(v, NotAvailable)
        assert "nvmlDeviceGetPcieReplayCounter" in v.reason and "not supported" in v.reason
        assert isinstance(g.mig_mode, NotAvailable)
        assert is_value(g.pcie.gen_current)
    assert classes(topo) == described_classes(desc_of("seed-8gpu"))


def test_function_missing_from_bindings_is_not_available():
    topo, _, _ = scan("seed-8gpu", missing=["nvmlDeviceGetNumaNodeId", "nvmlDeviceGetNvLinkRemoteDeviceType"])
    for g in topo.gpus:
        assert isinstance(g.gpu_memory_numa_node, NotAvailable)
        assert "not in these NVML bindings" in g.gpu_memory_numa_node.reason
        assert g.numa_node == desc_of("seed-8gpu").gpus[g.nvml_index].numa_node  # from sysfs
        for lk in g.nvlinks:
            assert isinstance(lk.remote_type, NotAvailable)
    # Without the remote type, links whose remote bus id is a GPU's still count.
    assert classes(topo) == described_classes(desc_of("seed-8gpu"))


def test_missing_remote_type_on_nvswitch_box_is_pcie_not_invented():
    """Old bindings on an NVSwitch box: a switch's bus id is no GPU's, so no NV class is claimed."""
    topo, desc, _ = scan("dgx-a100", missing=["nvmlDeviceGetNvLinkRemoteDeviceType"])
    assert all(not p.link_class.is_nvlink for p in topo.pairs)
    assert classes(topo) == {(i, j): str(desc.pcie_class(i, j)) for i, j in desc.pairs()}


def test_old_driver_without_numa_call():
    topo, _, _ = scan("seed-8gpu", errors={("nvmlDeviceGetNumaNodeId", None): 13})
    for g in topo.gpus:
        assert isinstance(g.gpu_memory_numa_node, NotAvailable)
        assert "driver too old" in g.gpu_memory_numa_node.reason
        assert is_value(g.cpu_affinity) and is_value(g.numa_node)
    assert classes(topo) == described_classes(desc_of("seed-8gpu"))


def test_unknown_error_on_one_gpu():
    errors = {("nvmlDeviceGetUUID", 3): 999, ("nvmlDeviceGetCurrPcieLinkWidth", 3): 999,
              ("nvmlDeviceGetTopologyCommonAncestor", 3): 999}
    topo, desc, _ = scan("seed-8gpu", errors=errors)
    g3 = topo.gpu(3)
    assert isinstance(g3.uuid, Failed) and "Unknown Error" in g3.uuid.error and "999" in g3.uuid.error
    assert isinstance(g3.pcie.width_current, Failed) and g3.pcie.width_max == 16
    assert g3.lost is None and is_value(g3.pci_bus_id) and len(g3.active_nvlinks()) == 4
    for k in (0, 1, 2, 4, 5, 6, 7):
        assert_complete(topo.gpu(k))
    got = classes(topo)
    assert got[(2, 3)] == "NV4"                                # NVLink needs no topology call
    assert all(got[(3, j)] == "SYS" for j in (4, 5, 6, 7))     # other NUMA node: SYS for sure
    assert (0, 3) not in got and (1, 3) not in got             # same node, class unknown: omitted
    assert len(got) == 26


def test_p2p_status_unsupported():
    topo, _, _ = scan("seed-8gpu", unsupported=["nvmlDeviceGetP2PStatus"])
    for p in topo.pairs:
        assert all(isinstance(v, NotAvailable) for v in p.p2p.values())


def test_handle_refused_for_one_gpu():
    topo, _, _ = scan("pcie-4gpu", errors={("nvmlDeviceGetHandleByIndex", 2): 999})
    g2 = topo.gpu(2)
    assert isinstance(g2.name, Failed) and g2.lost is None
    assert not any(2 in p for p in classes(topo))
    assert (0, 1) in classes(topo)


def test_old_bindings_returning_bytes():
    topo, desc, _ = scan("dgx-a100", bytes_strings=True)
    assert topo.gpu(0).name == desc.gpus[0].name and topo.gpu(0).uuid == desc.gpus[0].uuid
    assert topo.gpu(0).pci_bus_id == desc.gpus[0].bus_id
    assert topo.host.driver_version == desc.host.driver_version
    assert set(classes(topo).values()) == {"NV12"}


def test_cuda_visible_devices_renumbers_cuda_not_nvml():
    desc = desc_of("seed-8gpu")
    lib = FakeNvml(desc)
    lib.nvmlInit()
    topo = read_topology(lib, env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "5,6"})
    assert topo.gpu(5).cuda_index == 0 and topo.gpu(6).cuda_index == 1
    assert isinstance(topo.gpu(0).cuda_index, NotAvailable)
    assert topo.indices == list(range(8))


# ----------------------------------------------------------------------------- speed


def test_256_gpus_reasonable_and_quadratic():
    from gputopo.sim.description import generate_description

    desc = generate_description(256)
    lib = FakeNvml(desc)
    lib.nvmlInit()
    topo = read_topology(lib, env=ENV)
    assert len(topo.pairs) == 256 * 255 // 2
    per_device = sum(v for k, v in lib.calls.items()
                     if k not in ("nvmlDeviceGetTopologyCommonAncestor", "nvmlDeviceGetP2PStatus"))
    per_pair = lib.calls.get("nvmlDeviceGetTopologyCommonAncestor", 0) + lib.calls["nvmlDeviceGetP2PStatus"]
    assert per_pair <= 6 * len(topo.pairs)   # one topology + five P2P calls at most per pair
    assert per_device <= 256 * 200            # each GPU read once


def test_gpu_bus_ids_skips_lost_and_failed():
    desc = desc_of("seed-8gpu")
    lib = FakeNvml(desc, lost=[2], errors={("nvmlDeviceGetPciInfo", 6): 999})
    lib.nvmlInit()
    assert gpu_bus_ids(lib) == [g.bus_id for g in desc.gpus if g.index not in (2, 6)]
