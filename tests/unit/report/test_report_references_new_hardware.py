"""Published reference figures for the hardware people have now (H200, B200, GB200 within a tray
and across trays, RTX 4090): for each row, a figure near it is said to be "as expected" (a note
citing the row, no finding) and one far below is flagged (a `slow` finding citing the row);
and a real posted GB200 two-node output reads as expected through `gputopo import nccl-tests`.
"""

from __future__ import annotations

import json
from itertools import combinations

import pytest

from gputopo.model import Gpu, HostInfo, LinkClass, Measurement, Pair, PcieLink, Topology
from gputopo.report.bandwidth_findings import slow_findings
from gputopo.report.expected_basis import expected_notes, judge_rate
from gputopo.report.headline import headlines
from gputopo.report.imported_tests import STAGED_TESTS, is_bidirectional_total
from gputopo.report.references import REFERENCE_FRACTION, reference_rows
from helpers.cli import gputopo_here
from helpers.paths import FIXTURES

H200, B200, GB200 = "NVIDIA H200", "NVIDIA B200", "NVIDIA GB200"
RTX4090 = "NVIDIA GeForce RTX 4090"


def machine(name: str, n: int, cls=None, vendor=None, gen=5) -> Topology:
    """``n`` GPUs named ``name``; every pair of class ``cls`` (None: no pairs, as a job over
    several hosts is imported: no one machine's topology has a class for it)."""
    gpus = [Gpu(nvml_index=i, name=name, uuid=f"GPU-{i}", pci_bus_id=f"00000000:{16 + i:02X}:00.0",
                cuda_index=i, pcie=PcieLink(gen_current=gen, gen_max=gen, width_current=16, width_max=16))
            for i in range(n)]
    pairs = ([] if cls is None else
             [Pair(gpus=(i, j), link_class=LinkClass.parse(cls), nvlink_count=LinkClass.parse(cls).nvlinks)
              for i, j in combinations(range(n), 2)])
    return Topology(gpus=gpus, pairs=pairs, host=HostInfo(cpu_vendor=vendor), machine="t")


def measured(test, gpus, gbps, busbw_factor=1.0, cls=None, size=1 << 30):
    t = size * busbw_factor / (gbps * 1e9)
    return Measurement(test=test, gpus=tuple(gpus), size_bytes=size, samples_s=[t, t, t], timing="cuda-events",
                       fabric="cuda", figures_of="gpus", link_class=cls, direction=None, wrong=0, busbw_factor=busbw_factor)


def all_reduce(n):
    return 2 * (n - 1) / n


#: row id -> (GPU name, GPUs in the machine, their pair class, test, GPUs measured, busbw factor,
#: the measurement's own link class)
CASES = {
    "h200-nv18-allreduce-8": (H200, 8, "NV18", "collective.all_reduce", 8, all_reduce(8), "NV18"),
    "h200-host-h2d": (H200, 8, "NV18", "self.h2d", 1, 1.0, None),
    "h200-host-d2h": (H200, 8, "NV18", "self.d2h", 1, 1.0, None),
    "b200-nv18-allreduce-8": (B200, 8, "NV18", "collective.all_reduce", 8, all_reduce(8), "NV18"),
    "gb200-nv18-allreduce-4": (GB200, 4, "NV18", "collective.all_reduce", 4, all_reduce(4), "NV18"),
    "gb200-host-h2d": (GB200, 4, "NV18", "self.h2d", 1, 1.0, None),
    "gb200-host-d2h": (GB200, 4, "NV18", "self.d2h", 1, 1.0, None),
    "gb200-mnnvl-allreduce-8": (GB200, 8, None, "collective.all_reduce", 8, all_reduce(8), "MNNVL"),
    "gb200-mnnvl-allreduce-72": (GB200, 72, None, "collective.all_reduce", 72, all_reduce(72), "MNNVL"),
    "rtx4090-staged": (RTX4090, 8, "NODE", "p2p.staged", 2, 1.0, None),
    "rtx4090-host-h2d": (RTX4090, 8, "NODE", "self.h2d", 1, 1.0, None),
    "rtx4090-host-d2h": (RTX4090, 8, "NODE", "self.d2h", 1, 1.0, None),
}


def judged_run(row_id: str, fraction: float, test=None):
    name, n, cls, row_test, k, factor, m_cls = CASES[row_id]
    ref = {r.id: r for r in reference_rows()}[row_id]
    topo = machine(name, n, cls)
    heads = headlines([measured(test or row_test, range(k), ref.gbps * fraction, factor, m_cls)], topo)
    assert len(heads) == 1
    return ref, topo, heads


