"""NIC rows and columns and GPU NUMA ID through `nvidia-smi topo -m` text, both ways; and the
text's values refused as the TOML loader refuses them (NV99, a CPU list `abc`, stray bytes)."""

from __future__ import annotations

import json

import pytest

from gputopo.errors import InputFileError
from gputopo.model import LinkClass, Nic, NotAvailable, topology_from_json, topology_to_json
from gputopo.probe.smi_format import format_topo_matrix
from gputopo.probe.smi import decode_smi_bytes, parse_topo_matrix, topology_from_smi
from helpers.cli import gputopo_here
from helpers.paths import FIXTURES

TOPO_DIR = FIXTURES / "topo"
NCCL1617 = TOPO_DIR / "nccl-1617_4xh100_nv6_nics.txt"
NCCL667 = TOPO_DIR / "nccl-667_4gpu_pxb_pix_sys.txt"
C = LinkClass.parse

#: A modern driver's output with a NIC Legend (tab form, as the driver writes it).
WITH_LEGEND = (
    "\tGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tNV18\tPIX\tSYS\t0-31\t0\t\tN/A\n"
    "GPU1\tNV18\t X \tSYS\tPXB\t32-63\t1\t\t3\n"
    "NIC0\tPIX\tSYS\t X \tSYS\n"
    "NIC1\tSYS\tPXB\tSYS\t X \n"
    + NCCL1617.read_text()[NCCL1617.read_text().index("\nLegend:"):]  # the driver's legend
    + "\n"
    "NIC Legend:\n"
    "\n"
    "  NIC0: mlx5_0\n"
    "  NIC1: mlx5_1\n"
)


def test_nics_are_kept_in_the_topology():
    topo = topology_from_smi(NCCL1617.read_text())
    assert [n.label for n in topo.nics] == ["NIC0", "NIC1", "NIC2", "NIC3"]
    for k, nic in enumerate(topo.nics):
        assert nic.gpu_classes == {g: C("PIX") if g == k else C("SYS") for g in range(4)}
        assert nic.nic_classes == {f"NIC{m}": C("SYS") for m in range(4) if m != k}
        assert isinstance(nic.device, NotAvailable)  # this post has no NIC Legend
    assert all(str(g.gpu_memory_numa_node) == "n/a" for g in topo.gpus)


def test_nic_legend_and_gpu_numa_id_round_trip_exactly():
    topo = topology_from_smi(WITH_LEGEND)
    assert [n.device for n in topo.nics] == ["mlx5_0", "mlx5_1"]
    assert topo.nics[1].gpu_classes == {0: C("SYS"), 1: C("PXB")}
    assert [g.gpu_memory_numa_node for g in topo.gpus][1] == 3
    assert format_topo_matrix(topo) == WITH_LEGEND


def test_no_gpu_numa_id_column_when_the_text_had_none():
    text = NCCL667.read_text()
    assert "GPU NUMA ID" not in text
    assert format_topo_matrix(topology_from_smi(text)) == text


def test_old_driver_nic_named_after_its_device():
    text = ("\tGPU0\tGPU1\tmlx5_0\tCPU Affinity\n"
            "GPU0\t X \tPIX\tPHB\t0-9\n"
            "GPU1\tPIX\t X \tPHB\t0-9\n"
            "mlx5_0\tPHB\tPHB\t X \n")
    topo = topology_from_smi(text)
    assert topo.nics[0].label == topo.nics[0].device == "mlx5_0"
    assert format_topo_matrix(topo).startswith(text)
    assert "NIC Legend" not in format_topo_matrix(topo)


def test_nics_in_json_both_ways():
    topo = topology_from_smi(WITH_LEGEND)
    doc = json.loads(json.dumps(topology_to_json(topo)))
    assert doc["nics"][0]["label"] == "NIC0" and doc["nics"][0]["device"] == "mlx5_0"
    assert doc["nics"][1]["gpu_link_classes"] == [{"gpu": 0, "link_class": "SYS"},
                                                  {"gpu": 1, "link_class": "PXB"}]
    assert doc["nics"][0]["nic_link_classes"] == [{"nic": "NIC1", "link_class": "SYS"}]
    back = topology_from_json(doc)
    assert back.nics == topo.nics
    assert format_topo_matrix(back) == WITH_LEGEND
    del doc["nics"]  # a document written before NICs were read
    assert topology_from_json(doc).nics == []


