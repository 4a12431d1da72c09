"""nvml_reader against a small hand-written pynvml look-alike (independent of gputopo.sim).

The stub behaves like the real bindings where it matters: char arrays may come back as bytes,
the CPU affinity is a sequence of 64-bit words, a link index past the GPU's last link raises
INVALID_ARGUMENT, errors carry an int ``.value``.
"""

import types

from gputopo.model.topology import HostInfo, topology_from_json, topology_to_json
from gputopo.model.values import Failed, NotAvailable, is_value
from gputopo.probe.nvml_reader import cpulist_from_mask, cuda_version_text, read_topology


class StubError(Exception):
    def __init__(self, value):
        super().__init__(f"NVML error {value}")
        self.value = value


class StubNvml:
    """4 GPUs on 2 sockets; NV2 between 0-1 (direct), PCIe for the rest."""

    NVMLError = StubError
    NVML_NVLINK_MAX_LINKS = 18

    def __init__(self, gpus=None, links=None, level=None, fail=None, p2p=None):
        self.gpus = gpus or [
            dict(bus="00000000:07:00.0", numa=0, mask=[0xFFFFFFFF]),
            dict(bus="00000000:0F:00.0", numa=0, mask=[0xFFFFFFFF]),
            dict(bus="00000000:87:00.0", numa=1, mask=[0xFFFFFFFF00000000, 0xFFFFFFFF00000000]),
            dict(bus="00000000:8F:00.0", numa=1, mask=[0xFFFFFFFF00000000, 0xFFFFFFFF00000000]),
        ]
        b = [g["bus"] for g in self.gpus]
        self.links = links if links is not None else {
            0: [(1, b[1], 0), (1, b[1], 0)], 1: [(1, b[0], 0), (1, b[0], 0)],
        }
        self.level = level or (lambda i, j: 40 if self.gpus[i]["numa"] == self.gpus[j]["numa"] else 50)
        self.fail = dict(fail or {})  # (fn, gpu index or None) -> code
        self.p2p = p2p or (lambda i, j, cap: 0)
        self.calls = 0

    def _check(self, fn, *handles):
        self.calls += 1
        for h in handles or (None,):
            code = self.fail.get((fn, h))
            if code is not None:
                raise StubError(code)

    def nvmlSystemGetDriverVersion(self):
        return b"550.54.15"

    def nvmlSystemGetNVMLVersion(self):
        return "12.550.54.15"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12040

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        self._check("nvmlDeviceGetHandleByIndex", i)
        return i

    def nvmlDeviceGetName(self, h):
        self._check("nvmlDeviceGetName", h)
        return b"NVIDIA A100-SXM4-80GB"

    def nvmlDeviceGetUUID(self, h):
        self._check("nvmlDeviceGetUUID", h)
        return f"GPU-{h:08d}-aaaa-bbbb"

    def nvmlDeviceGetPciInfo(self, h):
        self._check("nvmlDeviceGetPciInfo", h)
        return types.SimpleNamespace(busId=self.gpus[h]["bus"].encode(), busIdLegacy=b"")

    def nvmlDeviceGetNumaNodeId(self, h):
        self._check("nvmlDeviceGetNumaNodeId", h)
        return self.gpus[h]["numa"]

    def nvmlDeviceGetCpuAffinity(self, h, n):
        self._check("nvmlDeviceGetCpuAffinity", h)
        return (self.gpus[h]["mask"] + [0] * n)[:n]

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        self._check("nvmlDeviceGetCurrPcieLinkGeneration", h)
        return 4

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return 4

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return 16

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return 16

    def nvmlDeviceGetPcieReplayCounter(self, h):
        return 0

    def nvmlDeviceGetMigMode(self, h):
        self._check("nvmlDeviceGetMigMode", h)
        return [0, 0]

    def _link(self, h, link):
        links = self.links.get(h, [])
        if link >= len(links):
            raise StubError(2 if links else 3)  # past the last link / no NVLink at all
        return links[link]

    def nvmlDeviceGetNvLinkState(self, h, link):
        self._check("nvmlDeviceGetNvLinkState", h)
        return self._link(h, link)[0]

    def nvmlDeviceGetNvLinkVersion(self, h, link):
        return 5  # nvmlNvlinkVersion_t NVML_NVLINK_VERSION_3_1, what an A100 answers

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        return types.SimpleNamespace(busId=self._link(h, link)[1])

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h, link):
        self._check("nvmlDeviceGetNvLinkRemoteDeviceType", h)
        return self._link(h, link)[2]

    def nvmlDeviceGetNvLinkErrorCounter(self, h, link, counter):
        return 10 * link + counter

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        self._check("nvmlDeviceGetTopologyCommonAncestor", a, b)
        return self.level(a, b)

    def nvmlDeviceGetP2PStatus(self, a, b, cap):
        assert isinstance(cap, int), "P2P cap index must be an int, not pynvml's (0,) tuple"
        self._check("nvmlDeviceGetP2PStatus", a, b)
        return self.p2p(a, b, cap)


