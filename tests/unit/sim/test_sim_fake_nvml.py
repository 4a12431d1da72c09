"""The fake NVML answers like pynvml does on the machine a description describes."""

import ctypes

import pytest

from gputopo.sim.description import load_description
from gputopo.sim.fake_nvml import NVLINK_VERSION_FROM_NVML, FakeNvml, NVMLError


@pytest.fixture
def seed():
    lib = FakeNvml(load_description("seed-8gpu"))
    lib.nvmlInit()
    yield lib


def code_of(call, *args):
    with pytest.raises(NVMLError) as ei:
        call(*args)
    return ei.value.value


def test_uninitialized_before_init_and_after_shutdown():
    lib = FakeNvml(load_description("pcie-4gpu"))
    assert code_of(lib.nvmlDeviceGetCount) == lib.NVML_ERROR_UNINITIALIZED == 1
    assert code_of(lib.nvmlSystemGetDriverVersion) == 1
    lib.nvmlInit()
    h = lib.nvmlDeviceGetHandleByIndex(0)
    assert lib.nvmlDeviceGetCount() == 4
    lib.nvmlShutdown()
    assert code_of(lib.nvmlDeviceGetName, h) == 1
    assert code_of(lib.nvmlShutdown) == 1


def test_error_classes_mirror_pynvml():
    e = NVMLError(15)
    assert type(e).__name__ == "NVMLError_GpuIsLost" and isinstance(e, NVMLError) and e.value == 15
    assert str(e) == "GPU is lost"
    assert FakeNvml.NVMLError_NotSupported().value == 3
    assert isinstance(FakeNvml.NVMLError_NotSupported(), FakeNvml.NVMLError)
    assert str(NVMLError(12345)) == "NVML Error with code 12345"


def test_system_values(seed):
    assert seed.nvmlSystemGetDriverVersion() == "535.154.05"
    assert seed.nvmlSystemGetNVMLVersion() == "12.535.154.05"
    assert seed.nvmlSystemGetCudaDriverVersion() == 12020
    assert seed.nvmlDeviceGetCount() == 8
    assert code_of(seed.nvmlDeviceGetHandleByIndex, 8) == seed.NVML_ERROR_INVALID_ARGUMENT


def test_device_values(seed):
    h = seed.nvmlDeviceGetHandleByIndex(5)
    assert seed.nvmlDeviceGetHandleByIndex(5) is h
    assert seed.nvmlDeviceGetName(h) == "NVIDIA RTX A6000"
    assert seed.nvmlDeviceGetUUID(h) == "GPU-f05f5261-f989-094d-d560-52921f92eaa4"
    info = seed.nvmlDeviceGetPciInfo(h)
    assert info.busId == "00000000:8A:00.0" and (info.domain, info.bus, info.device) == (0, 0x8A, 0)
    assert info.pciDeviceId & 0xFFFF == 0x10DE and info.pciDeviceId >> 16 == 0x2230
    assert code_of(seed.nvmlDeviceGetNumaNodeId, h) == 3  # x86: the socket's node is in sysfs
    words = seed.nvmlDeviceGetCpuAffinity(h, 2)
    assert len(words) == 2 and list(words) == [0xFFFFFFFF00000000, 0]
    assert (seed.nvmlDeviceGetCurrPcieLinkGeneration(h), seed.nvmlDeviceGetMaxPcieLinkGeneration(h)) == (4, 4)
    assert (seed.nvmlDeviceGetCurrPcieLinkWidth(h), seed.nvmlDeviceGetMaxPcieLinkWidth(h)) == (16, 16)
    assert seed.nvmlDeviceGetPcieReplayCounter(h) == 0
    # RTX A6000 has no MIG
    assert code_of(seed.nvmlDeviceGetMigMode, h) == seed.NVML_ERROR_NOT_SUPPORTED


def test_mig_mode_and_wide_affinity():
    lib = FakeNvml(load_description("dgx-a100"))
    lib.nvmlInit()
    h = lib.nvmlDeviceGetHandleByIndex(0)
    assert lib.nvmlDeviceGetMigMode(h) == [0, 0]
    words = lib.nvmlDeviceGetCpuAffinity(h, 4)  # 48-63,176-191
    assert words[0] == 0xFFFF << 48 and words[1] == 0 and words[2] == 0xFFFF << 48 and words[3] == 0