def test_every_new_row_is_tested_here():
    ids = {r.id for r in reference_rows()}
    assert set(CASES) <= ids


@pytest.mark.parametrize("row_id", sorted(CASES))
def test_a_figure_near_the_row_is_as_expected_and_cites_it(row_id):
    ref, topo, heads = judged_run(row_id, 0.97)
    j = judge_rate(heads[0], topo)
    assert j is not None and j.reference is not None and j.reference.id == row_id
    assert j.as_expected and slow_findings(heads, topo) == []
    [note] = expected_notes(heads, topo)
    assert note.startswith("as expected: ") and f"97% of the {ref.gbps:g} GB/s {ref.metric} published for" in note
    assert ref.source in note


@pytest.mark.parametrize("row_id", sorted(CASES))
def test_a_figure_far_below_the_row_is_flagged_slow(row_id):
    ref, topo, heads = judged_run(row_id, 0.4)
    [f] = slow_findings(heads, topo)
    assert f.kind == "slow" and f.severity == "warning"
    assert f.evidence["basis"] == "reference" and f.evidence["measured"][0]["reference"]["id"] == row_id
    assert f"40% of the {ref.gbps:g} GB/s {ref.metric} published for {ref.machine}" in f.message
    assert expected_notes(heads, topo) == []
    # just above the threshold: nothing to flag
    _, topo, heads = judged_run(row_id, REFERENCE_FRACTION + 0.01)
    assert slow_findings(heads, topo) == []


def test_b200_and_gb200_rows_do_not_stand_for_each_other():
    """'B200' is in 'GB200': an 8-GPU GB200 NV18 set must not be judged by the HGX B200 figure."""
    topo = machine(GB200, 8, "NV18")
    heads = headlines([measured("collective.all_reduce", range(8), 500, all_reduce(8), "NV18")], topo)
    assert judge_rate(heads[0], topo) is None
    topo = machine(B200, 4, "NV18")
    heads = headlines([measured("collective.all_reduce", range(4), 500, all_reduce(4), "NV18")], topo)
    assert judge_rate(heads[0], topo) is None


def test_rtx4090_staged_row_judges_every_copy_through_host_memory():
    """The row is for copies staged through host memory, whatever series name the importer gives
    them (P2P=Disabled, or P2P=Enabled on a pair without peer access); never peer copies."""
    one_way = [t for t in STAGED_TESTS if not is_bidirectional_total(t)]
    assert "p2p.staged" in one_way
    for test in one_way:
        _, topo, heads = judged_run("rtx4090-staged", 0.4, test=test)
        [f] = slow_findings(heads, topo)
        assert f.evidence["measured"][0]["reference"]["id"] == "rtx4090-staged", test
    _, topo, heads = judged_run("rtx4090-staged", 1.0, test="p2p.copy")
    j = judge_rate(heads[0], topo)
    assert j is None or j.reference is None or j.reference.id != "rtx4090-staged"


def test_across_trays_with_the_link_unknown_below_the_figure_is_said_not_called_a_fault():
    """A job over several hosts has no link class in any one machine's topology: the MNNVL rows
    are offered to it. Reaching them is as expected; below them is info (those hosts may be
    joined only by the network: another rack, GB200 NVL4 nodes), never a warning."""
    ref = {r.id: r for r in reference_rows()}["gb200-mnnvl-allreduce-8"]
    topo = machine(GB200, 8, None)
    fine = headlines([measured("collective.all_reduce", range(8), 845, all_reduce(8))], topo)
    assert slow_findings(fine, topo) == []
    [note] = expected_notes(fine, topo)
    assert "101% of the 840 GB/s busbw published for 2 GB200 trays" in note
    assert note.endswith("the link between the hosts is not in this output")
    low = headlines([measured("collective.all_reduce", range(8), 84, all_reduce(8))], topo)
    [f] = slow_findings(low, topo)
    assert f.severity == "info" and f.evidence["link_known"] is False
    assert "10% of the 840 GB/s" in f.message and "not in this output" in f.message
    assert "NCCL_MNNVL_ENABLE" in (f.cause or "") and "network" in (f.cause or "")
    assert ref.link_class == "MNNVL"
    # four GPUs of unknown class (a tray imported without its topology): no row says anything
    four = machine(GB200, 4, None)
    heads = headlines([measured("collective.all_reduce", range(4), 100, all_reduce(4))], four)
    assert judge_rate(heads[0], four) is None and slow_findings(heads, four) == []


