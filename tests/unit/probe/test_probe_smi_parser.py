"""Parsing `nvidia-smi topo -m` / `topo -p2p` text: real outputs, the ways people paste them,
and malformed input that must fail with the right line number."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from gputopo.errors import InputFileError, UsageError
from gputopo.model import LinkClass, NotAvailable
from gputopo.probe.smi import (decode_smi_bytes, detect_smi_kind, parse_p2p_matrix,
                               parse_topo_matrix, split_smi_sections, topology_from_smi,
                               topology_from_smi_file_text)
from helpers.paths import FIXTURES

#: Real nvidia-smi outputs kept in the repository (sources in tests/fixtures/README.md).
TOPO_DIR = FIXTURES / "topo"

SEED = "seed-8gpu-nv4-pairs.txt"
NCCL667 = "nccl-667_4gpu_pxb_pix_sys.txt"
NCCL1617 = "nccl-1617_4xh100_nv6_nics.txt"
AUTODL = "autodl_2x2080ti_pix.txt"
AUTODL_P2P = "autodl_2x2080ti_p2p_p.txt"
TOPO_FIXTURES = [SEED, NCCL667, NCCL1617, AUTODL]


def fixture(name: str) -> str:
    return (TOPO_DIR / name).read_text()


def C(name: str) -> LinkClass:
    return LinkClass.parse(name)


def classes(**by_pair: str):
    """classes(p0_1="NV4", ...) -> {(0, 1): LinkClass('NV', 4), ...}"""
    out = {}
    for key, name in by_pair.items():
        i, j = key[1:].split("_")
        out[(int(i), int(j))] = C(name)
    return out


# Expected classes, written out pair by pair.
EXPECTED_CLASSES = {
    SEED: classes(
        p0_1="NV4", p0_2="NODE", p0_3="NODE", p0_4="SYS", p0_5="SYS", p0_6="SYS", p0_7="SYS",
        p1_2="NODE", p1_3="NODE", p1_4="SYS", p1_5="SYS", p1_6="SYS", p1_7="SYS",
        p2_3="NV4", p2_4="SYS", p2_5="SYS", p2_6="SYS", p2_7="SYS",
        p3_4="SYS", p3_5="SYS", p3_6="SYS", p3_7="SYS",
        p4_5="NV4", p4_6="NODE", p4_7="NODE",
        p5_6="NODE", p5_7="NODE",
        p6_7="NV4",
    ),
    NCCL667: classes(p0_1="PXB", p0_2="SYS", p0_3="SYS", p1_2="SYS", p1_3="SYS", p2_3="PIX"),
    NCCL1617: classes(p0_1="NV6", p0_2="NV6", p0_3="NV6", p1_2="NV6", p1_3="NV6", p2_3="NV6"),
    AUTODL: classes(p0_1="PIX"),
}
EXPECTED_CPU = {
    SEED: {0: "0-31", 1: "0-31", 2: "0-31", 3: "0-31", 4: "32-63", 5: "32-63", 6: "32-63", 7: "32-63"},
    NCCL667: {0: "0-27,56-83", 1: "0-27,56-83", 2: "28-55,84-111", 3: "28-55,84-111"},
    NCCL1617: {0: "6,14,22,30", 1: "4,12,20,28", 2: "7,15,23,31", 3: "5,13,21,29"},
    AUTODL: {0: "24-47,72-95", 1: "24-47,72-95"},
}
EXPECTED_NUMA = {
    SEED: {0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 1, 7: 1},
    NCCL667: {0: 0, 1: 0, 2: 1, 3: 1},
    NCCL1617: {0: 3, 1: 1, 2: 7, 3: 5},
    AUTODL: {0: 1, 1: 1},
}
EXPECTED_COLUMNS = {
    SEED: ["CPU Affinity", "NUMA Affinity"],
    NCCL667: ["CPU Affinity", "NUMA Affinity"],
    NCCL1617: ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"],
    AUTODL: ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"],
}
NICS_1617 = ["NIC0", "NIC1", "NIC2", "NIC3"]
#: nccl-1617: each GPU is PIX to the NIC of its own number (the "diagonal"), SYS to the rest.
EXPECTED_NIC_CLASSES_1617 = {
    (g, f"NIC{n}"): C("PIX") if g == n else C("SYS") for g in range(4) for n in range(4)
}


def summary(m):
    """What must survive every variant of a text."""
    return (m.gpu_count, m.classes, m.cpu_affinity, m.numa_affinity, m.gpu_numa_id, m.nics,
            m.nic_classes)


def raises_at(text: str, line, match: str = "", parse=parse_topo_matrix):
    with pytest.raises(InputFileError, match=match) as info:
        parse(text, "t.txt")
    assert info.value.line == line, str(info.value)
    assert info.value.path == "t.txt"
    assert str(info.value).startswith("t.txt" + (f":{line}" if line is not None else ""))
    return info.value


# ----------------------------------------------------------------------------- the fixtures


@pytest.mark.parametrize("name", TOPO_FIXTURES)
def test_fixture_classes(name):
    m = parse_topo_matrix(fixture(name), name)
    assert m.classes == EXPECTED_CLASSES[name]
    n = {SEED: 8, NCCL667: 4, NCCL1617: 4, AUTODL: 2}[name]
    assert m.gpu_count == n
    assert m.gpu_labels == [f"GPU{i}" for i in range(n)]
    assert m.gpu_indices == list(range(n))
    assert m.cpu_affinity == EXPECTED_CPU[name]
    assert m.numa_affinity == EXPECTED_NUMA[name]
    assert m.gpu_numa_id == {i: None for i in range(n)}  # absent, or N/A
    assert m.columns == EXPECTED_COLUMNS[name]
    assert m.legend_present
    assert m.header_line == 1
    assert m.gpu_lines == {i: i + 2 for i in range(n)}


def test_fixture_seed_story_pairs():
    m = parse_topo_matrix(fixture(SEED))
    assert [p for p, c in m.classes.items() if c.is_nvlink] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert m.link_class(6, 5) == C("NODE") and m.link_class(5, 6) == C("NODE")
    assert m.link_class(3, 4) == C("SYS")


def test_fixture_nccl1617_nics():
    m = parse_topo_matrix(fixture(NCCL1617))
    assert m.nics == NICS_1617
    assert m.nic_classes == EXPECTED_NIC_CLASSES_1617
    assert all(c == C("NV6") and c.nvlinks == 6 for c in m.classes.values())


def test_fixture_p2p_matrix():
    assert parse_p2p_matrix(fixture(AUTODL_P2P), AUTODL_P2P) == {(0, 1): "NS", (1, 0): "NS"}


@pytest.mark.parametrize("name,kind", [(SEED, "topo"), (NCCL667, "topo"), (NCCL1617, "topo"),
                                       (AUTODL, "topo"), (AUTODL_P2P, "p2p")])
def test_detect_kind_of_fixtures(name, kind):
    assert detect_smi_kind(fixture(name)) == kind


def test_detect_kind_neither():
    assert detect_smi_kind("") is None
    assert detect_smi_kind("hello\nworld\n") is None


STELLINE = "stelline_asus-esc8000a_4xrtx6000ada_amd_nics.txt"


def test_fixture_stelline_amd_nics():
    """4x RTX 6000 Ada on an AMD host (the machine of the p2pbw import fixture): NODE within a
    socket, SYS across, 4 NICs PIX in pairs, spaces instead of tabs."""
    m = parse_topo_matrix(fixture(STELLINE), STELLINE)
    assert m.gpu_count == 4 and m.gpu_indices == [0, 1, 2, 3]
    assert m.classes == classes(p0_1="NODE", p0_2="SYS", p0_3="SYS", p1_2="SYS", p1_3="SYS", p2_3="NODE")
    assert m.cpu_affinity == {0: "0-31", 1: "0-31", 2: "32-63", 3: "32-63"}
    assert m.nics == ["NIC0", "NIC1", "NIC2", "NIC3"]
    assert m.nic_classes[(0, "NIC0")] == C("NODE") and m.nic_classes[(2, "NIC2")] == C("NODE")
    assert m.nic_classes[(0, "NIC2")] == C("SYS")


def test_every_topo_fixture_file_is_covered():
    """A fixture added to tests/fixtures/ without expectations here should be noticed."""
    names = {p.name for p in TOPO_DIR.glob("*.txt")}
    from test_probe_smi_posted import POSTED

    assert names == set(TOPO_FIXTURES) | {AUTODL_P2P, STELLINE} | set(POSTED)


# ----------------------------------------------------------------------------- pasted variants


def _tabs_to_spaces(t):
    return "\n".join(line.expandtabs(8) for line in t.split("\n"))


def _soc(t):
    return re.sub(r"\bSYS\b", "SOC", t)


def _no_legend(t):
    return t[: t.index("\nLegend:")] + "\n"


def _crlf(t):
    return t.replace("\n", "\r\n")


def _trailing_spaces(t):
    return "\n".join(line + "   " for line in t.split("\n"))


def _trailing_tabs(t):
    return "\n".join(line + "\t" if line.startswith("GPU") else line for line in t.split("\n"))


def _stripped_trailing(t):
    return "\n".join(line.rstrip() for line in t.split("\n"))


def _leading_blank(t):
    return "\n\n" + t


def _ansi_header(t):
    first, rest = t.split("\n", 1)
    lead = len(first) - len(first.lstrip())
    return first[:lead] + "\x1b[4m" + first[lead:] + "\x1b[0m\n" + rest


def _collapsed(t):
    """Markdown renderers and chat clients squeeze every run of whitespace to one space."""
    return "\n".join(re.sub(r"[ \t]+", " ", line).strip() for line in t.split("\n"))


def _pasted_with_prompt(t):
    return "```\n$ nvidia-smi topo -m\n" + t + "```\n"


def _bom_nbsp(t):
    return "\ufeff" + t.replace("    ", "\xa0   ")


def _no_trailing_newline(t):
    return t.rstrip("\n")


def _blank_lines_between_rows(t):
    head, legend = t.split("\nLegend:", 1)
    return head.rstrip("\n").replace("\n", "\n\n") + "\n\nLegend:" + legend


VARIANTS = {
    "tabs-to-spaces": _tabs_to_spaces,
    "SOC": _soc,
    "no-legend": _no_legend,
    "CRLF": _crlf,
    "trailing-spaces": _trailing_spaces,
    "trailing-tabs": _trailing_tabs,
    "trimmed": _stripped_trailing,
    "leading-blank": _leading_blank,
    "ansi-header": _ansi_header,
    "collapsed-spaces": _collapsed,
    "prompt-and-fence": _pasted_with_prompt,
    "bom-nbsp": _bom_nbsp,
    "no-final-newline": _no_trailing_newline,
    "double-spaced-rows": _blank_lines_between_rows,
    "spaces+SOC+CRLF": lambda t: _crlf(_soc(_tabs_to_spaces(t))),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("name", TOPO_FIXTURES)
def test_variants_parse_the_same(name, variant):
    text = fixture(name)
    want = parse_topo_matrix(text)
    got = parse_topo_matrix(VARIANTS[variant](text), f"{name}[{variant}]")
    assert summary(got) == summary(want)
    assert got.columns == want.columns
    assert got.legend_present == (variant != "no-legend")


def test_soc_is_sys():
    m = parse_topo_matrix(_soc(fixture(NCCL667)))
    assert m.classes[(0, 2)] == C("SYS") and str(m.classes[(0, 2)]) == "SYS"


def test_crlf_keeps_line_numbers():
    bad = fixture(NCCL667).replace("GPU2\tSYS\tSYS\t X \tPIX", "GPU2\tSYS\tSYS\t X \tNVX")
    raises_at(_crlf(bad), 4, "unknown link class 'NVX'")
    raises_at(_leading_blank(bad), 6, "NVX")


# ----------------------------------------------------------------------------- empty cells, N/A


def test_empty_cpu_affinity_cell_tabs():
    text = fixture(SEED).replace("GPU0\t X \tNV4\tNODE\tNODE\tSYS\tSYS\tSYS\tSYS\t0-31\t0",
                                 "GPU0\t X \tNV4\tNODE\tNODE\tSYS\tSYS\tSYS\tSYS\t\t0")
    m = parse_topo_matrix(text)
    assert m.cpu_affinity[0] is None and m.numa_affinity[0] == 0
    assert m.cpu_affinity[1] == "0-31"


def test_empty_numa_cell_tabs():
    text = fixture(NCCL667).replace("PIX\t28-55,84-111\t1", "PIX\t28-55,84-111\t")
    m = parse_topo_matrix(text)
    assert m.numa_affinity[2] is None and m.cpu_affinity[2] == "28-55,84-111"


def test_empty_cpu_affinity_cell_spaces():
    """Space-aligned text: the blank where the affinity was must not pull the NUMA value left."""
    text = fixture(NCCL1617)
    assert "6,14,22,30" in text
    m = parse_topo_matrix(text.replace("6,14,22,30", " " * len("6,14,22,30")))
    assert m.cpu_affinity[0] is None
    assert m.numa_affinity[0] == 3
    assert m.gpu_numa_id[0] is None
    assert m.cpu_affinity[1] == "4,12,20,28" and m.numa_affinity[1] == 1


def test_empty_numa_cell_spaces():
    text = fixture(AUTODL)
    line = "GPU1    PIX      X      24-47,72-95     1               N/A"
    assert line in text
    m = parse_topo_matrix(text.replace(line, line.replace("     1   ", "         ")))
    assert m.numa_affinity == {0: 1, 1: None}
    assert m.cpu_affinity[1] == "24-47,72-95"


def test_na_values():
    text = fixture(NCCL667).replace("\t0-27,56-83\t0\n", "\tN/A\tN/A\n", 1)
    m = parse_topo_matrix(text)
    assert m.cpu_affinity[0] is None and m.numa_affinity[0] is None
    assert m.cpu_affinity[1] == "0-27,56-83"


# Modern driver output as it comes out of a pipe: underlined header, NUMA affinity followed by
# two tabs so that GPU NUMA ID lines up, NIC rows ending in empty tabs, and a NIC legend.
MODERN = (
    "\t\x1b[4mGPU0\tGPU1\tGPU2\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tNV18\tNV18\tPXB\tSYS\t0-31,64-95\t0\t\tN/A\n"
    "GPU1\tNV18\t X \tNV18\tSYS\tPXB\t32-63,96-127\t1\t\tN/A\n"
    "GPU2\tNV18\tNV18\t X \tSYS\tPXB\t32-63,96-127\t1\t\t2\n"
    "NIC0\tPXB\tSYS\tSYS\t X \tSYS\t\t\t\t\n"
    "NIC1\tSYS\tPXB\tPXB\tSYS\t X \t\t\t\t\n"
    "\n"
    "Legend:\n"
    "\n"
    "  X    = Self\n"
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)\n"
    "  NV#  = Connection traversing a bonded set of # NVLinks\n"
    "\n"
    "NIC Legend:\n"
    "\n"
    "  NIC0: mlx5_0\n"
    "  NIC1: mlx5_bond_0\n"
)


def test_modern_driver_output():
    m = parse_topo_matrix(MODERN)
    assert m.classes == classes(p0_1="NV18", p0_2="NV18", p1_2="NV18")
    assert m.cpu_affinity == {0: "0-31,64-95", 1: "32-63,96-127", 2: "32-63,96-127"}
    assert m.numa_affinity == {0: 0, 1: 1, 2: 1}
    assert m.gpu_numa_id == {0: None, 1: None, 2: 2}
    assert m.nics == ["NIC0", "NIC1"]
    assert m.nic_classes == {(0, "NIC0"): C("PXB"), (0, "NIC1"): C("SYS"), (1, "NIC0"): C("SYS"),
                             (1, "NIC1"): C("PXB"), (2, "NIC0"): C("SYS"), (2, "NIC1"): C("PXB")}
    assert m.nic_devices == {"NIC0": "mlx5_0", "NIC1": "mlx5_bond_0"}
    assert m.legend_present


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_modern_driver_output_variants(variant):
    assert summary(parse_topo_matrix(VARIANTS[variant](MODERN))) == summary(parse_topo_matrix(MODERN))


def _no_ansi(t):
    return re.sub(r"\x1b\[[0-9;]*m", "", t)


def test_modern_padding_with_empty_cells():
    """"0\\t\\tN/A" is padding; with a cell really empty the others must stay in place."""
    empty_cpu = MODERN.replace("\t0-31,64-95\t0\t\tN/A", "\t\t0\t\tN/A")
    m = parse_topo_matrix(empty_cpu)
    assert (m.cpu_affinity[0], m.numa_affinity[0], m.gpu_numa_id[0]) == (None, 0, None)
    empty_numa = MODERN.replace("\t32-63,96-127\t1\t\t2", "\t32-63,96-127\t\t\t2")
    m = parse_topo_matrix(empty_numa)
    assert (m.cpu_affinity[2], m.numa_affinity[2], m.gpu_numa_id[2]) == ("32-63,96-127", None, 2)
    # As copied from a terminal: tabs shown as spaces (and no escapes, which take no room).
    m = parse_topo_matrix(_tabs_to_spaces(_no_ansi(empty_cpu)))
    assert (m.cpu_affinity[0], m.numa_affinity[0], m.gpu_numa_id[0]) == (None, 0, None)
    m = parse_topo_matrix(_tabs_to_spaces(_no_ansi(empty_numa)))
    assert (m.cpu_affinity[2], m.numa_affinity[2], m.gpu_numa_id[2]) == ("32-63,96-127", None, 2)


# An old driver: SOC, a NIC column named after its device, CPU Affinity only, NIC row without
# affinity, the old legend wording.
OLD = (
    "\tGPU0\tGPU1\tGPU2\tGPU3\tmlx5_0\tCPU Affinity\n"
    "GPU0\t X \tPIX\tSOC\tSOC\tPHB\t0-9,20-29\n"
    "GPU1\tPIX\t X \tSOC\tSOC\tPHB\t0-9,20-29\n"
    "GPU2\tSOC\tSOC\t X \tPIX\tSOC\t10-19,30-39\n"
    "GPU3\tSOC\tSOC\tPIX\t X \tSOC\t10-19,30-39\n"
    "mlx5_0\tPHB\tPHB\tSOC\tSOC\t X \n"
    "\n"
    "Legend:\n"
    "\n"
    "  X   = Self\n"
    "  SOC  = Connection traversing PCIe as well as the SMP link between CPU sockets(e.g. QPI)\n"
    "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
    "  PXB  = Connection traversing multiple PCIe switches (without traversing the PCIe Host Bridge)\n"
    "  PIX  = Connection traversing a single PCIe switch\n"
    "  NV#  = Connection traversing a bonded set of # NVLinks\n"
)


@pytest.mark.parametrize("variant", ["as-is"] + sorted(VARIANTS))
def test_old_driver_output(variant):
    text = OLD if variant == "as-is" else VARIANTS[variant](OLD)
    m = parse_topo_matrix(text)
    assert m.classes == classes(p0_1="PIX", p0_2="SYS", p0_3="SYS", p1_2="SYS", p1_3="SYS", p2_3="PIX")
    assert m.nics == ["mlx5_0"]
    assert m.nic_classes == {(0, "mlx5_0"): C("PHB"), (1, "mlx5_0"): C("PHB"),
                             (2, "mlx5_0"): C("SYS"), (3, "mlx5_0"): C("SYS")}
    assert m.columns == ["CPU Affinity"]
    assert m.cpu_affinity == {0: "0-9,20-29", 1: "0-9,20-29", 2: "10-19,30-39", 3: "10-19,30-39"}
    assert m.numa_affinity == {i: None for i in range(4)}


def test_one_gpu():
    m = parse_topo_matrix("\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-23\t0\t\tN/A\n")
    assert m.gpu_count == 1 and m.classes == {}
    assert m.cpu_affinity == {0: "0-23"} and m.numa_affinity == {0: 0}
    assert not m.legend_present


def test_no_affinity_columns_at_all():
    m = parse_topo_matrix("\tGPU0\tGPU1\nGPU0\t X \tPHB\nGPU1\tPHB\t X \n")
    assert m.classes == classes(p0_1="PHB")
    assert m.columns == [] and m.cpu_affinity == {0: None, 1: None}


def test_nic_row_before_gpu_rows_and_mixed_case_cells():
    text = ("\tGPU0\tGPU1\tNIC0\tCPU Affinity\n"
            "NIC0\tSYS\tSYS\t X \t\n"
            "GPU0\t x \tnv2\tSYS\t0-7\n"
            "GPU1\tNV2\t X \tSYS\t0-7\n")
    m = parse_topo_matrix(text)
    assert m.classes == classes(p0_1="NV2")
    assert m.nic_classes == {(0, "NIC0"): C("SYS"), (1, "NIC0"): C("SYS")}


def test_double_digit_gpu_labels():
    n = 12
    header = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\tCPU Affinity\n"
    rows = "".join(f"GPU{i}\t" + "\t".join(" X " if i == j else "NV18" for j in range(n)) + "\t0-95\n"
                   for i in range(n))
    m = parse_topo_matrix(header + rows)
    assert m.gpu_count == n and len(m.classes) == n * (n - 1) // 2
    assert m.classes[(1, 10)] == C("NV18") and m.gpu_indices == list(range(n))


# ----------------------------------------------------------------------------- malformed input
# nccl-667 as the base: line 1 header, lines 2-5 GPU0..GPU3, line 6 blank, line 7 "Legend:".


#: One edit of a good output (fixture, text, replacement) -> the error it must give, at its line.
ONE_EDIT_ERRORS = [
    pytest.param(NCCL667, "GPU2\tSYS\tSYS\t X \tPIX\t", "GPU2\tSYS\t X \tPIX\t",
                 4, "row GPU2 has 3 link cells .* 4 device columns.*not square", id="not-square-missing-cell"),
    pytest.param(NCCL667, "GPU1\tPXB\t X \tSYS\tSYS\t", "GPU1\tPXB\t X \tSYS\tSYS\tSYS\t",
                 3, "row GPU1 has 7 cells but the header .* has 6 columns", id="not-square-extra-cell"),
    pytest.param(NCCL1617, "NIC2    SYS     SYS     PIX", "NIC2    SYS     SYS     SYS",
                 8, "not symmetric", id="asymmetric-nic-column"),
    pytest.param(NCCL667, "GPU1\tPXB\t X \tSYS\tSYS", "GPU1\tPXB\t X \tNVX\tSYS",
                 3, r"unknown link class 'NVX' in row GPU1, column GPU2", id="bad-class"),
    pytest.param(AUTODL, "GPU1    PIX ", "GPU1    PIY ", 3, "unknown link class 'PIY'", id="bad-class-spaces"),
    pytest.param(NCCL667, "GPU0\t X \tPXB", "GPU0\tPIX\tPXB",
                 2, "diagonal cell of GPU0 is 'PIX', expected X", id="diagonal-not-x"),
    pytest.param(NCCL667, "GPU0\t X \tPXB", "GPU0\t X \t X ",
                 2, "X off the diagonal: row GPU0, column GPU1", id="x-off-diagonal"),
    pytest.param(NCCL667, "\tGPU0\tGPU1\tGPU2\tGPU3", "\tGPU0\tGPU1\tGPU1\tGPU3",
                 1, "column GPU1 appears twice", id="duplicate-header-column"),
]


@pytest.mark.parametrize("name,old,new,line,match", ONE_EDIT_ERRORS)
def test_error_one_edit(name, old, new, line, match):
    text = fixture(name)
    assert text.count(old) == 1, f"{name} no longer holds {old!r} once"
    raises_at(text.replace(old, new), line, match)


def test_error_not_square_missing_row():
    text = fixture(NCCL667)
    lines = text.split("\n")
    del lines[4]  # GPU3's row
    raises_at("\n".join(lines), 5, "no row for GPU3 .*not square")


def test_error_not_square_missing_row_at_end_of_text():
    lines = fixture(NCCL667).split("\n")[:4]  # header, GPU0..GPU2, no newline at the end
    raises_at("\n".join(lines), 4, "no row for GPU3")


def test_error_asymmetric_names_the_later_row():
    bad = fixture(NCCL667).replace("GPU3\tSYS\tSYS\tPIX\t X ", "GPU3\tSYS\tSYS\tPXB\t X ")
    err = raises_at(bad, 5, "not symmetric")
    assert "GPU3-GPU2 is PXB" in str(err) and "row GPU2 (line 4) says PIX" in str(err)


def test_error_no_gpu_rows():
    text = fixture(NCCL667)
    header, rest = text.split("\n", 1)
    raises_at(header + "\n" + rest[rest.index("\nLegend:"):], 2, "no GPU rows follow the header")
    raises_at(header + "\n", 2, "no GPU rows")
    raises_at(header, 1, "no GPU rows")


@pytest.mark.parametrize("text,line", [
    ("hello world\nthis is not nvidia-smi output\n", 1),
    ("\n\n   some garbage\n\tGPU0\tGPU1\n", 3),
    ("GPU0 X PIX\nGPU1 PIX X\n", 1),  # rows without a header
    ("{\"gpus\": []}", 1),
])
def test_error_garbage(text, line):
    raises_at(text, line, "expected the header row")


@pytest.mark.parametrize("text", ["", "\n\n", "   \r\n\t\n", "\ufeff"])
def test_error_empty(text):
    raises_at(text, None, "no text: expected the output of `nvidia-smi topo -m`")
    raises_at(text, None, "no text", parse=parse_p2p_matrix)


def test_error_duplicate_row():
    lines = fixture(NCCL667).split("\n")
    lines.insert(3, lines[1])
    raises_at("\n".join(lines), 4, "a second row for GPU0 .*line 2")


def test_error_row_not_in_header():
    lines = fixture(NCCL667).split("\n")
    lines.insert(5, "GPU4\tSYS\tSYS\tSYS\tSYS\t X \t0-1\t0")
    raises_at("\n".join(lines), 6, "row GPU4 is not a column of the header")


def test_error_cells_after_the_matrix():
    """Prose after the matrix is passed over (test_probe_smi_posted.py); a row is data: refused."""
    text = fixture(NCCL667) + "\nGPU4\tSYS\tSYS\tSYS\tSYS\t X \t0-1\t0\n"
    n = text.count("\n")
    raises_at(text, n, "unexpected text after the")


def test_error_two_outputs_given_to_single_parser():
    text = fixture(AUTODL) + fixture(AUTODL_P2P)
    raises_at(text, 14, "unexpected text after .*--from-smi")


def test_error_p2p_text_given_as_topo():
    raises_at(fixture(AUTODL_P2P), 2, r"'NS' .* is a P2P status.*topo -p2p")
    raises_at("\tGPU0\n GPU0\tX\n\nLegend:\n\n  X    = Self\n  OK   = Status Ok\n", 1,
              "topo -p2p` output")


def test_error_topo_text_given_as_p2p():
    raises_at(fixture(NCCL667), 1, "CPU Affinity.*topo -m", parse=parse_p2p_matrix)
    raises_at("\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV4\t X \n", 2, "unknown P2P status 'NV4'.*link class",
              parse=parse_p2p_matrix)


def test_error_p2p_bad_status_and_shape():
    text = fixture(AUTODL_P2P)
    raises_at(text.replace(" GPU1   NS ", " GPU1   OKAY "), 3, "unknown P2P status 'OKAY'",
              parse=parse_p2p_matrix)
    raises_at(text.replace(" GPU1   NS      X", " GPU1   NS"), 3, "row GPU1 has 1 link cells",
              parse=parse_p2p_matrix)
    raises_at(text.replace(" GPU0   X ", " GPU0   OK"), 2, "diagonal cell of GPU0",
              parse=parse_p2p_matrix)


def test_p2p_statuses_and_direction():
    text = ("\t\x1b[4mGPU0\tGPU1\tGPU2\x1b[0m\n"
            " GPU0\tX\tOK\tCNS\n GPU1\tOK\tX\tDR\n GPU2\tGNS\tDR\tX\n\n"
            "Legend:\n\n  X    = Self\n  OK   = Status Ok\n  DR   = Disabled by regkey\n  U    = Unknown\n")
    assert parse_p2p_matrix(text) == {(0, 1): "OK", (0, 2): "CNS", (1, 0): "OK", (1, 2): "DR",
                                      (2, 0): "GNS", (2, 1): "DR"}
    assert detect_smi_kind(text) == "p2p"


# ----------------------------------------------------------------------------- Topology


def test_topology_from_smi_seed():
    topo = topology_from_smi(fixture(SEED), source=SEED)
    assert topo.source == "nvidia-smi text" and topo.simulated is False
    assert topo.indices == list(range(8))
    for g in topo.gpus:
        assert g.numa_node == (0 if g.nvml_index < 4 else 1)
        assert g.cpu_affinity == ("0-31" if g.nvml_index < 4 else "32-63")
        for name in ("name", "uuid", "pci_bus_id", "cuda_index", "mig_mode"):
            assert getattr(g, name) == NotAvailable("not in nvidia-smi topo text")
        assert g.pcie.gen_current == NotAvailable("not in nvidia-smi topo text")
        assert g.lost is None
    assert len(topo.pairs) == 28
    assert topo.link_class(5, 6) == C("NODE")
    assert topo.pair(6, 7).nvlink_count == 4 and topo.pair(5, 6).nvlink_count == 0
    for p in topo.pairs:
        assert p.link_class == EXPECTED_CLASSES[SEED][p.gpus]
        assert set(p.p2p) == {"read", "write", "nvlink", "atomics", "pci"}
        assert all(isinstance(v, NotAvailable) for v in p.p2p.values())
    assert isinstance(topo.host.iommu_mode, NotAvailable)


def test_topology_from_smi_with_p2p():
    for key in ("pci", "p"):
        topo = topology_from_smi(fixture(AUTODL), {key: fixture(AUTODL_P2P)}, source="x")
        p = topo.pair(0, 1)
        assert p.link_class == C("PIX") and p.p2p["pci"] == "NS"
        assert isinstance(p.p2p["read"], NotAvailable)
    with pytest.raises(UsageError, match="unknown P2P capability"):
        topology_from_smi(fixture(AUTODL), {"bogus": fixture(AUTODL_P2P)})


def test_topology_asymmetric_p2p_keeps_the_worse_way():
    topo_text = "\tGPU0\tGPU1\nGPU0\t X \tPIX\nGPU1\tPIX\t X \n"
    p2p_text = "\tGPU0\tGPU1\n GPU0\tX\tOK\n GPU1\tCNS\tX\n"
    assert topology_from_smi(topo_text, {"read": p2p_text}).pair(0, 1).p2p["read"] == "CNS"


def test_topology_na_and_absent_affinity_reasons():
    topo = topology_from_smi(fixture(NCCL667).replace("\t0-27,56-83\t0\n", "\tN/A\tN/A\n", 1))
    g0, g1 = topo.gpu(0), topo.gpu(1)
    assert g0.cpu_affinity == NotAvailable("N/A in nvidia-smi topo text")
    assert g0.numa_node == NotAvailable("N/A in nvidia-smi topo text")
    assert g1.cpu_affinity == "0-27,56-83" and g1.numa_node == 0
    bare = topology_from_smi("\tGPU0\tGPU1\nGPU0\t X \tPHB\nGPU1\tPHB\t X \n")
    assert bare.gpu(0).numa_node == NotAvailable("not in nvidia-smi topo text")
    assert bare.gpu(0).cpu_affinity == NotAvailable("not in nvidia-smi topo text")


def test_topology_p2p_gpu_mismatch():
    with pytest.raises(InputFileError, match="names GPUs"):
        topology_from_smi(fixture(NCCL667), {"r": fixture(AUTODL_P2P)})


# ----------------------------------------------------------------------------- files with several outputs


def test_file_with_topo_and_p2p_as_posted():
    """The autodl post: prompt lines, `topo -m`, then `topo -p2p p`."""
    text = ("root@autodl-container:~# nvidia-smi topo -m\n" + fixture(AUTODL) + "\n"
            "root@autodl-container:~# nvidia-smi topo -p2p p\n" + fixture(AUTODL_P2P))
    secs = split_smi_sections(text, "post.txt")
    assert [(s.kind, s.cap, s.header_line) for s in secs] == [("topo", None, 2), ("p2p", "pci", 17)]
    topo = topology_from_smi_file_text(text, "post.txt")
    assert topo.pair(0, 1).p2p["pci"] == "NS" and topo.pair(0, 1).link_class == C("PIX")
    assert isinstance(topo.pair(0, 1).p2p["write"], NotAvailable)
    assert topo.source == "nvidia-smi text"


def test_file_with_only_topo():
    topo = topology_from_smi_file_text(fixture(SEED), SEED)
    assert len(topo.pairs) == 28


def test_file_p2p_first_and_several_caps():
    p2p = fixture(AUTODL_P2P)
    text = ("$ nvidia-smi topo -p2p w\n" + p2p.replace("NS", "OK") + "\n"
            "$ nvidia-smi topo -p2p r\n" + p2p + "\n"
            "$ nvidia-smi topo -m\n" + fixture(AUTODL))
    topo = topology_from_smi_file_text(text)
    assert topo.pair(0, 1).p2p["write"] == "OK" and topo.pair(0, 1).p2p["read"] == "NS"
    assert isinstance(topo.pair(0, 1).p2p["pci"], NotAvailable)


def test_file_p2p_without_command_line():
    """Its capability cannot be told: read with it said as unknown (a note), never the reason to
    refuse the file."""
    text = fixture(AUTODL) + "\n" + fixture(AUTODL_P2P)
    assert [s.kind for s in split_smi_sections(text)] == ["topo", "p2p"]
    notes: list = []
    skipped = topology_from_smi_file_text(text, "f.txt", notes=notes)
    assert len(notes) == 1 and notes[0].startswith("line 15: a `nvidia-smi topo -p2p` matrix without its command "
                                                   "line was read, its capability unknown")
    assert skipped.pair(0, 1).p2p["unknown"] == "NS"
    assert all(isinstance(v, NotAvailable) for k, v in skipped.pair(0, 1).p2p.items() if k != "unknown")
    assert skipped.link_class(0, 1) == C("PIX")
    topo = topology_from_smi_file_text(text, "f.txt", default_p2p_cap="r")
    assert topo.pair(0, 1).p2p["read"] == "NS"


def test_file_errors():
    topo, p2p = fixture(AUTODL), fixture(AUTODL_P2P)
    with pytest.raises(InputFileError, match="no `nvidia-smi topo -m` matrix") as info:
        topology_from_smi_file_text("$ nvidia-smi topo -p2p r\n" + p2p, "f")
    assert info.value.line == 2
    with pytest.raises(InputFileError, match="a second `nvidia-smi topo -m` matrix .*line 1") as info:
        topology_from_smi_file_text(topo + "\n" + topo, "f")
    assert info.value.line == 15
    with pytest.raises(InputFileError, match="second .*-p2p.* for read"):
        topology_from_smi_file_text(topo + "nvidia-smi topo -p2p r\n" + p2p + "nvidia-smi topo -p2p r\n" + p2p, "f")
    with pytest.raises(InputFileError, match="names GPUs") as info:
        topology_from_smi_file_text(fixture(NCCL667) + "nvidia-smi topo -p2p r\n" + p2p, "f")
    assert info.value.line == 17
    with pytest.raises(InputFileError, match="no nvidia-smi topo matrix found") as info:
        topology_from_smi_file_text("\nnothing useful\n", "f")
    assert info.value.line == 2
    with pytest.raises(InputFileError, match="no text"):
        topology_from_smi_file_text("", "f")


def test_file_error_lines_are_file_lines():
    """An error in the second output names its line in the file, not in the section."""
    text = (fixture(AUTODL) + "\n$ nvidia-smi topo -p2p r\n"
            + fixture(AUTODL_P2P).replace(" GPU1   NS ", " GPU1   BAD "))
    with pytest.raises(InputFileError, match="unknown P2P status 'BAD'") as info:
        topology_from_smi_file_text(text, "f")
    assert info.value.line == 18
    text = fixture(NCCL667).replace("GPU1\tPXB\t X \tSYS\tSYS", "GPU1\tPXB\t X \tNVX\tSYS")
    with pytest.raises(InputFileError, match="NVX") as info:
        topology_from_smi_file_text("$ nvidia-smi topo -m\n" + text, "f")
    assert info.value.line == 4


def test_file_trailing_other_command_output_is_ignored():
    text = fixture(SEED) + "\n$ nvidia-smi nvlink -s\nGPU 0: Tesla V100\n\t Link 0: 25 GB/s\n"
    assert len(topology_from_smi_file_text(text).pairs) == 28


def test_p2p_gpu_count_must_match_even_for_one_gpu():
    one = "\tGPU0\tCPU Affinity\nGPU0\t X \t0-3\n"
    two_p2p = "\tGPU0\tGPU1\n GPU0\tX\tOK\n GPU1\tOK\tX\n"
    with pytest.raises(InputFileError, match="names GPUs"):
        topology_from_smi(one, {"r": two_p2p})
    with pytest.raises(InputFileError, match="names GPUs"):
        topology_from_smi_file_text(one + "\nnvidia-smi topo -p2p r\n" + two_p2p)
    assert topology_from_smi(one, {"r": "\tGPU0\n GPU0\tX\n"}).pairs == []


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig", "utf-16", "utf-16-le"])
def test_decode_saved_files(encoding):
    """PowerShell's `>` writes UTF-16; Notepad may add a UTF-8 BOM."""
    text = fixture(NCCL667)
    decoded = decode_smi_bytes(text.replace("\n", "\r\n").encode(encoding))
    assert parse_topo_matrix(decoded).classes == EXPECTED_CLASSES[NCCL667]


@pytest.mark.slow
def test_import_is_light():
    code = ("import sys, gputopo.probe.smi, gputopo.probe.smi_format; "
            "print(sorted(m for m in ('torch', 'pandas', 'matplotlib', 'pynvml', 'click', 'rich') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
