"""The NVML reader on the real machine (skips where there is no driver or GPU)."""

import contextlib
import os

import pytest

from gputopo.errors import NoHardwareError
from gputopo.model.topology import P2P_CAPS, P2P_STATUS_NAMES
from gputopo.model.values import NotAvailable, Failed, is_value


@contextlib.contextmanager
def nvml():
    """The real NVML library object (skips where there is no driver), closed after."""
    from gputopo.probe.nvml_lib import close_nvml, load_nvml

    try:
        lib = load_nvml()
    except NoHardwareError as e:
        pytest.skip(str(e))
    try:
        yield lib
    finally:
        close_nvml(lib)


@pytest.mark.nvml
def test_real_machine_invariants():
    from gputopo.probe.host import bus_key, read_host
    from gputopo.probe.nvml_reader import read_topology

    with nvml() as lib:
        count = lib.nvmlDeviceGetCount()
        topo = read_topology(lib, host=None)
        host = read_host("/", gpu_bus_ids=[g.pci_bus_id for g in topo.gpus if is_value(g.pci_bus_id)])

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
        # NVML's NUMA call is the GPU memory's node: an int on coherent systems, else n/a
        assert isinstance(g.gpu_memory_numa_node, (int, NotAvailable, Failed))
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


# ----------------------------------------------------------------------------- NVML only
# These run wherever an NVIDIA driver answers, even with a CPU-only torch (issue 8): the NVML
# reader's fields must equal what nvidia-smi prints on the same machine.

_QUERY = ("index", "name", "uuid", "pci.bus_id", "pcie.link.gen.max", "pcie.link.width.max",
          "driver_version")


def _smi(*args):
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        pytest.skip("nvidia-smi not on PATH")
    proc = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _scanned():
    from gputopo.probe.scan import scan_real

    try:
        return scan_real()
    except NoHardwareError as e:
        pytest.skip(str(e))


@pytest.mark.nvml
def test_nvml_fields_equal_nvidia_smi_query_gpu():
    from gputopo.probe.host import bus_key

    topo = _scanned()
    rows = [[c.strip() for c in line.split(",")] for line in
            _smi(f"--query-gpu={','.join(_QUERY)}", "--format=csv,noheader,nounits").splitlines()
            if line.strip()]
    assert len(rows) == len(topo.gpus)
    for row in rows:
        smi = dict(zip(_QUERY, row))
        g = topo.gpu(int(smi["index"]))
        assert g.name == smi["name"]
        assert g.uuid == smi["uuid"]
        assert bus_key(g.pci_bus_id) == bus_key(smi["pci.bus_id"])
        if smi["pcie.link.gen.max"].isdigit():
            assert g.pcie.gen_max == int(smi["pcie.link.gen.max"])
        if smi["pcie.link.width.max"].isdigit():
            assert g.pcie.width_max == int(smi["pcie.link.width.max"])
        assert topo.host.driver_version == smi["driver_version"]


@pytest.mark.nvml
def test_link_classes_and_numa_equal_nvidia_smi_topo():
    """Every pair's class and each GPU's socket NUMA node (sysfs) as `nvidia-smi topo -m`."""
    from gputopo.probe.smi_parser import parse_topo_matrix

    topo = _scanned()
    m = parse_topo_matrix(_smi("topo", "-m"))
    for p in topo.pairs:
        assert str(p.link_class) == str(m.link_class(*p.gpus)), p.gpus
    for g in topo.gpus:
        smi_numa = m.numa_affinity.get(g.nvml_index)
        if isinstance(smi_numa, int):
            assert g.numa_node == smi_numa, g.nvml_index
        else:  # N/A in nvidia-smi: sysfs has no node either
            assert not is_value(g.numa_node), (g.nvml_index, g.numa_node)


@pytest.mark.nvml
def test_nvlinks_enumerated_up_to_the_link_count():
    from gputopo.probe.nvml_query import nvlink_count
    from gputopo.probe.nvml_reader import read_topology

    with nvml() as lib:
        topo = read_topology(lib)
        for g in topo.gpus:
            h = lib.nvmlDeviceGetHandleByIndex(g.nvml_index)
            n = nvlink_count(lib, h, lib.NVML_NVLINK_MAX_LINKS)
            assert len(g.nvlinks) <= n and all(lk.link < n for lk in g.nvlinks)
