"""probe.host against hand-written, real-looking sysfs trees and lspci output."""

import os

import pytest

from gputopo.model.topology import AcsBridge
from gputopo.model.values import NotAvailable
from gputopo.probe import host as host_mod
from gputopo.model.bus_id import bus_key
from gputopo.probe.host import (cmdline_iommu_flags, default_run, parse_acs_controls, parse_lspci_blocks,
                                read_host, read_iommu, upstream_bridges)

GPU0, GPU1, GPU2 = "00000000:07:00.0", "00000000:0F:00.0", "00000000:87:00.0"
# Two GPUs behind one PLX switch on socket 0, one directly on a root port of socket 1.
CHAINS = {
    "0000:07:00.0": "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:07:00.0",
    "0000:0f:00.0": "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:10.0/0000:0f:00.0",
    "0000:87:00.0": "pci0000:80/0000:80:03.0/0000:87:00.0",
}

BRIDGE_HEAD = {
    "0000:00:01.0": "PCI bridge: Intel Corporation Sky Lake-E PCI Express Root Port A (rev 04) (prog-if 00 [Normal decode])",
    "0000:01:00.0": "PCI bridge: PLX Technology, Inc. PEX 8747 48-Lane, 5-Port PCI Express Gen 3 (8.0 GT/s) Switch (rev ca) (prog-if 00 [Normal decode])",
    "0000:02:08.0": "PCI bridge: PLX Technology, Inc. PEX 8747 48-Lane, 5-Port PCI Express Gen 3 (8.0 GT/s) Switch (rev ca) (prog-if 00 [Normal decode])",
    "0000:02:10.0": "PCI bridge: PLX Technology, Inc. PEX 8747 48-Lane, 5-Port PCI Express Gen 3 (8.0 GT/s) Switch (rev ca) (prog-if 00 [Normal decode])",
    "0000:80:03.0": "PCI bridge: Intel Corporation Sky Lake-E PCI Express Root Port D (rev 04) (prog-if 00 [Normal decode])",
}

ACS_ON = "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"
ACS_OFF = "SrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-"


def lspci_block(bdf, acsctl=None, denied=False, domain=True):
    head = (bdf if domain else bdf[5:]) + " " + BRIDGE_HEAD.get(bdf, "3D controller: NVIDIA Corporation GV100GL [Tesla V100 SXM2 32GB] (rev a1)")
    lines = [head,
             "\tControl: I/O+ Mem+ BusMaster+ SpecCycle- MemWINV- VGASnoop- ParErr- Stepping- SERR- FastB2B- DisINTx+",
             "\tStatus: Cap+ 66MHz- UDF- FastB2B- ParErr- DEVSEL=fast >TAbort- <TAbort- <MAbort- >SERR- <PERR- INTx-",
             "\tLatency: 0, Cache Line Size: 64 bytes"]
    if denied:
        lines.append("\tCapabilities: <access denied>")
    else:
        lines += ["\tCapabilities: [40] Power Management version 3",
                  "\t\tFlags: PMEClk- DSI- D1- D2- AuxCurrent=0mA PME(D0+,D1-,D2-,D3hot+,D3cold+)",
                  "\tCapabilities: [68] Express (v2) Downstream Port (Slot+), MSI 00"]
        if acsctl is not None:
            lines += ["\tCapabilities: [f24 v1] Access Control Services",
                      "\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl+ DirectTrans+",
                      f"\t\tACSCtl:\t{acsctl}"]
    lines.append("\tKernel driver in use: pcieport")
    return "\n".join(lines) + "\n"


def lspci_text(acs, denied=False, domain=True):
    """acs: bridge bdf -> ACSCtl text (None: no ACS capability)."""
    bdfs = sorted(set(BRIDGE_HEAD) | set(CHAINS))
    return "\n".join(lspci_block(b, acs.get(b), denied=denied, domain=domain) for b in bdfs)


class Runner:
    def __init__(self, rc=0, out="", err="", missing=False):
        self.rc, self.out, self.err, self.missing, self.calls = rc, out, err, missing, []

    def __call__(self, argv):
        self.calls.append(list(argv))
        if self.missing:
            raise FileNotFoundError(2, "No such file or directory", argv[0])
        return self.rc, self.out, self.err