def test_bytes_strings_like_old_bindings():
    lib = FakeNvml(load_description("pcie-4gpu"), bytes_strings=True)
    lib.nvmlInit()
    h = lib.nvmlDeviceGetHandleByIndex(0)
    assert lib.nvmlDeviceGetName(h) == b"Tesla V100-PCIE-32GB"
    assert lib.nvmlDeviceGetPciInfo(h).busId == b"00000000:1A:00.0"
    assert lib.nvmlSystemGetDriverVersion() == b"525.85.12"


def test_numa_call_is_not_supported_on_x86_as_a_real_driver_answers():
    """nvmlDeviceGetNumaNodeId is the GPU memory's NUMA node (coherent systems only): an x86
    driver answers NOT_SUPPORTED (3) for every GPU, Intel or AMD host alike."""
    for name in ("pcie-4gpu", "dgx-a100"):  # intel, amd
        lib = FakeNvml(load_description(name))
        lib.nvmlInit()
        for k in range(2):
            assert code_of(lib.nvmlDeviceGetNumaNodeId, lib.nvmlDeviceGetHandleByIndex(k)) == 3


def test_lost_gpu():
    lib = FakeNvml(load_description("seed-8gpu"), lost=[3])
    lib.nvmlInit()
    h3 = lib.nvmlDeviceGetHandleByIndex(3)  # still succeeds, like real NVML
    for fn in (lib.nvmlDeviceGetName, lib.nvmlDeviceGetUUID, lib.nvmlDeviceGetPciInfo,
               lib.nvmlDeviceGetCurrPcieLinkWidth):
        assert code_of(fn, h3) == lib.NVML_ERROR_GPU_IS_LOST == 15
    h2 = lib.nvmlDeviceGetHandleByIndex(2)
    assert code_of(lib.nvmlDeviceGetP2PStatus, h2, h3, 1) == 15
    assert code_of(lib.nvmlDeviceGetTopologyCommonAncestor, h3, h2) == 15
    assert lib.nvmlDeviceGetName(h2) == "NVIDIA RTX A6000"


def test_unsupported_missing_and_injected_errors():
    d = load_description("seed-8gpu")
    lib = FakeNvml(d, unsupported=["nvmlDeviceGetPcieReplayCounter"], missing=["nvmlDeviceGetNumaNodeId"],
                   errors={("nvmlDeviceGetUUID", 2): 999, ("nvmlSystemGetNVMLVersion", None): 13})
    lib.nvmlInit()
    h = [lib.nvmlDeviceGetHandleByIndex(i) for i in range(3)]
    assert code_of(lib.nvmlDeviceGetPcieReplayCounter, h[0]) == 3
    assert not hasattr(lib, "nvmlDeviceGetNumaNodeId")
    with pytest.raises(AttributeError):
        lib.nvmlDeviceGetNumaNodeId(h[0])
    assert isinstance(lib, FakeNvml)
    assert code_of(lib.nvmlDeviceGetUUID, h[2]) == 999
    assert lib.nvmlDeviceGetUUID(h[1]).startswith("GPU-")
    assert code_of(lib.nvmlSystemGetNVMLVersion) == 13
    # another instance keeps every function
    other = FakeNvml(d)
    assert hasattr(other, "nvmlDeviceGetNumaNodeId")
    with pytest.raises(ValueError):
        FakeNvml(d, missing=["GetName"])


def test_init_failure_can_be_injected():
    lib = FakeNvml(load_description("seed-8gpu"), errors={("nvmlInit", None): 9})
    assert code_of(lib.nvmlInit) == lib.NVML_ERROR_DRIVER_NOT_LOADED
    assert code_of(lib.nvmlDeviceGetCount) == 1


def test_foreign_or_bogus_handles_are_invalid(seed):
    other = FakeNvml(load_description("seed-8gpu"))
    other.nvmlInit()
    foreign = other.nvmlDeviceGetHandleByIndex(0)
    assert code_of(seed.nvmlDeviceGetName, foreign) == 2
    assert code_of(seed.nvmlDeviceGetName, 0) == 2


