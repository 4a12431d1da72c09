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
                       fabric="cuda", link_class=cls, direction=None, wrong=0, busbw_factor=1.0)


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

#: HPE-Japan-Presales/e-learning gpu/h100/mgmt_gpu_on_dl380agen11.md (commit 80cd5bf2): `nvidia-smi
#: topo -m` and p2pBandwidthLatencyTest of 2x H100 PCIe with an NVLink bridge, as posted (the post
#: indents its code blocks by 6 spaces; that indent is removed here, nothing else).
H100_TOPO = """\
        GPU0    GPU1    CPU Affinity    NUMA Affinity   GPU NUMA ID
GPU0     X      NV12    32-63,96-127    1               N/A
GPU1    NV12     X      32-63,96-127    1               N/A

Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""
H100_P2P = """\
[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]
Device: 0, NVIDIA H100 PCIe, pciBusID: c2, pciDeviceID: 0, pciDomainID:0
Device: 1, NVIDIA H100 PCIe, pciBusID: d5, pciDeviceID: 0, pciDomainID:0
Device=0 CAN Access Peer Device=1
Device=1 CAN Access Peer Device=0

***NOTE: In case a device doesn't have P2P access to other one, it falls back to normal memcopy procedure.
So you can see lesser Bandwidth (GB/s) and unstable Latency (us) in those cases.

P2P Connectivity Matrix
     D\\D     0     1
     0       1     1
     1       1     1
Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)
   D\\D     0      1 
     0 1622.17  26.10 
     1  25.00 1634.15 
Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)
   D\\D     0      1 
     0 1634.15 256.62 
     1 256.99 1660.74 
Bidirectional P2P=Disabled Bandwidth Matrix (GB/s)
   D\\D     0      1 
     0 1669.42  35.17 
     1  35.23 1671.85 
Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)
   D\\D     0      1 
     0 1667.81 509.35 
     1 509.15 1669.81 
P2P=Disabled Latency Matrix (us)
   GPU     0      1 
     0   2.34  16.59 
     1  16.48   2.31 

   CPU     0      1 
     0   2.21   6.29 
     1   6.20   2.14 
P2P=Enabled Latency (P2P Writes) Matrix (us)
   GPU     0      1 
     0   2.35   2.56 
     1   2.52   2.31 

   CPU     0      1 
     0   2.24   1.72 
     1   1.75   2.18 
"""

#: sushruta/sushruta.github.io content/post/03302024-nvlink-and-gpu/index.md (commit 8111ce1f):
#: `nvidia-smi topo --matrix` and p2pBandwidthLatencyTest of 4x A100 80GB PCIe, pairs 0-1 and 2-3
#: NVLink-bridged, as posted.
A100_TOPO = """\
\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNV12\tSYS\tSYS\t0-23\t0\t\tN/A
GPU1\tNV12\t X \tSYS\tSYS\t24-47\t1\t\tN/A
GPU2\tSYS\tSYS\t X \tNV12\t48-71\t2\t\tN/A
GPU3\tSYS\tSYS\tNV12\t X \t72-95\t3\t\tN/A

Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""
A100_P2P = """\
[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]
Device: 0, NVIDIA A100 80GB PCIe, pciBusID: 0, pciDeviceID: 0, pciDomainID:1
Device: 1, NVIDIA A100 80GB PCIe, pciBusID: 0, pciDeviceID: 0, pciDomainID:2
Device: 2, NVIDIA A100 80GB PCIe, pciBusID: 0, pciDeviceID: 0, pciDomainID:3
Device: 3, NVIDIA A100 80GB PCIe, pciBusID: 0, pciDeviceID: 0, pciDomainID:4
Device=0 CAN Access Peer Device=1
Device=0 CANNOT Access Peer Device=2
Device=0 CANNOT Access Peer Device=3
Device=1 CAN Access Peer Device=0
Device=1 CANNOT Access Peer Device=2
Device=1 CANNOT Access Peer Device=3
Device=2 CANNOT Access Peer Device=0
Device=2 CANNOT Access Peer Device=1
Device=2 CAN Access Peer Device=3
Device=3 CANNOT Access Peer Device=0
Device=3 CANNOT Access Peer Device=1
Device=3 CAN Access Peer Device=2

***NOTE: In case a device doesn't have P2P access to other one, it falls back to normal memcopy procedure.
So you can see lesser Bandwidth (GB/s) and unstable Latency (us) in those cases.

P2P Connectivity Matrix
     D\\D     0     1     2     3
     0\t     1     1     0     0
     1\t     1     1     0     0
     2\t     0     0     1     1
     3\t     0     0     1     1
Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)
   D\\D     0      1      2      3 
     0 1508.20  21.51  21.63  21.80 
     1  21.40 1509.66  21.68  21.59 
     2  21.48  21.55 1509.66  21.60 
     3  21.49  21.66  21.60 1511.12 
Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)
   D\\D     0      1      2      3 
     0 1502.40 275.07  21.62  21.60 
     1 275.51 1521.42  21.69  21.50 
     2  21.46  21.72 1508.20 275.34 
     3  21.51  21.69 274.11 1521.42 
Bidirectional P2P=Disabled Bandwidth Matrix (GB/s)
   D\\D     0      1      2      3 
     0 1525.88  26.41  29.57  29.35 
     1  26.00 1531.86  29.68  29.49 
     2  27.41  27.69 1528.12  28.93 
     3  26.85  27.22  28.99 1529.61 
Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)
   D\\D     0      1      2      3 
     0 1531.11 516.19  29.58  29.35 
     1 515.51 1527.37  29.79  29.42 
     2  27.36  27.80 1528.86 517.45 
     3  27.07  27.19 515.35 1523.65 
P2P=Disabled Latency Matrix (us)
   GPU     0      1      2      3 
     0   2.61  21.89  20.48  17.81 
     1  11.68   2.72  14.22  20.16 
     2  18.63  15.70   2.48  13.97 
     3  18.73  18.53  18.04   2.49 

   CPU     0      1      2      3 
     0   2.65   7.81   6.98   6.28 
     1   7.10   2.55   6.22   6.19 
     2   7.20   6.47   2.29   5.74 
     3   6.64   6.49   5.61   2.30 
P2P=Enabled Latency (P2P Writes) Matrix (us)
   GPU     0      1      2      3 
     0   2.62   2.25  19.85  16.96 
     1   2.22   2.71  14.12  20.38 
     2  18.87  16.03   2.47   2.32 
     3  18.78  18.08   2.32   2.48 

   CPU     0      1      2      3 
     0   2.34   1.92   6.34   6.43 
     1   1.96   2.32   6.34   6.56 
     2   6.79   7.20   1.99   1.63 
     3   6.67   6.55   1.68   2.07 

NOTE: The CUDA Samples are not meant for performance measurements. Results may vary when GPU Boost is enabled.
"""


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