def test_format_refuses_a_nic_without_a_class_to_some_gpu():
    topo = topology_from_smi(WITH_LEGEND)
    topo.nics = [Nic(label="NIC0", gpu_classes={0: C("PIX")})]
    with pytest.raises(ValueError, match="no class between NIC0 and GPU1"):
        format_topo_matrix(topo)


# ----------------------------------------------------------------------------- refused input


def raises(text, line, match):
    with pytest.raises(InputFileError, match=match) as info:
        parse_topo_matrix(text, "t.txt")
    assert info.value.line == line, str(info.value)
    return str(info.value)


@pytest.mark.parametrize("old,new,line,match", [
    ("GPU0\t X \tNV18", "GPU0\t X \tNV99", 2, r"'NV99' in row GPU0, column GPU1 is no NVLink count .*NV36"),
    ("\t0-31\t0\t", "\tabc\t0\t", 2, r"CPU Affinity of GPU0 is 'abc': expected a CPU list"),
    ("\t32-63\t1\t", "\t32-63\tx1\t", 3, r"NUMA Affinity of GPU1 is 'x1'"),
    ("\t\t3\n", "\t\tthree\n", 3, r"GPU NUMA ID of GPU1 is 'three'"),
    ("NIC1\tSYS\tPXB\tSYS\t X \n", "", 5, r"no row for NIC1"),
])
def test_bad_values_are_refused_with_their_line(old, new, line, match):
    assert WITH_LEGEND.count(old) == 1
    raises(WITH_LEGEND.replace(old, new), line, match)


def test_nvlink_between_gpu_and_nic_is_refused():
    text = WITH_LEGEND.replace("GPU0\t X \tNV18\tPIX", "GPU0\t X \tNV18\tNV2").replace(
        "NIC0\tPIX", "NIC0\tNV2")
    raises(text, 2, r"NV2 between GPU0 and NIC NIC0: .*PCIe class")


def test_nv0_and_huge_nvlink_counts_are_refused():
    raises(WITH_LEGEND.replace("NV18", "NV0"), 2, "'NV0' in row GPU0, column GPU1 is no NVLink count")
    with pytest.raises(ValueError, match="at most 36 NVLinks"):
        C("NV37")
    assert C("NV36") == LinkClass("NV", 36)


def test_a_non_utf8_byte_shows_as_its_escape_never_raw():
    data = WITH_LEGEND.replace("NV18", "NV\udcff8", 1).encode("utf-8", "surrogateescape")
    assert b"NV\xff8" in data
    msg = raises(decode_smi_bytes(data), 2, "is no NVLink count|unknown link class")
    assert "'NV\\xff8'" in msg and "\ufffd" not in msg
    header = b"\tGPU0\tGPU\xff1\nGPU0\t X \tNV4\n"
    msg = raises(decode_smi_bytes(header), 1, "neither a GPU")
    assert "'GPU\\xff1'" in msg


def test_cli_refuses_bad_bytes_in_one_ascii_line(tmp_path):
    path = tmp_path / "topo.txt"
    path.write_bytes(NCCL1617.read_bytes().replace(b"6,14,22,30", b"6,14\xff,22"))
    proc = gputopo_here("scan", "--from-smi", path, text=False)
    assert proc.returncode == 2
    err = proc.stderr.decode("ascii")  # nothing but ASCII: the byte is shown as \xff
    assert err.count("\n") == 1 and err.startswith("gputopo: error: ")
    assert ":2: CPU Affinity of GPU0 is '6,14\\xff,22'" in err


@pytest.mark.parametrize("old,new,match", [
    ("  NIC1: mlx5_1\n", "  NIC9: mlx5_1\n", r"NIC Legend names 'NIC9', which is no NIC column .*NIC0, NIC1"),
    ("  NIC1: mlx5_1\n", "  NIC0: mlx5_1\n", r"NIC0 is in the NIC Legend twice"),
    ("  NIC1: mlx5_1\n", "  NIC1: [red]x[/red]\n", r"'\[red\]x\[/red\]' is no device name"),
])
def test_bad_nic_legend_entries_are_refused(old, new, match):
    text = WITH_LEGEND.replace(old, new)
    raises(text, text.split("\n").index(new.rstrip("\n")) + 1, match)


def test_control_characters_in_a_message_are_escaped():
    msg = raises(WITH_LEGEND.replace("NIC1\tSYS\tPXB", "NI\x07C1\tSYS\tPXB", 1), 5,
                 r"row NI\\x07C1 is not a column of the header")
    assert "\x07" not in msg