def test_direct_nvlinks_and_where_iteration_ends(seed):
    h0 = seed.nvmlDeviceGetHandleByIndex(0)
    links = []
    for link in range(seed.NVML_NVLINK_MAX_LINKS):
        try:
            state = seed.nvmlDeviceGetNvLinkState(h0, link)
        except NVMLError as e:
            assert e.value == seed.NVML_ERROR_INVALID_ARGUMENT
            break
        links.append((state, seed.nvmlDeviceGetNvLinkRemotePciInfo(h0, link).busId,
                      seed.nvmlDeviceGetNvLinkRemoteDeviceType(h0, link)))
    assert links == [(1, "00000000:1C:00.0", seed.NVML_NVLINK_DEVICE_TYPE_GPU)] * 4
    version = seed.nvmlDeviceGetNvLinkVersion(h0, 0)
    assert version == 5 and NVLINK_VERSION_FROM_NVML[version] == 3  # NVML's enum: 3.1
    assert seed.nvmlDeviceGetNvLinkErrorCounter(h0, 0, seed.NVML_NVLINK_ERROR_DL_CRC_FLIT) == 0
    assert code_of(seed.nvmlDeviceGetNvLinkErrorCounter, h0, 0, 7) == 2


def test_gpu_without_nvlink_says_not_supported():
    lib = FakeNvml(load_description("pcie-4gpu"))
    lib.nvmlInit()
    h = lib.nvmlDeviceGetHandleByIndex(0)
    assert code_of(lib.nvmlDeviceGetNvLinkState, h, 0) == lib.NVML_ERROR_NOT_SUPPORTED
    assert code_of(lib.nvmlDeviceGetNvLinkRemotePciInfo, h, 0) == 3


def test_nvswitch_links_and_degraded_gpu():
    lib = FakeNvml(load_description("degraded-nvlink"))
    lib.nvmlInit()
    h4, h5 = lib.nvmlDeviceGetHandleByIndex(4), lib.nvmlDeviceGetHandleByIndex(5)
    assert [lib.nvmlDeviceGetNvLinkState(h4, k) for k in range(12)] == [1] * 12
    assert [lib.nvmlDeviceGetNvLinkState(h5, k) for k in range(12)] == [0] * 12
    assert code_of(lib.nvmlDeviceGetNvLinkState, h4, 12) == 2
    assert lib.nvmlDeviceGetNvLinkRemoteDeviceType(h4, 0) == lib.NVML_NVLINK_DEVICE_TYPE_SWITCH == 2
    switches = {lib.nvmlDeviceGetNvLinkRemotePciInfo(h4, k).busId for k in range(12)}
    assert len(switches) == 6
    assert lib.nvmlDeviceGetNvLinkErrorCounter(h5, 2, lib.NVML_NVLINK_ERROR_DL_CRC_FLIT) == 1287
    assert lib.nvmlDeviceGetNvLinkErrorCounter(h5, 7, lib.NVML_NVLINK_ERROR_DL_RECOVERY) == 1
    h0 = lib.nvmlDeviceGetHandleByIndex(0)
    assert lib.nvmlDeviceGetTopologyCommonAncestor(h0, h5) == lib.NVML_TOPOLOGY_SYSTEM
    assert lib.nvmlDeviceGetTopologyCommonAncestor(h4, h5) == lib.NVML_TOPOLOGY_NODE


def test_common_ancestor_is_the_pcie_level(seed):
    h = [seed.nvmlDeviceGetHandleByIndex(i) for i in range(8)]
    assert seed.nvmlDeviceGetTopologyCommonAncestor(h[0], h[1]) == seed.NVML_TOPOLOGY_SINGLE  # PIX under NV4
    assert seed.nvmlDeviceGetTopologyCommonAncestor(h[0], h[2]) == seed.NVML_TOPOLOGY_NODE
    assert seed.nvmlDeviceGetTopologyCommonAncestor(h[7], h[0]) == seed.NVML_TOPOLOGY_SYSTEM
    assert seed.nvmlDeviceGetTopologyCommonAncestor(h[3], h[3]) == seed.NVML_TOPOLOGY_INTERNAL
    a100 = FakeNvml(load_description("dgx-a100"))
    a100.nvmlInit()
    g = [a100.nvmlDeviceGetHandleByIndex(i) for i in range(3)]
    assert a100.nvmlDeviceGetTopologyCommonAncestor(g[0], g[1]) == a100.NVML_TOPOLOGY_MULTIPLE


