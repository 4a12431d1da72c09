"""Two `nvidia-smi topo -m` pastes that were refused wrongly (the companions of two p2pbw
fixtures, tests/fixtures/p2pbw/*.topo.txt; sources in tests/fixtures/README.md):

- 8 x RTX 4090 (blog.chlc.cc): the paste ends right AFTER the NIC2 row (no NIC3 row, no legend),
  every GPU row whole. It was refused ("no row for NIC3 ... the matrix is not square"); it is
  the same case as a paste cut inside a NIC row: read, and the cut said (what it leaves out);
- 6 x RTX 4090 (NVIDIA/nccl issue 814): the topology as a GitHub markdown pipe table
  (``  | GPU0 | GPU1 ...``, ``-- | --`` separator). It was refused saying it expected a header
  naming GPU0, GPU1 (which the header does name); it is read, and where a table is not
  understood the refusal says what was not.

Every text built here from the fixtures is labelled "written" (made for the test, not posted).
"""

from __future__ import annotations

import json

import pytest

from gputopo.errors import InputFileError
from gputopo.model import LinkClass
from gputopo.model.topology import topology_to_json
from gputopo.probe.smi import parse_topo_matrix, topology_from_smi_file_text
from helpers.cli import gputopo_here
from helpers.paths import FIXTURES

P2PBW = FIXTURES / "p2pbw"
CHLC = "chlc-blog_8x4090_stock-driver_p2p-none_no-device-header"
NCCL814 = "nccl-814_6gpu_pcie_p2p-slower-than-staged_excerpt"


def topo_text(stem: str) -> str:
    return (P2PBW / f"{stem}.topo.txt").read_text()


def C(name: str) -> LinkClass:
    return LinkClass.parse(name)


def read(text: str, source: str = "t.txt"):
    notes: list = []
    return topology_from_smi_file_text(text, source, notes=notes), notes


def cut_after(text: str, label: str) -> str:
    """written: ``text`` up to and including the row of ``label``."""
    lines = text.splitlines(keepends=True)
    end = next(k for k, ln in enumerate(lines) if ln.split()[:1] == [label])
    return "".join(lines[:end + 1])


# ----------------------------------------------------------------------------- ends after a whole NIC row


def test_posted_paste_ending_after_a_whole_nic_row_is_read_and_the_cut_said():
    m = parse_topo_matrix(topo_text(CHLC), source="chlc")
    assert m.gpu_count == 8 and set(m.classes.values()) == {C("SYS")}
    assert m.nics == ["NIC0", "NIC1", "NIC2", "NIC3"] and len(m.nic_classes) == 8 * 4
    assert {n: m.nic_classes[(6, n)] for n in m.nics} == {n: C("PHB") for n in m.nics}
    assert m.nic_classes[(0, "NIC3")] == C("SYS")
    # NIC3's classes to the other NICs are in their rows (the matrix is symmetric)
    assert m.nic_pair_classes[("NIC2", "NIC3")] == C("PIX") and m.nic_pair_classes[("NIC0", "NIC3")] == C("PHB")
    assert len(m.nic_pair_classes) == 6
    assert m.cpu_affinity[0] == "24-31,88-95" and m.numa_affinity[0] == 3 and m.gpu_numa_id[0] is None
    (note,) = m.notes
    assert note.startswith("line 12: the text ends after row NIC2, so row NIC3 is not in it")
    assert "legend" in note and "not read" not in note.split("legend")[0]


def test_written_paste_ending_after_an_earlier_row_says_the_nic_classes_not_read():
    text = topo_text(CHLC)
    m = parse_topo_matrix(cut_after(text, "NIC1"), source="written")
    assert ("NIC2", "NIC3") not in m.nic_pair_classes and m.nic_pair_classes[("NIC1", "NIC3")] == C("PHB")
    (note,) = m.notes
    assert "ends after row NIC1, so rows NIC2, NIC3 are not in it" in note
    assert "classes between those NICs are not read" in note
    # ending after the last GPU row: no NIC row at all, each GPU's class to every NIC is still read
    m = parse_topo_matrix(cut_after(text, "GPU7"), source="written")
    assert len(m.nic_classes) == 32 and m.nic_pair_classes == {}
    (note,) = m.notes
    assert "ends after row GPU7, so rows NIC0, NIC1, NIC2, NIC3 are not in it" in note


@pytest.mark.parametrize("written,why", [
    (lambda t: cut_after(t, "GPU6"), "no row for GPU7, NIC0, NIC1, NIC2, NIC3"),  # a GPU row is missing
    (lambda t: t + "\nLegend:\n\n  X    = Self\n", "no row for NIC3"),  # the output went on: not a cut
    # a row out of the middle
    (lambda t: "".join(ln for ln in t.splitlines(True) if not ln.startswith("NIC1 ")), "no row for NIC1, NIC3"),
])
def test_written_missing_rows_that_are_no_cut_at_the_end_are_still_refused(written, why):
    with pytest.raises(InputFileError, match=why):
        parse_topo_matrix(written(topo_text(CHLC)), source="written")