def classes(topo):
    return {p.gpus: str(p.link_class) for p in topo.pairs}


def test_cpulist_from_mask():
    assert cpulist_from_mask([0xFFFFFFFF]) == "0-31"
    assert cpulist_from_mask([0xFFFFFFFF00000000, 0xFFFFFFFF00000000]) == "32-63,96-127"
    assert cpulist_from_mask([0xFFFFFFFF, 0xFFFFFFFF]) == "0-31,64-95"
    assert cpulist_from_mask([0b1011]) == "0-1,3"
    assert cpulist_from_mask([0, 1]) == "64"
    assert cpulist_from_mask([(1 << 64) - 1, 1]) == "0-64"
    assert cpulist_from_mask([]) == ""


def test_cuda_version_text():
    assert cuda_version_text(12040) == "12.4"
    assert cuda_version_text(11080) == "11.8"
    assert cuda_version_text(12090) == "12.9"
    na = NotAvailable("x")
    assert cuda_version_text(na) is na


def sysfs_root(tmp_path, lib, nodes=None):
    """A root whose sys/bus/pci/devices/<bdf>/numa_node give the stub's GPUs their socket node
    (``nodes`` overrides; default the stub's "numa")."""
    for k, g in enumerate(lib.gpus):
        bdf = g["bus"][4:].lower()
        d = tmp_path / "sys" / "bus" / "pci" / "devices" / bdf
        d.mkdir(parents=True, exist_ok=True)
        (d / "numa_node").write_text(f"{(nodes or {}).get(k, g['numa'])}\n")
    return str(tmp_path)


def test_reads_gpus_links_and_classes(tmp_path):
    lib = StubNvml()
    topo = read_topology(lib, env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
                         sysfs_root=sysfs_root(tmp_path, lib))
    assert classes(topo) == {(0, 1): "NV2", (0, 2): "SYS", (0, 3): "SYS", (1, 2): "SYS",
                             (1, 3): "SYS", (2, 3): "NODE"}
    g0, g2 = topo.gpu(0), topo.gpu(2)
    assert g0.name == "NVIDIA A100-SXM4-80GB" and g0.uuid == "GPU-00000000-aaaa-bbbb"
    assert g0.pci_bus_id == "00000000:07:00.0" and g0.numa_node == 0
    assert g0.cpu_affinity == "0-31" and g2.cpu_affinity == "32-63,96-127"
    assert g0.pcie.gen_current == 4 and g0.pcie.width_max == 16 and g0.pcie.replay_counter == 0
    assert g0.mig_mode == "disabled"
    assert [g.cuda_index for g in topo.gpus] == [0, 1, 2, 3]
    assert len(g0.nvlinks) == 2 and g2.nvlinks == []
    lk = g0.nvlinks[1]
    assert lk.active is True and lk.version == 3 and lk.remote_bus_id == "00000000:0F:00.0"
    assert lk.remote_type == "GPU"
    assert lk.errors == {"replay": 10, "recovery": 11, "crc_flit": 12, "crc_data": 13}
    p = topo.pair(0, 1)
    assert p.nvlink_count == 2 and p.p2p == {c: "OK" for c in ("read", "write", "nvlink", "atomics", "pci")}
    assert topo.pair(2, 3).nvlink_count == 0
    assert topo.host.driver_version == "550.54.15" and topo.host.cuda_driver_version == "12.4"
    assert topo.host.nvml_version == "12.550.54.15"
    assert topo.source == "nvml" and topo.simulated is False


def test_host_is_copied_and_machine_defaults_to_hostname():
    host = HostInfo(hostname="node17", iommu_mode="off")
    topo = read_topology(StubNvml(), host=host)
    assert topo.machine == "node17" and topo.host.iommu_mode == "off"
    assert topo.host.driver_version == "550.54.15"
    assert not is_value(host.driver_version)  # the caller's record is untouched
    assert read_topology(StubNvml(), host=host, machine="m").machine == "m"


