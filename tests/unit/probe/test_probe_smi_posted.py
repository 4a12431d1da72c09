"""`nvidia-smi topo` text as people posted it (issue 37, "refuse only what cannot be read"):
legend lines wrapped by the terminal, a `topo -p2p` matrix whose capability nobody wrote down,
a header whose tabs were lost, ANSI underlines, spaces for tabs, the old SOC class, NIC columns.

The posted outputs are tests/fixtures/topo/ (sources in tests/fixtures/README.md); every text
built here from them is labelled "written" (a variant made for the test, not posted)."""

from __future__ import annotations

import json

import pytest

from gputopo.errors import InputFileError
from gputopo.model import LinkClass, NotAvailable
from gputopo.model.topology import topology_to_json
from gputopo.probe.smi import parse_topo_matrix, topology_from_smi_file_text
from helpers.cli import gputopo_here
from helpers.paths import FIXTURES
from test_smi_posted_cut_and_c2c import NEW_POSTED

TOPO_DIR = FIXTURES / "topo"
CLUB3090 = "club3090-1125_2gpu_node_indented-wrapped-legend_plus-p2p-NS-no-cmdline.txt"
SHEFFIELD = "rse-sheffield_dgx1_8xp100_nv1_soc_mlx5_mangled-header.txt"
RWTH = "rwth-omp-offload_c16g_2gpu_nv2_ansi.txt"
EKS = "training-on-eks_g6e_4xl40s_node_spaces.txt"
TF_GDR = "tensorflow-gdr_4xk40m_soc_mlx4.txt"
NCCL667 = "nccl-667_4gpu_pxb_pix_sys.txt"
AUTODL = "autodl_2x2080ti_pix.txt"
AUTODL_P2P = "autodl_2x2080ti_p2p_p.txt"
#: The fixtures this file holds expectations for (test_probe_smi_parser.py checks every fixture
#: of tests/fixtures/topo/ has some).
POSTED = (CLUB3090, SHEFFIELD, RWTH, EKS, TF_GDR,
          "vllm-13855_dgx-h100_8gpu_nv18_12nics_tabs-lost-NIC8NIC9-NODENODE_cut-before-nic-rows_excerpt.txt") + NEW_POSTED


def fixture(name: str) -> str:
    return (TOPO_DIR / name).read_text()


def C(name: str) -> LinkClass:
    return LinkClass.parse(name)


def read(text: str, source: str = "t.txt"):
    notes: list = []
    return topology_from_smi_file_text(text, source, notes=notes), notes


# ----------------------------------------------------------------------------- wrapped legends


def test_posted_club3090_wrapped_legend_and_p2p_without_command_is_read():
    """Posted: legend lines wrapped by the terminal, then a `topo -p2p` matrix (all NS) with no
    command line above it. The matrix is read; the -p2p matrix is read too, its capability said as
    unknown (issue 47, item 10: before, it was skipped)."""
    topo, notes = read(fixture(CLUB3090), CLUB3090)
    assert topo.indices == [0, 1] and topo.link_class(0, 1) == C("NODE")
    assert [g.cpu_affinity for g in topo.gpus] == ["0-15", "0-15"]
    assert [g.numa_node for g in topo.gpus] == [0, 0]
    assert all(g.gpu_memory_numa_node == NotAvailable("N/A in nvidia-smi topo text") for g in topo.gpus)
    assert len(notes) == 1, notes
    assert notes[0].startswith("line 19: a `nvidia-smi topo -p2p` matrix without its command line was read, its "
                               "capability unknown (r, w, n, a or p): GPU0-GPU1 NS")
    assert "`nvidia-smi topo -p2p r`" in notes[0]
    p2p = dict(topo.pair(0, 1).p2p)
    assert p2p.pop("unknown") == "NS"
    for cap, status in p2p.items():
        assert isinstance(status, NotAvailable), cap
        assert "(line 19) was read, but which capability it shows (r, w, n, a or p) is unknown" in status.reason


def test_posted_club3090_through_the_cli_says_the_skipped_matrix():
    rc, out, err = gputopo_here("scan", "--from-smi", TOPO_DIR / CLUB3090)
    assert rc == 0, err
    assert "NODE" in out
    assert "note:" in err and "line 19: a `nvidia-smi topo -p2p` matrix without its command line was read" in err
    rc, out, err = gputopo_here("scan", "--from-smi", TOPO_DIR / CLUB3090, "--json")
    assert rc == 0, err
    pair = json.loads(out)["pairs"][0]
    assert "is unknown" in pair["p2p"]["read"]["not_available"] and pair["p2p"]["unknown"] == "NS"


