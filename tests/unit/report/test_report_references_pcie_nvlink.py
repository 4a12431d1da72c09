"""Published figures for PCIe cards joined by an NVLink bridge (A100 80GB PCIe, H100 PCIe; class
NV12): each row is what a posted p2pBandwidthLatencyTest measured on a healthy machine (its source
says which figures were measured and which are the datasheet's spec). A figure near a row is "as
expected" (a note citing it), one far below is `slow` citing it, and SXM rows and these never stand
for each other. The posted outputs are imported as posted, with the machine's own `topo -m`.
"""

from __future__ import annotations

import json

import pytest

from gputopo.model import Gpu, HostInfo, LinkClass, Measurement, Pair, PcieLink, Topology
from gputopo.report.bandwidth_findings import slow_findings
from gputopo.report.expected_basis import expected_notes, judge_rate
from gputopo.report.headline import headlines
from gputopo.report.references import REFERENCE_FRACTION, reference_rows
from helpers.cli import gputopo_here
from helpers.paths import FIXTURES

A100_PCIE, H100_PCIE = "NVIDIA A100 80GB PCIe", "NVIDIA H100 PCIe"

#: row id -> (GPU name, pair class of the measured pair, test)
CASES = {
    "a100-pcie-nv12-p2p": (A100_PCIE, "NV12", "p2p.copy"),
    "a100-pcie-nv12-p2p-bidir": (A100_PCIE, "NV12", "p2p.copy_bidir"),
    "a100-pcie-staged": (A100_PCIE, "SYS", "p2p.staged"),
    "h100-pcie-nv12-p2p": (H100_PCIE, "NV12", "p2p.copy"),
    "h100-pcie-nv12-p2p-bidir": (H100_PCIE, "NV12", "p2p.copy_bidir"),
    "h100-pcie-nv12-staged": (H100_PCIE, "NV12", "p2p.staged"),
}


def pair_machine(name: str, cls: str) -> Topology:
    gpus = [Gpu(nvml_index=i, name=name, uuid=f"GPU-{i}", pci_bus_id=f"00000000:{16 + i:02X}:00.0",
                cuda_index=i, pcie=PcieLink(gen_current=4, gen_max=4, width_current=16, width_max=16))
            for i in range(2)]
    lc = LinkClass.parse(cls)
    return Topology(gpus=gpus, pairs=[Pair(gpus=(0, 1), link_class=lc, nvlink_count=lc.nvlinks)],
                    host=HostInfo(cpu_vendor=None), machine="t")


def measured(test, gbps, cls, size=1 << 30):
    t = size / (gbps * 1e9)
    return Measurement(test=test, gpus=(0, 1), size_bytes=size, samples_s=[t, t, t], timing="cuda-events",
                       fabric="cuda", figures_of="gpus", link_class=cls, direction=None, wrong=0, busbw_factor=1.0)


def judged(row_id: str, fraction: float):
    name, cls, test = CASES[row_id]
    ref = {r.id: r for r in reference_rows()}[row_id]
    topo = pair_machine(name, cls)
    return ref, topo, headlines([measured(test, ref.gbps * fraction, cls)], topo)


@pytest.mark.parametrize("row_id", sorted(CASES))
def test_each_row_says_what_was_measured_and_what_is_spec(row_id):
    ref = {r.id: r for r in reference_rows()}[row_id]
    assert "measured" in ref.source and "spec" in ref.source


@pytest.mark.parametrize("row_id", sorted(CASES))
def test_a_figure_near_the_row_is_as_expected_and_one_far_below_is_slow(row_id):
    ref, topo, heads = judged(row_id, 0.97)
    j = judge_rate(heads[0], topo)
    assert j is not None and j.reference is not None and j.reference.id == row_id and j.as_expected
    assert slow_findings(heads, topo) == []
    [note] = expected_notes(heads, topo)
    assert f"97% of the {ref.gbps:g} GB/s algbw published for {ref.machine}" in note and ref.source in note
    ref, topo, heads = judged(row_id, 0.5)
    [f] = slow_findings(heads, topo)
    assert f.severity == "warning" and f.evidence["basis"] == "reference"
    assert f.evidence["measured"][0]["reference"]["id"] == row_id
    _, topo, heads = judged(row_id, REFERENCE_FRACTION + 0.01)
    assert slow_findings(heads, topo) == []