# ----------------------------------------------------------------- a real posted output, imported

POSTED = FIXTURES / "nccl-tests" / "oci-hpc-oke_gb200-2node-mnnvl_all_reduce_tail20_noheader.txt"
#: WRITTEN, not posted: the header nccl-tests prints above the posted rows (the post is the tail of
#: `kubectl logs`), with the ranks, hosts and bus ids the posted "Destroy COMPLETE" lines give.
BUS = {0: "0008:01:00", 1: "0009:01:00", 2: "0018:01:00", 3: "0019:01:00"}
WRITTEN_HEADER = [
    "# nThread 1 nGpus 1 minBytes 8 maxBytes 34359738368 step: 2(factor) warmup iters: 5 iters: 20 "
    "agg iters: 1 validation: 1 graph: 0", "#", "# Using devices",
    *(f"#  Rank {r:2d} Group  0 Pid {60 + r % 4:6d} on nccl-test-worker-{r // 4} device {r % 4:2d} "
      f"[{BUS[r % 4]}] NVIDIA GB200" for r in range(8)),
    "#",
    "#                                                              out-of-place                       in-place",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)",
]


def posted_with_header(slower: float = 1.0) -> str:
    """The posted rows under the written header; ``slower`` > 1 makes a WRITTEN variant whose
    times are that many times longer (bandwidths divided by it)."""
    lines = POSTED.read_text().splitlines()
    out = [lines[0], *WRITTEN_HEADER]
    for ln in lines[1:]:
        f = ln.split()
        if slower != 1.0 and len(f) == 13 and f[0].isdigit():
            f[5], f[9] = (f"{float(f[i]) * slower:.1f}" for i in (5, 9))
            f[6], f[7], f[10], f[11] = (f"{float(f[i]) / slower:.2f}" for i in (6, 7, 10, 11))
            ln = "  ".join(f)
        out.append(ln)
    return "\n".join(out) + "\n"


def imported(tmp_path, text: str):
    log = tmp_path / "gb200_all_reduce.txt"
    log.write_text(text)
    rc, out, err = gputopo_here("import", "nccl-tests", log, "--out", tmp_path / "run")
    assert rc == 0, err
    return out, json.loads((tmp_path / "run" / "summary.json").read_text()), (tmp_path / "run" / "report.md").read_text()


def test_posted_gb200_two_tray_all_reduce_reads_as_expected(tmp_path):
    out, summary, md = imported(tmp_path, posted_with_header())
    assert "peak busbw 847 GB/s" in out
    assert "as expected: collective.all_reduce on GPUs 0-7: 847 GB/s busbw = 101% of the 840 GB/s" in " ".join(out.split())
    assert summary["verdict"] == "ok" and summary["findings"] == []
    [note] = [n for n in summary["notes"] if n.startswith("as expected")]
    assert "collective.all_reduce on GPUs 0-7: 847 GB/s busbw = 101% of the 840 GB/s busbw" in note
    assert "oracle-quickstart/oci-hpc-oke" in note
    assert note in md


def test_posted_gb200_output_ten_times_slower_is_flagged(tmp_path):
    out, summary, md = imported(tmp_path, posted_with_header(slower=10.0))
    [f] = summary["findings"]
    assert f["kind"] == "slow" and f["severity"] == "info"
    assert "84.7 GB/s busbw = 10% of the 840 GB/s busbw published for 2 GB200 trays" in f["message"]
    assert f["evidence"]["measured"][0]["reference"]["id"] == "gb200-mnnvl-allreduce-8"
    assert not [n for n in summary["notes"] if n.startswith("as expected")]
    assert "10% of the 840 GB/s" in out


NVB_4090 = FIXTURES / "nvbandwidth" / "nvbandwidth-15_8xrtx4090_v0.2_excerpt.txt"


def test_posted_rtx4090_host_copies_read_as_expected(tmp_path):
    """NVIDIA/nvbandwidth issue 15 as posted: its one-way host copies (23.90-26.38 and
    26.25-27.11 GB/s) are as expected; its host_to_device copy measured while the opposite one
    runs (11-16 GB/s) is no one-way copy and is not judged by the one-way figure."""
    rc, out, err = gputopo_here("import", "nvbandwidth", NVB_4090, "--out", tmp_path / "run")
    assert rc == 0, err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert "slow" not in {f["kind"] for f in summary["findings"]}
    notes = [n for n in summary["notes"] if n.startswith("as expected")]
    assert any("self.h2d" not in n and "host_to_device_memcpy_ce on GPUs 0-7" in n
               and "of the 23.9 GB/s algbw published for 8x RTX 4090" in n for n in notes), notes
    assert any("device_to_host_memcpy_ce on GPUs 0-7" in n and "26.2 GB/s" in n for n in notes), notes
    assert not any("bidirectional" in n for n in notes)