def make_root(tmp_path, group_type="DMA-FQ", units=("dmar0", "dmar1"), cmdline="BOOT_IMAGE=/vmlinuz ro quiet intel_iommu=on",
              groups=True, hostname="gpu-node-07", osrelease="5.15.0-105-generic", absolute_links=False):
    root = tmp_path / "root"
    (root / "proc/sys/kernel").mkdir(parents=True)
    if hostname:
        (root / "proc/sys/kernel/hostname").write_text(hostname + "\n")
    if osrelease:
        (root / "proc/sys/kernel/osrelease").write_text(osrelease + "\n")
    if cmdline is not None:
        (root / "proc/cmdline").write_text(cmdline + "\n")
    (root / "sys/class").mkdir(parents=True)
    if units is not None:
        (root / "sys/class/iommu").mkdir()
        for u in units:
            (root / "sys/class/iommu" / u).mkdir()
    (root / "sys/bus/pci/devices").mkdir(parents=True)
    for n, (bdf, chain) in enumerate(sorted(CHAINS.items())):
        dev = root / "sys/devices" / chain
        dev.mkdir(parents=True)
        target = ("/sys/devices/" if absolute_links else "../../../devices/") + chain
        os.symlink(target, root / "sys/bus/pci/devices" / bdf)
        if groups:
            g = root / "sys/kernel/iommu_groups" / str(20 + n)
            (g / "devices").mkdir(parents=True)
            if group_type:
                (g / "type").write_text(group_type + "\n")
            os.symlink(f"../../../../../../kernel/iommu_groups/{20 + n}", dev / "iommu_group")
    return str(root)


# ----------------------------------------------------------------------------- pieces


def test_bus_key_normalises_nvml_and_lspci_forms():
    assert bus_key("00000000:8A:00.0") == "0000:8a:00.0"
    assert bus_key("0000:8a:00.0") == "0000:8a:00.0"
    assert bus_key("8a:00.0") == "0000:8a:00.0"
    assert bus_key("00000001:07:00.1") == "0001:07:00.1"
    with pytest.raises(ValueError):
        bus_key("GPU-1234")


def test_cmdline_flags():
    assert cmdline_iommu_flags("ro intel_iommu=on iommu=pt quiet") == {"intel_iommu": "on", "iommu": "pt"}
    assert cmdline_iommu_flags("amd_iommu=off iommu.passthrough=1") == {"amd_iommu": "off", "iommu.passthrough": "1"}


def test_parse_acs_controls():
    block = lspci_block("0000:02:08.0", ACS_ON)
    assert parse_acs_controls(block) == {"SrcValid": True, "TransBlk": False, "ReqRedir": True,
                                         "CmpltRedir": True, "UpstreamFwd": True, "EgressCtrl": False,
                                         "DirectTrans": False}
    assert parse_acs_controls(lspci_block("0000:02:08.0", None)) is None


def test_parse_lspci_blocks_with_and_without_domain():
    for domain in (True, False):
        blocks = parse_lspci_blocks(lspci_text({"0000:02:08.0": ACS_ON}, domain=domain))
        assert "0000:02:08.0" in blocks and "0000:87:00.0" in blocks
        assert "ACSCtl" in blocks["0000:02:08.0"] and "ACSCtl" not in blocks["0000:02:10.0"]


def test_upstream_bridges(tmp_path):
    root = make_root(tmp_path)
    assert upstream_bridges(root, GPU0) == ["0000:00:01.0", "0000:01:00.0", "0000:02:08.0"]
    assert upstream_bridges(root, GPU2) == ["0000:80:03.0"]
    assert upstream_bridges(root, "00000000:99:00.0") is None


def test_upstream_bridges_absolute_symlinks_stay_in_root(tmp_path):
    root = make_root(tmp_path, absolute_links=True)
    assert upstream_bridges(root, GPU1) == ["0000:00:01.0", "0000:01:00.0", "0000:02:10.0"]


# ----------------------------------------------------------------------------- IOMMU


def test_translated_from_gpu_group_type(tmp_path):
    mode, evidence = read_iommu(make_root(tmp_path), [GPU0, GPU1])
    assert mode == "translated"
    assert "kernel cmdline: intel_iommu=on" in evidence
    assert "/sys/class/iommu: dmar0, dmar1" in evidence
    assert "iommu groups of 2 GPU(s): type DMA-FQ (groups 20, 21)" in evidence


