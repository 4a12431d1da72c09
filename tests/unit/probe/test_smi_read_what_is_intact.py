"""`nvidia-smi topo -m` text: read what is intact (issue 47, item 10). A header whose tabs were
lost between two names (``NIC8NIC9``) is read by the names' own numbering; a GPU row whose NIC
cells ran together (``NODENODE``) has its GPU block read and its NIC cells said as not read; the
rest of the damage is still refused. The vLLM 13855 paste is posted (tests/fixtures/README.md);
the variants made from it here are labelled WRITTEN."""

from __future__ import annotations

import pytest

from gputopo.errors import InputFileError
from gputopo.model import LinkClass
from gputopo.probe.smi import topology_from_smi_file_text
from helpers.cli import gputopo_here
from helpers.paths import FIXTURES

VLLM = FIXTURES / "topo" / "vllm-13855_dgx-h100_8gpu_nv18_12nics_tabs-lost-NIC8NIC9-NODENODE_cut-before-nic-rows_excerpt.txt"


def _read(text):
    notes: list = []
    return topology_from_smi_file_text(text, "t.txt", notes=notes), notes


def test_posted_vllm_13855_gpu_block_is_read_and_what_was_not_is_said():
    topo, notes = _read(VLLM.read_text())
    assert [g.nvml_index for g in topo.gpus] == list(range(8))
    assert all(p.link_class == LinkClass.parse("NV18") for p in topo.pairs) and len(topo.pairs) == 28
    assert [n.label for n in topo.nics] == [f"NIC{k}" for k in range(12)]
    # GPUs 0-3: their rows are whole, their NIC classes read; GPUs 4-7: their NIC cells are not
    nic0 = topo.nics[0]
    assert nic0.gpu_classes[0] == LinkClass.parse("PXB") and 4 not in nic0.gpu_classes
    assert any("NIC8NIC9 ran together" in n and "NIC8 and NIC9" in n for n in notes), notes
    joined = [n for n in notes if "cells run together" in n]
    assert [n.split(":")[0] for n in joined] == ["line 8", "line 9", "line 10", "line 11"]
    assert "'NODEPXB'" in joined[1] and "its GPU cells are read, its NIC cells" in joined[1]
    # their affinity is still read
    assert [g.cpu_affinity for g in topo.gpus][4:] == ["56-111,168-223"] * 4


def test_posted_vllm_13855_through_the_cli(tmp_path):
    rc, out, err = gputopo_here("scan", "--from-smi", VLLM)
    assert rc == 0, err
    assert "NV18" in out and "cells run together" in err


def test_posted_vllm_13855_cannot_be_written_back_whole_and_says_so_in_one_line():
    rc, out, err = gputopo_here("scan", "--from-smi", VLLM, "--format", "smi")
    assert rc == 2 and "Traceback" not in err
    assert "cannot write this topology as `nvidia-smi topo -m` text" in err and "not read" in err


def test_written_glued_names_whose_numbering_has_a_gap_are_refused():
    text = VLLM.read_text().replace("NIC8NIC9", "NIC8NIC19")
    with pytest.raises(InputFileError, match="run together"):
        _read(text)


def test_written_joined_cells_inside_the_gpu_block_are_refused():
    lines = VLLM.read_text().splitlines()
    lines[7] = lines[7].replace("NV18\tNV18\tNV18\tNV18\t X ", "NV18NV18\tNV18\tNV18\t X ", 1)
    with pytest.raises(InputFileError):
        _read("\n".join(lines) + "\n")