def test_json_round_trip():
    topo = read_topology(StubNvml(), host=HostInfo(hostname="h"))
    back = topology_from_json(topology_to_json(topo))
    assert classes(back) == classes(topo)
    assert topology_to_json(back) == topology_to_json(topo)


def test_p2p_status_names_and_direction():
    lib = StubNvml(p2p=lambda i, j, cap: 0 if (i, j) == (0, 1) else (5 if cap == 0 else 2))
    topo = read_topology(lib)
    assert topo.pair(0, 1).p2p["read"] == "OK"
    assert topo.pair(2, 3).p2p == {"read": "NS", "write": "GNS", "nvlink": "GNS", "atomics": "GNS",
                                   "pci": "GNS"}


def test_inactive_link_does_not_count():
    b = ["00000000:07:00.0", "00000000:0F:00.0"]
    lib = StubNvml(links={0: [(1, b[1], 0), (0, b[1], 0)], 1: [(1, b[0], 0), (0, b[0], 0)]})
    topo = read_topology(lib)
    assert str(topo.link_class(0, 1)) == "NV1"
    assert [lk.active for lk in topo.gpu(0).nvlinks] == [True, False]


def test_asymmetric_link_report_takes_the_smaller_count():
    b = ["00000000:07:00.0", "00000000:0F:00.0"]
    lib = StubNvml(links={0: [(1, b[1], 0), (1, b[1], 0)], 1: [(1, b[0], 0), (0, b[0], 0)]})
    assert str(read_topology(lib).link_class(0, 1)) == "NV1"


def test_switch_links_connect_every_switch_gpu():
    sw = "00000000:C0:00.0"
    lib = StubNvml(links={0: [(1, sw, 2)] * 6, 1: [(1, sw, 2)] * 6, 2: [(1, sw, 2)] * 4, 3: []})
    topo = read_topology(lib)
    assert str(topo.link_class(0, 1)) == "NV6"
    assert str(topo.link_class(0, 2)) == "NV4"  # min of the two sides
    assert str(topo.link_class(2, 3)) == "NODE"


def test_unknown_remote_type_counts_only_gpu_bus_ids():
    b = ["00000000:07:00.0", "00000000:0F:00.0"]
    lib = StubNvml(links={0: [(1, b[1], 0), (1, "00000000:C0:00.0", 0)], 1: [(1, b[0], 0)]},
                   fail={("nvmlDeviceGetNvLinkRemoteDeviceType", 0): 3,
                         ("nvmlDeviceGetNvLinkRemoteDeviceType", 1): 3})
    topo = read_topology(lib)
    assert str(topo.link_class(0, 1)) == "NV1"
    assert isinstance(topo.gpu(0).nvlinks[0].remote_type, NotAvailable)


def test_gpu_lost_midway_keeps_identity_others_complete():
    lib = StubNvml(fail={("nvmlDeviceGetMigMode", 1): 15, ("nvmlDeviceGetTopologyCommonAncestor", 1): 15,
                         ("nvmlDeviceGetP2PStatus", 1): 15})
    topo = read_topology(lib, env={})
    g1 = topo.gpu(1)
    assert g1.lost == Failed("GPU is lost (NVML_ERROR_GPU_IS_LOST from nvmlDeviceGetMigMode)")
    # Read before the loss: which GPU it is.
    assert g1.pci_bus_id == "00000000:0F:00.0" and g1.uuid == "GPU-00000001-aaaa-bbbb"
    lost = NotAvailable("GPU lost")
    assert g1.numa_node == lost and g1.cpu_affinity == lost and g1.pcie.gen_current == lost
    assert g1.mig_mode == lost and g1.nvlinks == [] and g1.cuda_index == lost
    # GPU 0 still sees its 2 links to GPU 1: the pair keeps its NVLink class, P2P is n/a.
    p = topo.pair(0, 1)
    assert str(p.link_class) == "NV2" and p.p2p["read"] == lost
    # No PCIe class can be read for 1-2, 1-3, and GPU 1's NUMA node is unknown: omitted.
    assert set(classes(topo)) == {(0, 1), (0, 2), (0, 3), (2, 3)}
    for k in (0, 2, 3):
        g = topo.gpu(k)
        assert g.lost is None and is_value(g.name) and is_value(g.cpu_affinity)
    assert [topo.gpu(k).cuda_index for k in (0, 2, 3)] == [0, 1, 2]