def test_passthrough_from_identity_groups(tmp_path):
    root = make_root(tmp_path, group_type="identity", cmdline="ro intel_iommu=on iommu=pt")
    mode, evidence = read_iommu(root, [GPU0])
    assert mode == "passthrough"
    assert "kernel cmdline: intel_iommu=on iommu=pt" in evidence


def test_all_groups_used_when_gpus_unknown(tmp_path):
    mode, evidence = read_iommu(make_root(tmp_path, group_type="DMA"), [])
    assert mode == "translated" and "iommu group types: DMA x3" in evidence


def test_no_iommu_is_off(tmp_path):
    root = make_root(tmp_path, units=None, groups=False, cmdline="ro quiet")
    mode, evidence = read_iommu(root, [GPU0])
    assert mode == "off"
    assert "/sys/class/iommu: empty (no IOMMU registered)" in evidence


def test_iommu_disabled_on_cmdline_is_off(tmp_path):
    root = make_root(tmp_path, units=(), groups=False, cmdline="ro intel_iommu=off")
    mode, evidence = read_iommu(root, [GPU0])
    assert mode == "off" and "kernel cmdline: intel_iommu=off" in evidence


def test_old_kernel_without_group_type_uses_cmdline(tmp_path):
    root = make_root(tmp_path, group_type=None, cmdline="ro amd_iommu=on iommu=pt")
    assert read_iommu(root, [GPU0])[0] == "passthrough"
    root2 = make_root(tmp_path / "b", group_type=None, cmdline="ro intel_iommu=on")
    assert read_iommu(root2, [GPU0])[0] == "translated"
    root3 = make_root(tmp_path / "c", group_type=None, cmdline="ro quiet")
    mode, _ = read_iommu(root3, [GPU0])
    assert isinstance(mode, NotAvailable) and "cannot be told" in mode.reason


def test_no_sysfs_is_not_available(tmp_path):
    (tmp_path / "proc").mkdir()
    mode, _ = read_iommu(str(tmp_path), [GPU0])
    assert isinstance(mode, NotAvailable) and "sysfs" in mode.reason


# ----------------------------------------------------------------------------- ACS


def test_acs_redirect_on_gpu_bridges(tmp_path):
    root = make_root(tmp_path)
    acs = {"0000:02:08.0": ACS_ON, "0000:02:10.0": ACS_ON, "0000:01:00.0": ACS_OFF}
    run = Runner(out=lspci_text(acs))
    info = read_host(root, run=run, gpu_bus_ids=[GPU0, GPU1, GPU2])
    bridges = {b.bdf: b for b in info.acs}
    assert set(bridges) == {"0000:00:01.0", "0000:01:00.0", "0000:02:08.0", "0000:02:10.0", "0000:80:03.0"}
    # one `lspci -vvv -D -s BDF` per bridge above the GPUs (issue 8), not a whole-machine listing
    assert run.calls == [["lspci", "-vvv", "-D", "-s", b] for b in sorted(bridges)]
    assert bridges["0000:02:08.0"].gpus == [GPU0] and bridges["0000:02:08.0"].redirects
    assert bridges["0000:01:00.0"].gpus == [GPU0, GPU1] and not bridges["0000:01:00.0"].redirects
    assert bridges["0000:80:03.0"].controls == {}  # root port without an ACS capability
    assert [b.bdf for b in info.acs if b.redirects] == ["0000:02:08.0", "0000:02:10.0"]
    assert info.hostname == "gpu-node-07" and info.kernel == "5.15.0-105-generic"
    assert info.iommu_mode == "translated"


def test_acs_access_denied_needs_root(tmp_path):
    info = read_host(make_root(tmp_path), run=Runner(out=lspci_text({}, denied=True)), gpu_bus_ids=[GPU0])
    assert isinstance(info.acs, NotAvailable) and "needs root" in info.acs.reason
    assert info.iommu_mode == "translated"  # the rest is still read