# ----------------------------------------------------------------------------- markdown pipe tables


def test_posted_markdown_pipe_table_is_read():
    m = parse_topo_matrix(topo_text(NCCL814), source="nccl-814")
    assert m.gpu_count == 6 and m.nics == [] and m.notes == []
    assert {p for p, c in m.classes.items() if c == C("PHB")} == {(0, 1), (3, 4)}
    assert {c for p, c in m.classes.items() if p not in ((0, 1), (3, 4))} == {C("SYS")}
    assert m.cpu_affinity == {i: "0-63" for i in range(6)} and m.columns == ["CPU Affinity"]
    assert m.header_line == 1 and m.gpu_lines[5] == 8


def test_written_markdown_with_outer_pipes_empty_cells_and_a_legend():
    text = ("| | GPU0 | GPU1 | NIC0 | CPU Affinity | NUMA Affinity | GPU NUMA ID |\n"
            "|---|:---:|---|---|---|---|---|\n"
            "| GPU0 | X | NV4 | PIX | 0-31 | | N/A |\n"
            "| GPU1 | NV4 | X | SYS | 32-63 | 1 | N/A |\n"
            "| NIC0 | PIX | SYS | X | | | |\n"
            "\nLegend:\n\n  X    = Self\n")
    m = parse_topo_matrix(text, source="written")
    assert m.link_class(0, 1) == C("NV4") and m.nic_classes == {(0, "NIC0"): C("PIX"), (1, "NIC0"): C("SYS")}
    assert m.cpu_affinity == {0: "0-31", 1: "32-63"} and m.numa_affinity == {0: None, 1: 1}
    assert m.legend_present and m.notes == []


@pytest.mark.parametrize("written,why", [
    # the separator row taken out: cells split by '|' with no table under them
    (lambda t: t.replace(t.splitlines()[1] + "\n", ""), r"'\|'.*no markdown separator row"),
    # a word before the first column name
    (lambda t: "Topology:" + t.splitlines()[0].replace("|", " ") + "\n", "'Topology:' before GPU0"),
])
def test_written_header_naming_gpus_that_is_not_understood_says_why(written, why):
    text = written(topo_text(NCCL814))
    for parse in (lambda: parse_topo_matrix(text, "written"), lambda: read(text, "written")):
        with pytest.raises(InputFileError, match=why) as info:
            parse()
        assert "naming GPU0, GPU1" not in str(info.value) and "column names GPU0, GPU1" not in str(info.value)
        assert info.value.line == 1


# ----------------------------------------------------------------------------- through the CLI, and back


@pytest.mark.parametrize("stem", [CHLC, NCCL814])
def test_posted_companion_round_trips_through_format_smi(stem):
    """`scan --from-smi F --format smi` writes what it read: reading it back gives the same
    topology (and the same cut said, where some is left out), and the same text again."""
    path = P2PBW / f"{stem}.topo.txt"
    rc, out, err = gputopo_here("scan", "--from-smi", path, "--format", "smi")
    assert rc == 0, err
    first, first_notes = read(path.read_text(), path.name)
    again, notes = read(out)
    assert [n.split(": ", 1)[1] for n in notes] == [n.split(": ", 1)[1] for n in first_notes if "class" in n
                                                    and "not read" in n]
    assert topology_to_json(first) == topology_to_json(again)
    rc2, out2, err2 = gputopo_here("scan", "--from-smi", "-", "--format", "smi", input=out)
    assert rc2 == 0 and out2 == out, err2


def test_posted_cut_companion_says_the_cut_on_stderr_and_keeps_every_nic():
    path = P2PBW / f"{CHLC}.topo.txt"
    rc, out, err = gputopo_here("scan", "--from-smi", path, "--json")
    assert rc == 0, err
    assert "the text ends after row NIC2" in err
    nics = json.loads(out)["nics"]
    assert [n["label"] for n in nics] == ["NIC0", "NIC1", "NIC2", "NIC3"]
    assert [c["nic"] for c in nics[3]["nic_link_classes"]] == ["NIC0", "NIC1", "NIC2"]


@pytest.mark.parametrize("stem", [CHLC, NCCL814])
def test_posted_p2pbw_output_imports_with_its_companion_topology(stem, tmp_path):
    rc, out, err = gputopo_here("import", "p2pbw", P2PBW / f"{stem}.txt", "--topo", P2PBW / f"{stem}.topo.txt",
                                "--out", tmp_path / "r", "--no-history",
                                env={"GPUTOPO_HISTORY": str(tmp_path / "h.sqlite")})
    assert rc in (0, 1), err
    assert (tmp_path / "r" / "summary.json").is_file()
