"""The NVML reader on the real machine (skips where there is no driver or GPU)."""

import os

import pytest

from gputopo.errors import NoHardwareError
from gputopo.model.topology import P2P_CAPS, P2P_STATUS_NAMES
from gputopo.model.values import NotAvailable, Failed, is_value


@pytest.mark.gpu
def test_real_machine_invariants():
    from gputopo.probe.host import bus_key, read_host
    from gputopo.probe.nvml_lib import close_nvml, load_nvml
    from gputopo.probe.nvml_reader import read_topology

    try:
        lib = load_nvml()
    except NoHardwareError as e:
        pytest.skip(str(e))
    try:
        count = lib.nvmlDeviceGetCount()
        topo = read_topology(lib, host=None)
        host = read_host("/", gpu_bus_ids=[g.pci_bus_id for g in topo.gpus if is_value(g.pci_bus_id)])
    finally:
        close_nvml(lib)

    assert len(topo.gpus) == count >= 1
    assert isinstance(topo.host.driver_version, str) and topo.host.driver_version[0].isdigit()
    assert isinstance(topo.host.cuda_driver_version, str) and "." in topo.host.cuda_driver_version
    keys = set()
    for g in topo.gpus:
        if g.lost is not None:
            continue
        assert isinstance(g.name, str) and g.name
        assert isinstance(g.uuid, str) and g.uuid.startswith(("GPU-", "MIG-"))
        keys.add(bus_key(g.pci_bus_id))
        assert isinstance(g.pcie.width_max, int) and g.pcie.width_max >= 1
        assert is_value(g.pcie.gen_max) or isinstance(g.pcie.gen_max, NotAvailable)
        if is_value(g.cpu_affinity):
            assert g.cpu_affinity[0].isdigit()
        for lk in g.nvlinks:
            assert isinstance(lk.active, bool) or isinstance(lk.active, (NotAvailable, Failed))
        if "CUDA_VISIBLE_DEVICES" not in os.environ:
            assert isinstance(g.cuda_index, int) or isinstance(g.cuda_index, NotAvailable)
    assert len(keys) == len([g for g in topo.gpus if g.lost is None])
    for p in topo.pairs:
        assert p.gpus[0] < p.gpus[1]
        assert set(p.p2p) == set(P2P_CAPS)
        for v in p.p2p.values():
            assert v in P2P_STATUS_NAMES.values() or not is_value(v)
        if p.link_class.is_nvlink:
            assert p.nvlink_count == p.link_class.nvlinks
    assert host.iommu_mode in ("translated", "passthrough", "off") or isinstance(host.iommu_mode, NotAvailable)