def _wrap_legend(text: str, width: int = 72) -> str:
    """Written: every legend line longer than ``width`` cut at a space, as a narrow terminal
    wraps it (the rest on a line of its own, indented less)."""
    out = []
    for line in text.split("\n"):
        while "=" in line and len(line) > width:
            cut = line.rindex(" ", 0, width)
            out.append(line[:cut])
            line = "  " + line[cut + 1:]
        out.append(line)
    return "\n".join(out)


@pytest.mark.parametrize("name", [NCCL667, RWTH, EKS, TF_GDR, "nccl-1617_4xh100_nv6_nics.txt",
                                  "stelline_asus-esc8000a_4xrtx6000ada_amd_nics.txt"])
def test_written_wrapped_legend_reads_as_the_posted_text(name):
    text = fixture(name)
    wrapped = _wrap_legend(text)
    assert wrapped != text
    want = parse_topo_matrix(text, name)
    got = parse_topo_matrix(wrapped, name)
    assert (got.classes, got.cpu_affinity, got.numa_affinity, got.nic_classes, got.nic_devices) == \
        (want.classes, want.cpu_affinity, want.numa_affinity, want.nic_classes, want.nic_devices)
    assert got.notes == []  # a wrapped legend line is legend text: nothing to say


def test_written_prose_after_the_matrix_is_passed_over_and_named():
    text = fixture(NCCL667) + "\nthis line does not belong here\n"
    m = parse_topo_matrix(text, "t.txt")
    assert m.classes == parse_topo_matrix(fixture(NCCL667)).classes
    n = text.count("\n")
    assert m.notes == [f"line {n} after the `nvidia-smi topo -m` matrix was not read (no cells): "
                       "'this line does not belong here'"]


@pytest.mark.parametrize("extra,why", [
    ("GPU4\tSYS\tSYS\tSYS\tSYS\t X \t0-1\t0", "a row for a GPU the header does not name"),
    ("GPU1\tPXB\t X \tSYS\tSYS\t0-27\t0", "a second row for GPU1 after the legend"),
    ("mlx5_0\tPIX\tPIX\tSYS\tSYS", "a NIC row the header does not name"),
])
def test_written_cells_after_the_legend_still_refused(extra, why):
    """A line after the matrix that holds cells is data that would be lost: refused."""
    text = fixture(NCCL667).rstrip("\n") + "\n" + extra + "\n"
    with pytest.raises(InputFileError, match="unexpected text after the `nvidia-smi topo -m` matrix") as info:
        parse_topo_matrix(text, "t.txt")
    assert info.value.line == text.count("\n"), why


def test_written_wrapped_legend_in_a_file_with_p2p_command_lines():
    """Written: the club3090 post with the command lines people usually paste: both read."""
    text = fixture(CLUB3090)
    top, p2p = text.split("\n\n          GPU0 GPU1\n", 1)
    text = "$ nvidia-smi topo -m\n" + top + "\n\n$ nvidia-smi topo -p2p w\n          GPU0 GPU1\n" + p2p
    topo, notes = read(text)
    assert notes == []
    assert topo.pair(0, 1).p2p["write"] == "NS" and topo.link_class(0, 1) == C("NODE")
    assert topo.pair(0, 1).p2p["read"] == NotAvailable("no `nvidia-smi topo -p2p r` text given")


def test_written_p2p_without_command_that_is_damaged_is_skipped_not_refused():
    text = fixture(AUTODL) + "\n" + fixture(AUTODL_P2P).replace(" GPU1   NS ", " GPU1   BAD ")
    topo, notes = read(text)
    assert topo.link_class(0, 1) == C("PIX")
    assert len(notes) == 1 and "skipped (it could not be read either, line 17: unknown P2P status 'BAD'" in notes[0]


def test_written_p2p_with_command_that_is_damaged_is_still_refused():
    text = fixture(AUTODL) + "\n$ nvidia-smi topo -p2p r\n" + fixture(AUTODL_P2P).replace(" GPU1   NS ", " GPU1   BAD ")
    with pytest.raises(InputFileError, match="unknown P2P status 'BAD'"):
        read(text)


# ----------------------------------------------------------------------------- a header whose tabs were lost


#: The DGX-1 hybrid cube mesh of the Sheffield post: each GPU's NV1 peers (all else SOC = SYS).
DGX1_NV1 = {0: {1, 2, 3, 4}, 1: {0, 2, 3, 5}, 2: {0, 1, 3, 6}, 3: {0, 1, 2, 7},
            4: {0, 5, 6, 7}, 5: {1, 4, 6, 7}, 6: {2, 4, 5, 7}, 7: {3, 4, 5, 6}}
