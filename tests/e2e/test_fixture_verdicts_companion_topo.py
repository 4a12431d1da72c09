"""tests/helpers/fixture_verdicts.py with a companion topology: a p2pbw or nvbandwidth fixture
``X.txt`` beside ``X.topo.txt`` (the same post's `nvidia-smi topo -m`) is imported with
``--topo X.topo.txt``; the companion gets its own row as `scan --from-smi` reads it, unless it is a
byte-for-byte copy of a file in tests/fixtures/topo/ (whose row already says it).

The posted pairs are in tests/fixtures/p2pbw/ (sources in tests/fixtures/README.md); the
nvbandwidth case below is WRITTEN in a temporary folder (no posted nvbandwidth output with its
machine's `topo -m` was found), from the posted issue-50 output and the 6-GPU topology
tests/unit/importers/test_import_cuda_numbering.py writes for it.
"""

from __future__ import annotations

import shutil

import pytest

from helpers import fixture_verdicts as fv
from helpers.paths import DATA

P2PBW = fv.FIXTURES / "p2pbw"
PAIRS = sorted(p for p in P2PBW.iterdir() if p.name.endswith(fv.TOPO_SUFFIX))
NVB_A6000 = fv.FIXTURES / "nvbandwidth" / "nvbandwidth-50_6xa6000_d2d_read_ce_v0.8.txt"
#: WRITTEN (as in test_import_cuda_numbering.py): 6 GPUs, 0, 1, 3 NODE on one CPU, 2, 4, 5 on the other.
A6000_TOPO = (DATA / "topo_written" / "a6000-6gpu_node-sys.txt").read_text()


def test_the_posted_pairs_are_there():
    """At least the moved H100 PCIe / A100 PCIe pairs and the pairs found since (see README)."""
    assert len(PAIRS) >= 6
    for topo in PAIRS:
        assert topo.with_name(topo.name[: -len(fv.TOPO_SUFFIX)] + ".txt").is_file(), topo.name


@pytest.mark.parametrize("topo", PAIRS, ids=lambda p: p.name)
def test_a_pair_is_imported_with_its_topology(topo):
    output = topo.with_name(topo.name[: -len(fv.TOPO_SUFFIX)] + ".txt")
    assert fv.companion(output) == topo
    r = fv.row(output)
    assert r["command"] == "import p2pbw" and r["topo"] == topo.name


def test_a_companion_is_read_as_a_topo_fixture_once():
    """Its own row is `scan --from-smi`; a copy of a tests/fixtures/topo/ file gets none."""
    rows = set(fv.fixture_files())
    topo_texts = {p.read_bytes() for p in (fv.FIXTURES / "topo").iterdir()}
    for topo in PAIRS:
        copied = topo.read_bytes() in topo_texts
        assert (topo in rows) is not copied, topo.name
        if not copied:
            assert fv.row(topo)["command"] == "scan --from-smi"
    assert fv.companion(PAIRS[0]) is None  # a companion has no companion of its own


def test_an_nvbandwidth_output_gets_its_companion_too(tmp_path, monkeypatch):
    folder = tmp_path / "nvbandwidth"
    folder.mkdir()
    shutil.copy(NVB_A6000, folder / "a6000.txt")
    monkeypatch.setattr(fv, "FIXTURES", tmp_path)
    without = fv.row(folder / "a6000.txt")
    assert "topo" not in without and without["rc"] == 0
    (folder / "a6000.topo.txt").write_text(A6000_TOPO)
    assert fv.fixture_files() == [folder / "a6000.topo.txt", folder / "a6000.txt"]
    paired = fv.row(folder / "a6000.txt")
    assert paired["topo"] == "a6000.topo.txt" and paired["rc"] == 0
    # another machine's topology (2 GPUs for a 6-GPU output) is refused: --topo really was passed
    (folder / "a6000.topo.txt").write_text("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
                                             "GPU0\t X \tNODE\t0-31\t0\nGPU1\tNODE\t X \t0-31\t0\n")
    refused = fv.row(folder / "a6000.txt")
    assert refused["rc"] == 2 and "topo" in refused