def test_gpu_lost_from_first_call_links_attributed_by_elimination():
    """Every call on GPU 1 says lost (so its bus id is unknown): GPU 0's active links to a GPU bus
    id that no readable GPU has can only go to GPU 1."""
    fns = ["nvmlDeviceGetName", "nvmlDeviceGetTopologyCommonAncestor", "nvmlDeviceGetP2PStatus"]
    topo = read_topology(StubNvml(fail={(fn, 1): 15 for fn in fns}))
    g1 = topo.gpu(1)
    assert isinstance(g1.lost, Failed) and g1.pci_bus_id == NotAvailable("GPU lost")
    assert g1.key == "nvml:1"
    assert str(topo.link_class(0, 1)) == "NV2"
    assert set(classes(topo)) == {(0, 1), (0, 2), (0, 3), (2, 3)}


def test_handle_failure():
    topo = read_topology(StubNvml(fail={("nvmlDeviceGetHandleByIndex", 2): 999}))
    g2 = topo.gpu(2)
    assert isinstance(g2.name, Failed) and "999" in g2.name.error and g2.lost is None
    assert (0, 1) in classes(topo) and not any(2 in p for p in classes(topo))


def test_unknown_error_on_one_gpu_only_marks_that_field():
    topo = read_topology(StubNvml(fail={("nvmlDeviceGetCurrPcieLinkGeneration", 3): 999}))
    assert isinstance(topo.gpu(3).pcie.gen_current, Failed)
    assert topo.gpu(3).pcie.gen_max == 4 and topo.gpu(2).pcie.gen_current == 4
    assert len(topo.pairs) == 6


def test_old_driver_without_numa_call(tmp_path):
    """NVML's NUMA call is the GPU memory's node: its absence costs only that field; the
    socket's node still comes from sysfs."""
    lib = StubNvml(fail={("nvmlDeviceGetNumaNodeId", k): 13 for k in range(4)})
    topo = read_topology(lib, sysfs_root=sysfs_root(tmp_path, lib))
    assert all(isinstance(g.gpu_memory_numa_node, NotAvailable) for g in topo.gpus)
    assert "driver too old" in topo.gpu(0).gpu_memory_numa_node.reason
    assert [g.numa_node for g in topo.gpus] == [0, 0, 1, 1]
    assert classes(topo)[(0, 2)] == "SYS"


def test_socket_numa_node_comes_from_sysfs_not_nvml(tmp_path):
    """Issue 8: nvmlDeviceGetNumaNodeId is the GPU memory's own node (Grace Hopper), not the
    socket's. The stub answers 0,0,1,1 there; sysfs says 1,1,0,0: sysfs wins, NVML's is kept."""
    lib = StubNvml()
    root = sysfs_root(tmp_path, lib, nodes={0: 1, 1: 1, 2: 0, 3: 0})
    topo = read_topology(lib, sysfs_root=root)
    assert [g.numa_node for g in topo.gpus] == [1, 1, 0, 0]
    assert [g.gpu_memory_numa_node for g in topo.gpus] == [0, 0, 1, 1]
    back = topology_from_json(topology_to_json(topo))
    assert [g.gpu_memory_numa_node for g in back.gpus] == [0, 0, 1, 1]
    (tmp_path / "sys/bus/pci/devices/0000:0f:00.0/numa_node").write_text("-1\n")
    g1 = read_topology(lib, sysfs_root=root).gpu(1)
    assert isinstance(g1.numa_node, NotAvailable) and "-1" in g1.numa_node.reason
    no_root = read_topology(lib).gpu(0)
    assert isinstance(no_root.numa_node, NotAvailable) and no_root.gpu_memory_numa_node == 0


def test_failed_topology_call_falls_back_to_numa_or_omits(tmp_path):
    lib = StubNvml(fail={("nvmlDeviceGetTopologyCommonAncestor", 0): 999})
    root = sysfs_root(tmp_path, lib)
    c = classes(read_topology(lib, sysfs_root=root))
    assert c[(0, 1)] == "NV2"          # from NVLink, no call needed
    assert c[(0, 2)] == "SYS"          # different NUMA nodes
    assert (0, 1) in c and c[(2, 3)] == "NODE"
    lib = StubNvml(fail={("nvmlDeviceGetTopologyCommonAncestor", 2): 999})
    assert (2, 3) not in classes(read_topology(lib, sysfs_root=root))  # same NUMA node, class unknown: omitted