#: Each GPU's PIX NIC and PHB NIC in that post (the other two NICs are SOC).
DGX1_NICS = {0: ("mlx5_0", "mlx5_1"), 1: ("mlx5_0", "mlx5_1"), 2: ("mlx5_1", "mlx5_0"),
             3: ("mlx5_1", "mlx5_0"), 4: ("mlx5_2", "mlx5_3"), 5: ("mlx5_2", "mlx5_3"),
             6: ("mlx5_3", "mlx5_2"), 7: ("mlx5_3", "mlx5_2")}


def test_posted_sheffield_mangled_header_is_read_from_the_row_labels():
    m = parse_topo_matrix(fixture(SHEFFIELD), SHEFFIELD)
    assert m.gpu_labels == [f"GPU{i}" for i in range(8)]
    assert m.nics == ["mlx5_0", "mlx5_2", "mlx5_1", "mlx5_3"]  # the header's order, as printed
    for i in range(8):
        for j in range(i + 1, 8):
            assert m.classes[(i, j)] == (C("NV1") if j in DGX1_NV1[i] else C("SYS")), (i, j)
    for g, (pix, phb) in DGX1_NICS.items():
        for nic in m.nics:
            want = "PIX" if nic == pix else "PHB" if nic == phb else "SYS"
            assert m.nic_classes[(g, nic)] == C(want), (g, nic)
    assert m.nic_pair_classes[("mlx5_0", "mlx5_1")] == C("PHB")
    assert m.nic_pair_classes[("mlx5_0", "mlx5_2")] == C("SYS")
    assert m.columns == ["CPU Affinity"] and m.cpu_affinity == {i: "1-1" for i in range(8)}
    assert m.header_line == 1 and m.gpu_lines == {i: i + 2 for i in range(8)}


def _glue(text: str, upto: str) -> str:
    """Written: the first header line with the separators between names up to ``upto`` lost."""
    lines = text.split("\n")
    k = next(n for n, ln in enumerate(lines) if "GPU0" in ln)
    head = lines[k]
    cut = head.index(upto) + len(upto)
    start = head.index("GPU0")
    lines[k] = head[:start] + "".join(head[start:cut].split()) + head[cut:]
    return "\n".join(lines)


@pytest.mark.parametrize("name,upto", [
    (NCCL667, "GPU3"), (NCCL667, "GPU1"), (EKS, "GPU3"), (TF_GDR, "mlx4_0"),
    ("nccl-1617_4xh100_nv6_nics.txt", "NIC3"), (RWTH, "GPU1"),
    ("stelline_asus-esc8000a_4xrtx6000ada_amd_nics.txt", "NIC1"),
])
def test_written_glued_headers_read_as_the_posted_text(name, upto):
    glued = _glue(fixture(name), upto)
    assert glued != fixture(name)
    want, got = parse_topo_matrix(fixture(name)), parse_topo_matrix(glued, "t.txt")
    assert (got.gpu_labels, got.nics, got.classes, got.nic_classes, got.cpu_affinity, got.numa_affinity,
            got.gpu_numa_id, got.columns) == \
        (want.gpu_labels, want.nics, want.classes, want.nic_classes, want.cpu_affinity,
         want.numa_affinity, want.gpu_numa_id, want.columns)


@pytest.mark.parametrize("rows,why", [
    ("GPU0 X PIX SYS\nGPU1 PIX X SYS\nGPU3 SYS SYS X\n", "a row label the header does not spell"),
    ("GPU1 X PIX SYS\nGPU0 PIX X SYS\nGPU2 SYS SYS X\n", "rows in another order than the columns"),
    ("GPU0 X PIX\nGPU1 PIX X\n", "fewer rows than glued names"),
])
def test_written_glued_header_the_rows_do_not_tell_is_refused(rows, why):
    text = "\tGPU0GPU1GPU2\tCPU Affinity\n" + rows
    with pytest.raises(InputFileError, match=r"column names run together \('GPU0GPU1GPU2': its tabs were lost\)") as info:
        parse_topo_matrix(text, "t.txt")
    assert info.value.line == 1, why


def test_written_glued_name_split_inside_a_label_is_refused():
    """Lost tabs join names; a header that splits a name ("GPU0GP U1") is not the rows' labels."""
    text = "\tGPU0GP\tU1\tCPU Affinity\nGPU0\t X \tPIX\t0\nGPU1\tPIX\t X \t0\n"
    with pytest.raises(InputFileError):
        parse_topo_matrix(text, "t.txt")