def test_pcie_and_sxm_rows_never_stand_for_each_other():
    """An H100 SXM or A100 SXM pair of class NV12 (no such machine is known, so nothing applies)
    is not judged by the PCIe cards' rows, and an H100 NVL (no posted figure found) is not either."""
    for name in ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA H100 NVL", "NVIDIA A100-PCIE-40GB"):
        topo = pair_machine(name, "NV12")
        heads = headlines([measured("p2p.copy", 250.0, "NV12")], topo)
        j = judge_rate(heads[0], topo)
        assert j is None or j.basis != "reference", name


# ------------------------------------------------------------------ the posted outputs, imported

#: The posted pairs (`nvidia-smi topo -m` + p2pBandwidthLatencyTest of one machine), kept as
#: fixtures (sources in tests/fixtures/README.md): 2x H100 PCIe with an NVLink bridge
#: (HPE-Japan-Presales/e-learning), 4x A100 80GB PCIe with pairs 0-1 and 2-3 bridged (sushruta's blog).
H100_PAIR = FIXTURES / "p2pbw" / "hpe-japan-elearning_dl380a-gen11_2xh100-pcie_nv12-bridge"
A100_PAIR = FIXTURES / "p2pbw" / "sushruta-blog_4xa100-80gb-pcie_nv12-pairs_cannot-access-across"
H100_P2P = H100_PAIR.with_name(H100_PAIR.name + ".txt").read_text()
H100_TOPO = H100_PAIR.with_name(H100_PAIR.name + ".topo.txt").read_text()
A100_P2P = A100_PAIR.with_name(A100_PAIR.name + ".txt").read_text()
A100_TOPO = A100_PAIR.with_name(A100_PAIR.name + ".topo.txt").read_text()


def imported(tmp_path, p2p: str, topo: str):
    tmp_path.mkdir()
    (tmp_path / "p2p.txt").write_text(p2p)
    (tmp_path / "topo.txt").write_text(topo)
    rc, out, err = gputopo_here("import", "p2pbw", tmp_path / "p2p.txt", "--topo", tmp_path / "topo.txt",
                                "--out", tmp_path / "run", "--no-history")
    assert rc == 0, err
    return json.loads((tmp_path / "run" / "summary.json").read_text())


def slower_bridge(text: str, factor: float) -> str:
    """WRITTEN, not posted: the unidirectional P2P=Enabled figures above 100 GB/s (the bridged
    pairs) divided by ``factor``."""
    out, scale = [], False
    for ln in text.splitlines():
        if ln.startswith(("Unidirectional", "Bidirectional", "P2P=")):
            scale = ln.startswith("Unidirectional P2P=Enabled")
        cells = ln.split()
        if scale and cells and cells[0].isdigit():
            row = int(cells[0])
            cells[1:] = [c if k == row or float(c) < 100 else f"{float(c) / factor:.2f}"
                         for k, c in enumerate(cells[1:])]
            ln = "     " + "  ".join(cells)
        out.append(ln)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("p2p, topo, ids", [
    (H100_P2P, H100_TOPO, {"h100-pcie-nv12-p2p", "h100-pcie-nv12-p2p-bidir", "h100-pcie-nv12-staged"}),
    (A100_P2P, A100_TOPO, {"a100-pcie-nv12-p2p", "a100-pcie-nv12-p2p-bidir", "a100-pcie-staged"}),
], ids=["h100-pcie", "a100-80gb-pcie"])
def test_the_posted_outputs_read_as_expected_and_a_slow_bridge_is_flagged(tmp_path, p2p, topo, ids):
    summary = imported(tmp_path / "posted", p2p, topo)
    assert summary["verdict"] == "ok" and "slow" not in {f["kind"] for f in summary["findings"]}
    cited = {r.id for r in reference_rows() if r.id in ids and any(
        n.startswith("as expected") and r.source in n for n in summary["notes"])}
    assert cited == ids
    slow = imported(tmp_path / "slow", slower_bridge(p2p, 3.0), topo)
    found = [f for f in slow["findings"] if f["kind"] == "slow"]
    assert found and {m["reference"]["id"] for f in found for m in f["evidence"]["measured"]} == {
        next(i for i in ids if i.endswith("nv12-p2p"))}
    assert slow["verdict"] == "degraded"
