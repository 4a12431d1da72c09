"""gputopo.model.bus_id: each source's spelling of a PCI address decoded into one key.

Spellings come from the real outputs in tests/fixtures/ (sources in its README.md) where one
holds them; nvidia-smi's from tests/fake_nvidia_smi/ (written in nvidia-smi's documented layout).
"""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from gputopo.model.bus_id import (BDF_RE, BusOnly, PciAddress, as_address, bus_key, device_text, from_nccl,
                                  from_nccl_tests, from_nvbandwidth, from_p2pbw, from_torch, from_xid,
                                  short_bus_id, table_bus_id, try_bus_key, try_parse)
from helpers.paths import TESTS

FIX = TESTS / "fixtures"
B4 = PciAddress(0, 0xB4, 0, 0)


def test_nvml_sysfs_lspci_and_old_tools_spell_one_address():
    assert PciAddress.parse("00000000:B4:00.0") == B4  # NVML / nvidia-smi
    assert PciAddress.parse("0000:b4:00.0") == B4  # sysfs, lspci -D
    assert PciAddress.parse("b4:00.0") == B4  # lspci without -D, old tools
    assert PciAddress.parse(" 0000:B4:00.0\n") == B4
    assert PciAddress.parse("00000001:07:1f.3") == PciAddress(1, 7, 0x1F, 3)
    assert B4.nvml == "00000000:B4:00.0" and B4.lspci == "0000:b4:00.0" and B4.short == "b4:00.0"
    assert B4.device_text == "0000:b4:00" and B4.nvml_device == "00000000:B4:00"
    assert bus_key("00000000:8A:00.0") == "0000:8a:00.0" and try_bus_key("8a:00.0") == "0000:8a:00.0"
    big = PciAddress.parse("00010000:e0:00.0")  # a VMD domain: five digits, none lost
    assert big.lspci == "10000:e0:00.0" and big.nvml == "00010000:E0:00.0"


@pytest.mark.parametrize("text", ["GPU-1234", "0000:b4:00", "0000:b4:20.0", "0000:b4:00.8", "b4", "",
                                  "0000:g4:00.0", "000000000:b4:00.0"])
def test_text_that_is_no_full_address_is_refused(text):
    with pytest.raises(ValueError, match="not a PCI address"):
        PciAddress.parse(text)
    assert try_parse(text) is None and try_bus_key(text) is None


def test_values_that_are_not_text_are_no_address():
    class NotAvailable:
        def __str__(self):
            return "00000000:B4:00.0"  # even when it prints like one

    assert try_parse(NotAvailable()) is None and try_bus_key(None) is None and try_parse(0xB4) is None


def test_nvidia_smi_bus_ids():
    fields = json.loads((TESTS / "fake_nvidia_smi/h100-sxm-1gpu/fields.json").read_text())
    printed = fields["gpus"][0]["pci.bus_id"][0]
    xml = (TESTS / "fake_nvidia_smi/h100-sxm-1gpu/q.xml").read_text()
    in_xml = re.search(r"<pci_bus_id>(.*?)</pci_bus_id>", xml).group(1)
    summary = re.search(r"\|\s+(\S+:\S+:\S+)\s+Off", (TESTS / "fake_nvidia_smi/h100-sxm-1gpu/smi.txt").read_text())
    assert PciAddress.parse(printed) == PciAddress.parse(in_xml) == PciAddress.parse(summary.group(1)) \
        == PciAddress(0, 0, 5, 0)


def test_nccl_packed_bus_ids_of_real_logs():
    """Every busId and bracket token of the NCCL logs in tests/fixtures decodes to an address
    whose packed form is the token (p4d's ``201d0`` is 0000:20:1d.0, not device 0)."""
    tokens = set()
    for f in (FIX / "nccl-debug").iterdir():
        text = f.read_text(errors="replace")
        # a whole token only: the Ray log cuts one line mid-id ("busId 4INFO ...")
        tokens |= set(re.findall(r"busId ((?:0x)?[0-9a-fA-F]+)(?=\s|$)", text, re.M))
        tokens |= set(re.findall(r"\d+\[([0-9a-fA-F]{4,})\]", text))
    assert {"201d0", "901c0", "1b000"} <= tokens
    for tok in tokens:
        a = from_nccl(tok)
        assert a is not None and (a.domain << 20 | a.bus << 12 | a.device << 4 | a.function) == int(tok, 16), tok
    assert from_nccl("201d0") == PciAddress(0, 0x20, 0x1D, 0) and from_nccl("201d0").lspci == "0000:20:1d.0"
    assert from_nccl("4a000").lspci == "0000:4a:00.0"