def test_p2p_status(seed):
    h = [seed.nvmlDeviceGetHandleByIndex(i) for i in range(8)]
    assert [seed.nvmlDeviceGetP2PStatus(h[0], h[1], k) for k in range(5)] == [0, 0, 0, 0, 0]
    assert [seed.nvmlDeviceGetP2PStatus(h[5], h[6], k) for k in range(5)] == [0, 0, 5, 5, 0]
    with pytest.raises(ctypes.ArgumentError):  # pynvml's READ constant is the tuple (0,)
        seed.nvmlDeviceGetP2PStatus(h[0], h[1], seed.NVML_P2P_CAPS_INDEX_READ)
    assert code_of(seed.nvmlDeviceGetP2PStatus, h[0], h[1], 9) == 2


def test_p2p_overrides_reach_nvml(tmp_path):
    f = tmp_path / "m.toml"
    f.write_text('extends = "pcie-4gpu"\n[p2p]\nSYS = { read = "CNS", write = "CNS" }\n"2,3" = { atomics = "OK" }\n')
    lib = FakeNvml(load_description(str(f)))
    lib.nvmlInit()
    h = [lib.nvmlDeviceGetHandleByIndex(i) for i in range(4)]
    assert lib.nvmlDeviceGetP2PStatus(h[0], h[2], 0) == lib.NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED
    assert lib.nvmlDeviceGetP2PStatus(h[3], h[2], 3) == lib.NVML_P2P_STATUS_OK
    assert lib.nvmlDeviceGetP2PStatus(h[0], h[1], 3) == lib.NVML_P2P_STATUS_NOT_SUPPORTED


def test_downtrained_fault_shows_in_pcie_width():
    d = load_description("dgx-h100").with_faults([{"where": "gpu:6", "what": "downtrained", "width": 8, "gen": 4}])
    lib = FakeNvml(d)
    lib.nvmlInit()
    h6, h5 = lib.nvmlDeviceGetHandleByIndex(6), lib.nvmlDeviceGetHandleByIndex(5)
    assert (lib.nvmlDeviceGetCurrPcieLinkWidth(h6), lib.nvmlDeviceGetMaxPcieLinkWidth(h6)) == (8, 16)
    assert (lib.nvmlDeviceGetCurrPcieLinkGeneration(h6), lib.nvmlDeviceGetMaxPcieLinkGeneration(h6)) == (4, 5)
    assert lib.nvmlDeviceGetCurrPcieLinkWidth(h5) == 16


@pytest.mark.parametrize("name", ["seed-8gpu", "dgx-a100", "degraded-nvlink", "pcie-4gpu", "dgx-h100"])
def test_probe_reads_the_fake_as_described(name):
    """The real probe code, reading the fake NVML, sees the description's classes and P2P."""
    from gputopo.probe.nvml_reader import read_topology

    d = load_description(name)
    lib = FakeNvml(d)
    lib.nvmlInit()
    topo = read_topology(lib, machine=name, source=f"sim:{name}", simulated=True, env={})
    assert {p.gpus: str(p.link_class) for p in topo.pairs} == {(i, j): str(d.link_class(i, j)) for i, j in d.pairs()}
    for p in topo.pairs:
        assert p.p2p == d.p2p_status(*p.gpus)
    assert [g.pci_bus_id for g in topo.gpus] == [g.bus_id for g in d.gpus]


def test_probe_survives_a_lost_gpu():
    from gputopo.probe.nvml_reader import read_topology

    lib = FakeNvml(load_description("seed-8gpu"), lost=[6])
    lib.nvmlInit()
    topo = read_topology(lib, env={})
    assert topo.gpus[6].lost is not None and topo.gpus[7].lost is None
    assert str(topo.pair(4, 5).link_class) == "NV4"