def test_acs_lspci_without_capabilities(tmp_path):
    out = "0000:02:08.0 PCI bridge: PLX Technology, Inc. PEX 8747\n0000:01:00.0 PCI bridge: PLX\n0000:00:01.0 PCI bridge: Intel\n"
    info = read_host(make_root(tmp_path), run=Runner(out=out), gpu_bus_ids=[GPU0])
    assert isinstance(info.acs, NotAvailable) and "root" in info.acs.reason


def test_no_lspci_binary(tmp_path):
    info = read_host(make_root(tmp_path), run=Runner(missing=True), gpu_bus_ids=[GPU0])
    assert isinstance(info.acs, NotAvailable) and "lspci not installed" in info.acs.reason
    info = read_host(make_root(tmp_path / "b"), run=Runner(rc=127, err="sh: lspci: not found"),
                     gpu_bus_ids=[GPU0])
    assert isinstance(info.acs, NotAvailable) and "lspci not installed" in info.acs.reason


def test_lspci_fails(tmp_path):
    info = read_host(make_root(tmp_path), run=Runner(rc=1, err="pcilib: Cannot open /sys/bus/pci"),
                     gpu_bus_ids=[GPU0])
    assert isinstance(info.acs, NotAvailable) and "Cannot open" in info.acs.reason


def test_gpus_not_in_sysfs(tmp_path):
    info = read_host(make_root(tmp_path), run=Runner(out=""), gpu_bus_ids=["00000000:99:00.0"])
    assert isinstance(info.acs, NotAvailable) and "not found" in info.acs.reason
    info = read_host(make_root(tmp_path / "b"), run=Runner(out=""), gpu_bus_ids=[])
    assert isinstance(info.acs, NotAvailable)


def test_empty_root_gives_reasons_not_crashes(tmp_path):
    info = read_host(str(tmp_path), run=Runner(missing=True), gpu_bus_ids=[GPU0])
    for v in (info.hostname, info.kernel, info.iommu_mode, info.acs):
        assert isinstance(v, NotAvailable) and v.reason


def test_acs_bridge_record():
    assert AcsBridge("0000:02:08.0", [GPU0], {"ReqRedir": False, "CmpltRedir": True}).redirects


# ----------------------------------------------------------------------------- running commands


@pytest.mark.slow
def test_default_run_missing_command():
    rc, out, err = default_run(["gputopo-no-such-command-xyz"])
    assert rc == 127 and "not found" in err


@pytest.mark.slow
def test_default_run_timeout(monkeypatch):
    monkeypatch.setattr(host_mod, "COMMAND_TIMEOUT_S", 0.2)
    rc, _, err = default_run(["sleep", "5"])
    assert rc == 124 and "timed out" in err


@pytest.mark.slow
def test_default_run_output():
    assert default_run(["echo", "hi"]) == (0, "hi\n", "")


def test_read_host_on_this_machine_is_quick():
    """The real host: never raises, whatever is installed; hostname and kernel are known."""
    import time

    t = time.perf_counter()
    info = read_host("/", gpu_bus_ids=[])
    assert time.perf_counter() - t < 3.0
    assert isinstance(info.hostname, str) and isinstance(info.kernel, str)
    assert info.iommu_mode in ("translated", "passthrough", "off") or isinstance(info.iommu_mode, NotAvailable)


def test_lspci_budget_scales_with_bridges_and_stops_when_spent(tmp_path, monkeypatch):
    """Each bridge is one short lspci call; when the budget (2 s + 0.5 s per bridge) is spent the
    rest is not asked, and what was read is kept."""
    import gputopo.probe.host as host_mod

    clock = [0.0]
    monkeypatch.setattr("time.monotonic", lambda: clock[0])
    acs = {"0000:02:08.0": ACS_ON, "0000:02:10.0": ACS_ON, "0000:01:00.0": ACS_OFF}
    text = lspci_text(acs)

    def slow_run(argv):
        clock[0] += 1.5  # every call takes 1.5 s
        return 0, text, ""

    got = host_mod._lspci_bridges(slow_run, sorted(acs) + ["0000:00:01.0"])
    # budget 2 + 4 x 0.5 = 4 s: calls at t=0, 1.5, 3.0 are made, the fourth (t=4.5) is not
    assert sorted(got) == sorted(acs)
    assert host_mod._lspci_bridges(lambda argv: (1, "", "pcilib: boom"), ["0000:01:00.0"]).reason \
        == "lspci failed (exit 1: pcilib: boom)"
