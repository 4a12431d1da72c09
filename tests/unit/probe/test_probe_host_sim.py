"""The host reader on simulated hosts (gputopo.sim's FakeHost): the same code as on a real one."""


import pytest

from gputopo.model.values import NotAvailable
from gputopo.model.bus_id import bus_key
from gputopo.probe.host import read_host, upstream_bridges
from gputopo.sim.description import load_description
from gputopo.sim.fake_host import FakeHost


def host_of(name, **kw):
    desc = load_description(name)
    with FakeHost(desc, **kw) as fh:
        info = read_host(fh.root, fh.run, [g.bus_id for g in desc.gpus])
        chains = {g.bus_id: upstream_bridges(fh.root, g.bus_id) for g in desc.gpus}
        commands = list(fh.commands)
    return info, desc, chains, commands


def test_seed_machine_translated_with_acs_redirect():
    info, desc, chains, commands = host_of("seed-8gpu")
    assert info.hostname == desc.host.hostname and info.kernel == desc.host.kernel
    assert info.iommu_mode == "translated"
    assert "kernel cmdline: intel_iommu=on" in info.iommu_evidence
    assert any("type DMA" in e for e in info.iommu_evidence)
    assert isinstance(info.acs, list) and info.acs
    redirecting = {b.bdf for b in info.acs if b.redirects}
    assert redirecting == set(desc.host.acs_redirect_bridges)
    # Every GPU has a redirecting bridge above it: that is what breaks its PCIe P2P.
    for g in desc.gpus:
        assert any(b.redirects and g.bus_id in b.gpus for b in info.acs), g.bus_id
        assert chains[g.bus_id] and all(br in {b.bdf for b in info.acs} for br in chains[g.bus_id])
    # AcsBridge.gpus keeps the NVML form the caller gave.
    assert all(gb.startswith("00000000:") for b in info.acs for gb in b.gpus)
    # one query per bridge above the GPUs; the fake lspci answers each -s with that bridge only
    assert [c for c in commands if c[0] == "lspci"] == \
        [["lspci", "-vvv", "-D", "-s", b] for b in sorted({b.bdf for b in info.acs})]


def test_healthy_twin_passthrough_no_redirect():
    info, desc, _, _ = host_of("seed-8gpu-healthy")
    assert info.iommu_mode == "passthrough"
    assert any("iommu=pt" in e for e in info.iommu_evidence)
    assert isinstance(info.acs, list) and info.acs
    assert not any(b.redirects for b in info.acs)


def test_no_iommu_box_is_off():
    info, _, _, _ = host_of("pcie-4gpu")
    assert info.iommu_mode == "off"
    assert any("no IOMMU registered" in e for e in info.iommu_evidence)


def test_not_root_acs_needs_root():
    info, _, _, _ = host_of("seed-8gpu", as_root=False)
    assert isinstance(info.acs, NotAvailable) and "needs root" in info.acs.reason
    assert info.iommu_mode == "translated"  # sysfs is readable without root


def test_nvswitch_box_bridges_found():
    info, desc, chains, _ = host_of("dgx-a100")
    assert info.iommu_mode == "passthrough"
    gpu_keys = {bus_key(g.bus_id) for g in desc.gpus}
    for bus, chain in chains.items():
        assert chain and bus_key(bus) not in chain and not gpu_keys & set(chain)


def test_lspci_missing_on_simulated_host():
    desc = load_description("seed-8gpu")
    with FakeHost(desc) as fh:
        info = read_host(fh.root, lambda argv: (127, "", f"{argv[0]}: command not found"),
                         [g.bus_id for g in desc.gpus])
    assert isinstance(info.acs, NotAvailable) and "lspci not installed" in info.acs.reason
    assert info.iommu_mode == "translated"


@pytest.mark.parametrize("name", ["seed-8gpu", "dgx-h100"])
def test_simulated_scan_host_facts_end_to_end(name):
    from gputopo.sim.scan import scan_simulated

    topo = scan_simulated(name)
    assert topo.simulated and topo.host.hostname == load_description(name).host.hostname
    assert topo.host.driver_version and topo.host.cuda_driver_version
