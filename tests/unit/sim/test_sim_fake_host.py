"""The fake host root: IOMMU files, sysfs bridge chains, lspci text, nvidia-smi text."""

import os
import re

import pytest

from gputopo.sim.description import load_description
from gputopo.sim.fake_host import FakeHost


def read(host, rel):
    with open(host.path(rel)) as f:
        return f.read()


def acs_ctl(block):
    """The ACSCtl bits of one lspci block, None when it has no ACS capability."""
    m = re.search(r"^\t\tACSCtl:\t(.*)$", block, re.M)
    return {t[:-1]: t.endswith("+") for t in m.group(1).split()} if m else None


def blocks(text):
    """lspci -D output per device address."""
    out = {}
    for chunk in text.strip().split("\n\n"):
        out[chunk.split(" ", 1)[0]] = chunk
    return out


def test_translated_iommu_files():
    d = load_description("seed-8gpu")
    with FakeHost(d) as h:
        root = h.root
        assert "intel_iommu=on" in read(h, "proc/cmdline") and "iommu=pt" not in read(h, "proc/cmdline")
        assert "dmar0" in os.listdir(h.path("sys/class/iommu"))
        gpu = d.gpus[5]
        group_link = h.path(f"sys/bus/pci/devices/{gpu.lspci_bdf}/iommu_group")
        group_dir = os.path.realpath(group_link)
        assert group_dir.startswith(os.path.realpath(root)) and os.path.isdir(group_dir)
        assert read(h, os.path.relpath(os.path.join(group_dir, "type"), root)).strip() == "DMA"
        members = os.listdir(os.path.join(group_dir, "devices"))
        assert members == [gpu.lspci_bdf]
        assert read(h, "proc/sys/kernel/hostname").strip() == "gpu-node-07"
        assert read(h, "proc/sys/kernel/osrelease").strip() == "5.15.0-91-generic"
    assert not os.path.exists(root)  # cleaned up


def test_passthrough_and_off():
    with FakeHost(load_description("seed-8gpu-healthy")) as h:
        assert "iommu=pt" in read(h, "proc/cmdline")
        groups = os.listdir(h.path("sys/kernel/iommu_groups"))
        assert groups and {read(h, f"sys/kernel/iommu_groups/{g}/type").strip() for g in groups} == {"identity"}
    with FakeHost(load_description("pcie-4gpu")) as h:
        assert os.listdir(h.path("sys/class/iommu")) == []
        assert os.listdir(h.path("sys/kernel/iommu_groups")) == []
        assert not os.path.exists(h.path("sys/bus/pci/devices/0000:1a:00.0/iommu_group"))
        assert "IOMMU group" not in h.run(["lspci", "-vvv"])[1]
    with FakeHost(load_description("dgx-a100")) as h:
        assert "ivhd0" in os.listdir(h.path("sys/class/iommu"))  # AMD names its IOMMU units ivhd