def test_no_nvlink_functions_in_bindings():
    cls = type("OldBindings", (StubNvml,), {"nvmlDeviceGetNvLinkState": property(
        lambda self: (_ for _ in ()).throw(AttributeError("nvmlDeviceGetNvLinkState")))})
    topo = read_topology(cls())
    assert topo.gpu(0).nvlinks == [] and str(topo.link_class(0, 1)) == "NODE"


def test_mig_enabled_and_not_supported():
    lib = StubNvml(fail={("nvmlDeviceGetMigMode", 2): 3})
    lib.nvmlDeviceGetMigMode = lambda h, _f=lib.nvmlDeviceGetMigMode: [1, 1] if h == 0 else _f(h)
    topo = read_topology(lib)
    assert topo.gpu(0).mig_mode == "enabled" and topo.gpu(1).mig_mode == "disabled"
    assert isinstance(topo.gpu(2).mig_mode, NotAvailable)


def test_link_count_stops_at_first_missing_link():
    b = ["00000000:07:00.0", "00000000:0F:00.0"]
    lib = StubNvml(links={0: [(1, b[1], 0)] * 12, 1: [(1, b[0], 0)] * 12})
    topo = read_topology(lib)
    assert len(topo.gpu(0).nvlinks) == 12 and str(topo.link_class(0, 1)) == "NV12"


def test_pair_calls_are_quadratic_not_worse():
    """Each GPU is read once; pairs cost a bounded number of calls each."""
    def build(n):
        gpus = [dict(bus=f"00000000:{k + 1:02X}:00.0", numa=k % 2, mask=[1 << k]) for k in range(n)]
        return StubNvml(gpus=gpus, links={})
    small, big = build(8), build(32)
    read_topology(small)
    read_topology(big)
    pairs = lambda n: n * (n - 1) // 2
    per_pair = (big.calls - small.calls) / (pairs(32) - pairs(8))
    assert per_pair <= 8


class GappyLinks(StubNvml):
    """GPU 0 has 4 NVLinks to GPU 1 and link 1 answers NOT_SUPPORTED (a disabled link)."""

    def __init__(self, field_count=True):
        super().__init__()
        b = [g["bus"] for g in self.gpus]
        self.links = {0: [(1, b[1], 0)] * 4, 1: [(1, b[0], 0)] * 4}
        if not field_count:
            self.nvmlDeviceGetFieldValues = None  # old bindings: getattr finds nothing usable

    def nvmlDeviceGetNvLinkState(self, h, link):
        if h == 0 and link == 1:
            raise StubError(3)
        return super().nvmlDeviceGetNvLinkState(h, link)

    def nvmlDeviceGetFieldValues(self, h, ids):
        assert ids == [91]
        n = len(self.links.get(h, []))
        return [types.SimpleNamespace(fieldId=91, valueType=1, nvmlReturn=0,
                                      value=types.SimpleNamespace(uiVal=n))]


def test_nvlink_enumeration_skips_an_unsupported_link_and_reads_on():
    """Issue 8: enumeration used to stop at the first link that errors (GPU 0 had 1 link)."""
    from gputopo.probe.nvml_query import nvlink_count

    for lib in (GappyLinks(), GappyLinks(field_count=False)):
        topo = read_topology(lib)
        assert [lk.link for lk in topo.gpu(0).nvlinks] == [0, 2, 3]
        assert len(topo.gpu(1).nvlinks) == 4
        assert str(topo.link_class(0, 1)) == "NV3"
    assert nvlink_count(GappyLinks(), 0, 18) == 4
    assert nvlink_count(GappyLinks(field_count=False), 0, 18) == 18


def test_fake_nvml_answers_the_link_count_field():
    from gputopo.probe.nvml_query import nvlink_count
    from gputopo.sim.description import load_description
    from gputopo.sim.fake_nvml import FakeNvml

    lib = FakeNvml(load_description("seed-8gpu"))
    lib.nvmlInit()
    assert nvlink_count(lib, lib.nvmlDeviceGetHandleByIndex(0), 18) == 4
    lib = FakeNvml(load_description("pcie-4gpu"))
    lib.nvmlInit()
    assert nvlink_count(lib, lib.nvmlDeviceGetHandleByIndex(0), 18) == 0