def test_nccl_odd_forms():
    # Azure ND96asr_v4: "cudaDev 0 nvmlDev 0 busId 100000" (surajssd/llm-k8s @8a7fbb96, a vLLM + Ray log)
    assert from_nccl("100000") == PciAddress(1, 0, 0, 0)
    # NCCL 2.27 MNNVL lines: "NCCL INFO MNNVL busId 0xab000 fabric UUID ..." (devopsrustem/slurmv4 @e95c7d7c)
    assert from_nccl("0xab000") == PciAddress(0, 0xAB, 0, 0) == from_nccl("ab000")
    # GH200 style domains: "busId 1901000" = 0019:01:00.0
    assert from_nccl("1901000").lspci == "0019:01:00.0"
    # a bracket holding NCCL's device number, not a bus id ("0[0]", "3[3]"), and junk
    assert from_nccl("0") is None and from_nccl("3") is None and from_nccl("12") is None
    assert from_nccl("zz000") is None and from_nccl("") is None


def test_nccl_tests_rank_lines_of_real_logs():
    ranks = {}
    for f in (FIX / "nccl-tests").iterdir():
        for m in re.finditer(r"Rank\s+(\d+) .*? device\s+\d+ \[([^\]]+)\]", f.read_text()):
            ranks[(f.name, int(m.group(1)))] = m.group(2)
    new = ranks[("autodl_2x2080ti_all_reduce.txt", 0)]
    assert new == "0000:b4:00" and from_nccl_tests(new) == B4
    # older nccl-tests print the bus only: p4d's GPUs 0 and 1 both print 0x10 (they are 10:1c and
    # 10:1d, as the NCCL logs' 101c0 / 101d0 say): the device is unknown, never assumed known
    old = [ranks[("aws-efa-eks_p4d-2node-16gpu_all_reduce_tagoutput.txt", r)] for r in (0, 1)]
    assert old == ["0x10", "0x10"]
    a, b = (from_nccl_tests(t) for t in old)
    assert a == b == BusOnly(0x10) and isinstance(a, BusOnly)
    assert "device" in a.unknown and "domain" in a.unknown
    assert a.assumed == PciAddress(0, 0x10, 0, 0) and as_address(a).nvml == "00000000:10:00.0"
    assert from_nccl_tests("0000:b4:00.0") == B4 and from_nccl_tests("weird") is None
    assert from_nccl_tests("0x") is None and from_nccl_tests("0x1b0") is None


def test_nvbandwidth_device_lines():
    printed = [m.group(1) for f in (FIX / "nvbandwidth").glob("*.txt")
               for m in re.finditer(r"^Device \d+: .*\((\S+)\)$", f.read_text(), re.M)]
    assert "00000000:99:00" in printed
    assert all(from_nvbandwidth(p) is not None for p in printed)
    assert from_nvbandwidth("00000000:99:00") == PciAddress(0, 0x99, 0, 0)
    assert from_nvbandwidth("00000008:06:00").nvml == "00000008:06:00.0"
    assert from_nvbandwidth("NVIDIA GeForce RTX 4090") is None and from_nvbandwidth("99") is None