def test_rtx4090_host_copies_far_below_are_flagged(tmp_path):
    """WRITTEN, not posted: the issue-15 output with GPU 3's host-to-device figure at 6 GB/s."""
    text = NVB_4090.read_text()
    row = next(ln for ln in text.splitlines() if ln.startswith("0 ") and "25.50" in ln)
    cells = row.split()
    cells[4] = "6.00"
    log = tmp_path / "nvbandwidth_4090_slow_gpu3.txt"
    log.write_text(text.replace(row, "0     " + "     ".join(cells[1:])))
    rc, out, err = gputopo_here("import", "nvbandwidth", log, "--out", tmp_path / "run")
    assert rc == 0, err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    [f] = [f for f in summary["findings"] if f["kind"] == "slow"]
    assert f["severity"] == "warning" and f["gpus"] == [3]
    assert "25% of the 23.9 GB/s algbw published for 8x RTX 4090" in f["message"]


P2P_4090 = FIXTURES / "p2pbw" / "chlc-blog_8x4090_stock-driver_p2p-none_no-device-header.txt"


def p2p_4090_with_devices(slower: float = 1.0) -> str:
    """The posted output (blog.chlc.cc) under WRITTEN device lines (as the sample prints them; the
    post left them out: without them the GPU model is unknown and no model's row applies);
    ``slower`` > 1 divides the unidirectional matrices' peer cells by it (a WRITTEN variant)."""
    lines = P2P_4090.read_text().splitlines()
    head = ["[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]",
            *(f"Device: {i}, {RTX4090}, pciBusID: {0x16 + 0x10 * i:x}, pciDeviceID: 0, pciDomainID:0" for i in range(8)),
            *(f"Device={i} CANNOT Access Peer Device={j}" for i in range(8) for j in range(8) if i != j)]
    out, scale = [lines[0], *head], False
    for ln in lines[1:]:
        if ln.startswith(("Unidirectional", "Bidirectional", "P2P=")):
            scale = ln.startswith("Unidirectional")
        cells = ln.split()
        if scale and slower != 1.0 and len(cells) == 9 and cells[0].isdigit():
            row = int(cells[0])
            cells[1:] = [c if k == row else f"{float(c) / slower:.2f}" for k, c in enumerate(cells[1:])]
            ln = "     " + "  ".join(cells)
        out.append(ln)
    return "\n".join(out) + "\n"


def test_posted_rtx4090_staged_copies_read_as_expected(tmp_path):
    """The 8 x RTX 4090 output as posted (no peer access on any pair: every figure is a copy
    staged through host memory), imported without --topo (pair classes unknown: a staged copy
    crosses each GPU's PCIe link whatever joins the pair): as expected, nothing slow."""
    log = tmp_path / "p2p_4090.txt"
    log.write_text(p2p_4090_with_devices())
    rc, out, err = gputopo_here("import", "p2pbw", log, "--out", tmp_path / "run")
    assert rc == 0, err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert "slow" not in {f["kind"] for f in summary["findings"]}
    notes = [n for n in summary["notes"] if n.startswith("as expected")]
    assert any(n.startswith("as expected: p2p.staged on 28 pairs: 18.4-20.6 GB/s algbw")
               and "published for 8x RTX 4090 with the stock driver (no peer access)" in n for n in notes), notes
    assert not any("p2p.copy" in n for n in notes)


def test_rtx4090_staged_copies_far_below_are_flagged(tmp_path):
    log = tmp_path / "p2p_4090_slow.txt"
    log.write_text(p2p_4090_with_devices(slower=5.0))
    rc, out, err = gputopo_here("import", "p2pbw", log, "--out", tmp_path / "run")
    assert rc == 0, err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    slow = [f for f in summary["findings"] if f["kind"] == "slow"]
    assert len(slow) == 28 and {f["severity"] for f in slow} == {"warning"}
    assert {m["reference"]["id"] for f in slow for m in f["evidence"]["measured"]} == {"rtx4090-staged"}
    assert summary["verdict"] == "degraded"
