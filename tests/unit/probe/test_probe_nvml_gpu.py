"""The NVML reader on the real machine (skips where there is no driver or GPU), compared
field by field with nvidia-smi's own answers (tests/smi_reference.py parses them), so that a
field gputopo reads wrongly fails here instead of agreeing with itself."""

import pytest

from smi_reference import as_int, cuda_version, mig_mode, parse_nvlink_status, parse_query_csv

from gputopo.errors import NoHardwareError
from gputopo.model.values import is_value


@pytest.mark.nvml
def test_scan_equals_nvidia_smi_machine_wide():
    """GPU count, driver and CUDA versions, and every ordered pair's P2P read/write status as
    `nvidia-smi topo -p2p r|w` prints them; UUIDs and bus ids unique (no GPU read twice)."""
    from gputopo.model.bus_id import bus_key
    from gputopo.probe.smi import parse_p2p_matrix

    topo = _scanned()
    rows = parse_query_csv(_smi("--query-gpu=index,driver_version", "--format=csv,noheader,nounits"),
                           ("index", "driver_version"))
    assert len(topo.gpus) == len(rows) >= 1
    assert {r["driver_version"] for r in rows} == {topo.host.driver_version}
    assert topo.host.cuda_driver_version == cuda_version(_smi())
    alive = [g for g in topo.gpus if g.lost is None]
    assert len({bus_key(g.pci_bus_id) for g in alive}) == len({g.uuid for g in alive}) == len(alive)
    for cap, letter in (("read", "r"), ("write", "w")):
        smi = parse_p2p_matrix(_smi("topo", "-p2p", letter), f"nvidia-smi topo -p2p {letter}")
        for p in topo.pairs:
            i, j = p.gpus
            if is_value(p.p2p[cap]) and (i, j) in smi:
                assert p.p2p[cap] == smi[(i, j)], (cap, p.gpus, p.p2p[cap], smi[(i, j)])


# ----------------------------------------------------------------------------- NVML only
# These run wherever an NVIDIA driver answers, even with a CPU-only torch (issue 8): the NVML
# reader's fields must equal what nvidia-smi prints on the same machine.

_QUERY = ("index", "name", "uuid", "pci.bus_id", "pcie.link.gen.max", "pcie.link.width.max",
          "mig.mode.current", "driver_version")


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
    from gputopo.model.bus_id import bus_key

    topo = _scanned()
    rows = parse_query_csv(_smi(f"--query-gpu={','.join(_QUERY)}", "--format=csv,noheader,nounits"),
                           _QUERY)
    assert len(rows) == len(topo.gpus)
    for smi in rows:
        g = topo.gpu(int(smi["index"]))
        if g.lost is not None:
            continue
        assert g.name == smi["name"]
        assert g.uuid == smi["uuid"]
        assert bus_key(g.pci_bus_id) == bus_key(smi["pci.bus_id"])
        assert g.pcie.gen_max == as_int(smi["pcie.link.gen.max"]) or as_int(smi["pcie.link.gen.max"]) is None
        assert g.pcie.width_max == as_int(smi["pcie.link.width.max"]) or as_int(smi["pcie.link.width.max"]) is None
        assert (g.mig_mode if is_value(g.mig_mode) else None) == mig_mode(smi["mig.mode.current"])
        assert topo.host.driver_version == smi["driver_version"]


@pytest.mark.nvml
def test_link_classes_and_numa_equal_nvidia_smi_topo():
    """Every pair's class and each GPU's socket NUMA node (sysfs) as `nvidia-smi topo -m`."""
    from gputopo.probe.smi import parse_topo_matrix

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
def test_nvlinks_equal_nvidia_smi_nvlink_status():
    """Each GPU's active NVLinks, link by link, as `nvidia-smi nvlink -s` lists them: a link
    nvidia-smi shows with a rate is active in gputopo, "<inactive>" is inactive, and gputopo
    has no active link nvidia-smi does not show."""
    topo = _scanned()
    smi = parse_nvlink_status(_smi("nvlink", "-s"))
    for g in topo.gpus:
        if g.lost is not None:
            continue
        theirs = smi.get(g.nvml_index, {})
        ours = {lk.link: lk.active for lk in g.nvlinks if isinstance(lk.active, bool)}
        for link, rate in theirs.items():
            if link in ours:
                assert ours[link] == (rate is not None), (g.nvml_index, link, ours[link], rate)
        assert {k for k, up in ours.items() if up} == {k for k, r in theirs.items() if r is not None}, \
            (g.nvml_index, ours, theirs)