def test_p2pbw_device_lines():
    lines = re.findall(r"pciBusID: (\w+), pciDeviceID: (\w+), pciDomainID:(\w+)",
                       (FIX / "p2pbw/stelline_asus-esc8000a_4xrtx6000ada.txt").read_text())
    got = [from_p2pbw(bus, dev, dom) for bus, dev, dom in lines]
    assert [a.nvml for a in got] == ["00000000:01:00.0", "00000000:41:00.0", "00000000:C1:00.0", "00000000:E1:00.0"]
    # the bus alone (a bare "99"): what it does not say is said
    bare = from_p2pbw("99")
    assert bare == BusOnly(0x99) and as_address(bare).nvml == "00000000:99:00.0"
    assert from_p2pbw("c1", "0", "1") == PciAddress(1, 0xC1, 0, 0)
    assert from_p2pbw("zz") is None and from_p2pbw("100") is None and from_p2pbw("1", "20", "0") is None


def test_kernel_log_spellings_of_real_logs():
    spelled = set()
    for f in (FIX / "xid").iterdir():
        spelled |= set(re.findall(r"NVRM: .*?((?:PCI:)?[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)",
                                  f.read_text(errors="replace")))
    assert {"PCI:0000:01:00", "PCI:0019:01:00", "0000:b3:00.0"} <= spelled
    assert all(from_xid(s) is not None for s in spelled)
    assert from_xid("PCI:0000:01:00") == PciAddress(0, 1, 0, 0)
    assert from_xid("PCI:0019:01:00").device_text == "0019:01:00"
    assert from_xid("0000:b3:00.0") == PciAddress(0, 0xB3, 0, 0) == from_xid("00000000:B3:00.0")
    assert from_xid("GPU-3b6ec030") is None and from_xid("PCI:") is None


def test_torch_device_properties():
    props = SimpleNamespace(pci_domain_id=0, pci_bus_id=0xB4, pci_device_id=0, name="NVIDIA H100")
    assert from_torch(props) == B4
    assert from_torch(SimpleNamespace(pci_bus_id=0xB4, pci_device_id=0)) == B4  # no domain: 0
    assert from_torch(SimpleNamespace(pci_domain_id=0, pci_bus_id=0xB4)) is None
    assert from_torch(SimpleNamespace(pci_domain_id=0, pci_bus_id=-1, pci_device_id=0)) is None


def test_one_gpu_spelled_by_every_source_is_one_key():
    """p4d GPU 0 (0000:10:1c.0) as each tool names it."""
    want = PciAddress(0, 0x10, 0x1C, 0)
    spellings = [PciAddress.parse("00000000:10:1C.0"), PciAddress.parse("0000:10:1c.0"),
                 PciAddress.parse("10:1c.0"), from_nccl("101c0"), from_nccl("0x101c0"),
                 from_nccl_tests("0000:10:1c"), from_nvbandwidth("00000000:10:1c"),
                 from_p2pbw("10", "1c", "0"), from_xid("PCI:0000:10:1c"),
                 from_torch(SimpleNamespace(pci_domain_id=0, pci_bus_id=0x10, pci_device_id=0x1C))]
    assert spellings == [want] * len(spellings)
    assert len({a.lspci for a in spellings}) == 1 and len({hash(a) for a in spellings}) == 1


def test_order_is_pci_enumeration_order():
    ids = ["00000000:B4:00.0", "00000000:1B:00.0", "00000001:07:00.0", "00000000:1B:00.1"]
    assert [a.nvml for a in sorted(PciAddress.parse(i) for i in ids)] == [
        "00000000:1B:00.0", "00000000:1B:00.1", "00000000:B4:00.0", "00000001:07:00.0"]


def test_display_forms():
    assert short_bus_id("00000000:07:00.0") == short_bus_id("0000:07:00.0") == short_bus_id("07:00.0") == "07:00.0"
    assert short_bus_id("00000000:1A:00.0") == "1a:00.0"
    assert short_bus_id("0000:3B:00") == "3b:00" and short_bus_id("N/A") == "n/a"
    assert table_bus_id("00000000:1A:00.0") == "0000:1a:00.0" and table_bus_id("n/a") == "n/a"
    assert device_text((0x19, 1, 0)) == "0019:01:00"


def test_sysfs_name_pattern_is_strict():
    assert BDF_RE.match("0000:07:00.0") and BDF_RE.match("00000000:07:00.0")
    assert not BDF_RE.match("07:00.0") and not BDF_RE.match("pci0000:00") and not BDF_RE.match("0000:7:00.0")