def test_written_glued_p2p_header_is_read():
    text = "$ nvidia-smi topo -m\n" + fixture(AUTODL) + "\n$ nvidia-smi topo -p2p p\n" + \
        fixture(AUTODL_P2P).replace("GPU0    GPU1", "GPU0GPU1", 1)
    topo, notes = read(text)
    assert notes == [] and topo.pair(0, 1).p2p["pci"] == "NS"


# ----------------------------------------------------------------------------- every fixture, and back


#: A fixture whose GPU rows' NIC cells could not all be read (cells run together): no whole
#: `topo -m` text can be written from it (test_smi_read_what_is_intact.py says what --format smi does).
PARTLY_READ = "vllm-13855_dgx-h100_8gpu_nv18_12nics_tabs-lost-NIC8NIC9-NODENODE_cut-before-nic-rows_excerpt.txt"


def _topo_fixtures():
    return sorted(p.name for p in TOPO_DIR.glob("*.txt") if p.name not in (AUTODL_P2P, PARTLY_READ))


@pytest.mark.parametrize("name", _topo_fixtures())
def test_every_posted_fixture_round_trips_through_format_smi(name):
    """`scan --from-smi F --format smi` writes what it read: reading that text back gives the
    same topology (the P2P reasons aside: the written text holds no -p2p matrix), and the
    same text again."""
    rc, out, err = gputopo_here("scan", "--from-smi", TOPO_DIR / name, "--format", "smi")
    assert rc == 0, err
    first, first_notes = read(fixture(name), name)
    again, notes = read(out)
    # a paste cut inside a NIC row is written cut there (smi_format.py), and read back with the same note
    assert notes == [] or [n.split(": ", 1)[1] for n in notes] == [n.split(": ", 1)[1] for n in first_notes
                                                                   if "the text ends inside row" in n]
    a, b = topology_to_json(first), topology_to_json(again)
    for d in (a, b):
        for p in d["pairs"]:
            p.pop("p2p")
    assert a == b
    rc2, out2, err2 = gputopo_here("scan", "--from-smi", "-", "--format", "smi", input=out)
    assert rc2 == 0 and out2 == out, err2


def test_old_soc_class_reads_as_sys_and_nic_named_by_device():
    m = parse_topo_matrix(fixture(TF_GDR), TF_GDR)
    assert m.classes == {(0, 1): C("PHB"), (0, 2): C("SYS"), (0, 3): C("SYS"), (1, 2): C("SYS"),
                         (1, 3): C("SYS"), (2, 3): C("PHB")}
    assert m.nics == ["mlx4_0"]
    assert [m.nic_classes[(g, "mlx4_0")] for g in range(4)] == [C("SYS"), C("SYS"), C("PHB"), C("PHB")]
    assert m.cpu_affinity == {0: "0-5", 1: "0-5", 2: "6-11", 3: "6-11"} and m.columns == ["CPU Affinity"]


def test_ansi_underlined_header_and_spaces_for_tabs():
    m = parse_topo_matrix(fixture(RWTH), RWTH)
    assert m.classes == {(0, 1): C("NV2")} and m.cpu_affinity == {0: "0-11", 1: "12-23"}
    assert m.numa_affinity == {0: 0, 1: 1}
    e = parse_topo_matrix(fixture(EKS), EKS)
    assert set(e.classes.values()) == {C("NODE")} and len(e.classes) == 6
    assert e.cpu_affinity == {i: "0-47" for i in range(4)} and e.numa_affinity == {i: 0 for i in range(4)}
    assert e.columns == ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
    assert e.gpu_numa_id == {i: None for i in range(4)}


def test_written_prose_starting_with_a_gpu_word_is_no_glued_header():
    text = "GPU0s of this box, as posted:\n" + fixture(NCCL667) + "\nGPU0s and GPU1s share a switch\n"
    topo, notes = read(text)
    assert topo.link_class(0, 1) == C("PXB")
    assert notes == [f"line {text.count(chr(10))} after the `nvidia-smi topo -m` matrix was not read (no cells): "
                     "'GPU0s and GPU1s share a switch'"]


def test_written_one_gpu_glued_to_its_nic():
    text = "\tGPU0mlx5_0\tCPU Affinity\nGPU0\t X \tPIX\t0-7\nmlx5_0\tPIX\t X \n"
    m = parse_topo_matrix(text, "t.txt")
    assert m.gpu_labels == ["GPU0"] and m.nics == ["mlx5_0"] and m.nic_classes == {(0, "mlx5_0"): C("PIX")}