def test_sysfs_path_gives_the_bridge_chain():
    d = load_description("pcie-4gpu")
    with FakeHost(d) as h:
        for g in d.gpus:
            link = h.path(f"sys/bus/pci/devices/{g.lspci_bdf}")
            target = os.readlink(link)
            assert target.startswith("../../../devices/pci0000:")
            parts = [p for p in target.split("/") if re.match(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$", p)]
            assert parts[-1] == g.lspci_bdf
            assert parts[:-1] == [b.bdf for b in d.pcie_tree.chain(g.index)]
            real = os.path.realpath(link)
            assert os.path.isdir(real) and real.startswith(os.path.realpath(h.root))
            assert read(h, f"sys/bus/pci/devices/{g.lspci_bdf}/vendor").strip() == "0x10de"
            assert read(h, f"sys/bus/pci/devices/{g.lspci_bdf}/numa_node").strip() == str(g.numa_node)
            assert read(h, f"sys/bus/pci/devices/{g.lspci_bdf}/max_link_speed").strip() == "8.0 GT/s PCIe"
        chain0 = [b.bdf for b in d.pcie_tree.chain(0)]
        chain1 = [b.bdf for b in d.pcie_tree.chain(1)]
        assert len(chain0) == 5 and chain0[:2] == chain1[:2] and chain0[2:] != chain1[2:]  # PXB: two switch levels
        chain2 = [b.bdf for b in d.pcie_tree.chain(2)]
        chain3 = [b.bdf for b in d.pcie_tree.chain(3)]
        assert len(chain2) == 3 and chain2[:2] == chain3[:2]  # PIX: one switch


def test_lspci_acs_blocks_follow_description():
    sick, fine = load_description("seed-8gpu"), load_description("seed-8gpu-healthy")
    with FakeHost(sick) as h:
        rc, out, err = h.run(["lspci", "-vvv", "-D"])
        assert rc == 0 and err == ""
        by = blocks(out)
        for g in sick.gpus:
            assert g.lspci_bdf in by and "Kernel driver in use: nvidia" in by[g.lspci_bdf]
        chain = sick.pcie_tree.chain(5)
        root_port, dsp = chain[0], chain[-1]
        for bridge in (root_port, dsp):
            block = by[bridge.bdf]
            assert "Access Control Services" in block and "\t\tACSCap:\t" in block
            ctl = acs_ctl(block)
            assert ctl["ReqRedir"] and ctl["CmpltRedir"] and not ctl["EgressCtrl"]
        assert acs_ctl(by[chain[1].bdf]) is None  # the switch's upstream port has no ACS
        assert bridge.bdf in sick.host.acs_redirect_bridges
    with FakeHost(fine) as h:
        by = blocks(h.run(["lspci", "-vvv", "-D"])[1])
        ctl = acs_ctl(by[fine.pcie_tree.chain(5)[-1].bdf])
        assert ctl is not None and not any(ctl.values())


def test_lspci_forms_and_options():
    d = load_description("seed-8gpu")
    with FakeHost(d) as h:
        rc, out, _ = h.run("lspci")
        assert rc == 0 and out.startswith("18:00.0 Host bridge") and "0000:" not in out
        assert "1b:00.0 VGA compatible controller: NVIDIA Corporation GA102GL [RTX A6000] (rev a1)" in out
        rc, out, _ = h.run(["lspci", "-D", "-nn", "-d", "10de:"])
        assert out.splitlines()[0] == ("0000:1b:00.0 VGA compatible controller [0300]: NVIDIA Corporation "
                                       "GA102GL [RTX A6000] [10de:2230] (rev a1)")
        assert len(out.splitlines()) == 8
        rc, out, _ = h.run(["lspci", "-vvv", "-s", "0000:8a:00.0"])
        assert out.startswith("8a:00.0 ") and out.count("\n\n") == 1
        assert "LnkSta:\tSpeed 16GT/s (ok), Width x16 (ok)" in out
        assert h.run(["lspci", "-s", "8a:"])[1].count("\n") == 1
        assert h.run(["lspci", "-q"])[0] == 1
        assert h.run(["lspci", "-s", "zz:00.0"])[0] == 1
        assert h.run(["frobnicate"])[0] == 127
        assert h.commands[0] == ["lspci"]


def test_lspci_without_root_denies_capabilities():
    with FakeHost(load_description("seed-8gpu"), as_root=False) as h:
        out = h.run(["lspci", "-vvv"])[1]
        assert "Capabilities: <access denied>" in out and "ACSCtl" not in out
        assert h.run(["dmesg"])[0] == 1


def test_multi_domain_host_prints_domains():
    from gputopo.sim.description import generate_description

    with FakeHost(generate_description(16)) as h:
        first = h.run(["lspci"])[1].splitlines()[0]
        assert re.match(r"^0000:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7] ", first)
        assert "0001:" in h.run(["lspci"])[1]


def test_downtrained_gpu_in_lspci_and_sysfs():
    d = load_description("seed-8gpu").with_faults([{"where": "gpu:2", "what": "downtrained", "width": 8}])
    with FakeHost(d) as h:
        bdf = d.gpus[2].lspci_bdf
        out = h.run(["lspci", "-vvv", "-s", bdf])[1]
        assert "LnkSta:\tSpeed 16GT/s (ok), Width x8 (downgraded)" in out
        assert "LnkCap:\tPort #0, Speed 16GT/s, Width x16" in out
        assert read(h, f"sys/bus/pci/devices/{bdf}/current_link_width").strip() == "8"
        assert read(h, f"sys/bus/pci/devices/{bdf}/max_link_width").strip() == "16"


def test_nvswitches_show_in_lspci():
    d = load_description("dgx-a100")
    with FakeHost(d) as h:
        out = h.run(["lspci", "-D", "-d", "10de:"])[1]
        assert out.count("Bridge: NVIDIA Corporation Device 1af1") == 6
        assert out.count("3D controller: NVIDIA Corporation GA100 [A100 SXM4 80GB]") == 8


@pytest.mark.parametrize("name", ["seed-8gpu", "pcie-4gpu", "degraded-nvlink", "dgx-h100"])
def test_nvidia_smi_text_parses_back(name):
    from gputopo.probe.smi import parse_p2p_matrix, parse_topo_matrix

    d = load_description(name)
    with FakeHost(d) as h:
        rc, out, _ = h.run(["nvidia-smi", "topo", "-m"])
        assert rc == 0
        m = parse_topo_matrix(out, "fake")
        assert {k: str(v) for k, v in m.classes.items()} == {(i, j): str(d.link_class(i, j)) for i, j in d.pairs()}
        assert [m.numa_affinity[i] for i in range(len(d.gpus))] == [g.numa_node for g in d.gpus]
        p2p = parse_p2p_matrix(h.run(["nvidia-smi", "topo", "-p2p", "n"])[1], "fake")
        assert {(i, j): p2p[(i, j)] for i, j in d.pairs()} == {(i, j): d.p2p_status(i, j)["nvlink"] for i, j in d.pairs()}
        assert h.run(["nvidia-smi", "-L"])[1].splitlines()[0] == f"GPU 0: {d.gpus[0].name} (UUID: {d.gpus[0].uuid})"


def test_other_commands():
    with FakeHost(load_description("seed-8gpu")) as h:
        assert h.run(["uname", "-r"]) == (0, "5.15.0-91-generic\n", "")
        assert h.run(["hostname"])[1] == "gpu-node-07\n"
        assert h.run(["cat", "/proc/cmdline"])[1] == read(h, "proc/cmdline")
        assert h.run(["cat", "/nope"])[0] == 1
        dmesg = h.run(["dmesg"])[1]
        assert "iommu: Default domain type: Translated" in dmesg and "DMAR: IOMMU enabled" in dmesg


@pytest.mark.parametrize("name,mode,redirects", [("seed-8gpu", "translated", True),
                                                 ("seed-8gpu-healthy", "passthrough", False),
                                                 ("pcie-4gpu", "off", False)])
def test_host_reader_sees_what_the_description_says(name, mode, redirects):
    from gputopo.probe.host import read_host

    d = load_description(name)
    with FakeHost(d) as h:
        info = read_host(root=h.root, run=h.run, gpu_bus_ids=[g.bus_id for g in d.gpus])
    assert info.iommu_mode == mode and info.hostname == d.host.hostname
    assert isinstance(info.acs, list) and info.acs
    assert any(b.redirects for b in info.acs) is redirects
    assert {b.bdf for b in info.acs if b.redirects} == (set(d.host.acs_redirect_bridges) if redirects else set())


def test_forgotten_host_is_cleaned_up_and_close_is_idempotent():
    import gc

    h = FakeHost(load_description("pcie-4gpu"))
    root = h.root
    assert os.path.isdir(root)
    h.close()
    h.close()
    assert not os.path.exists(root)
    h2 = FakeHost(load_description("pcie-4gpu"))
    root2 = h2.root
    del h2
    gc.collect()
    assert not os.path.exists(root2)


def test_given_root_is_left_in_place(tmp_path):
    with FakeHost(load_description("pcie-4gpu"), root=str(tmp_path / "r")) as h:
        assert h.root == str(tmp_path / "r")
    assert (tmp_path / "r" / "proc" / "cmdline").exists()
