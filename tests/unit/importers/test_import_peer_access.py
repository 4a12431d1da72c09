"""Peer access as the importers read it: p2pBandwidthLatencyTest's "P2P=Enabled" figures of a
pair without peer access are recorded as staged copies (never ``p2p.copy``), and nvbandwidth's
waivers are kept as the fact they are (the testcases it waives only when no GPU pair can access
a peer), named or not.

The texts below marked "written, not posted" are built in the layout the tools print (cuda-samples
p2pBandwidthLatencyTest.cu; nvbandwidth output.cpp / nvbandwidth.cpp v0.8: a waived testcase is
printed as a bare ``Waived: `` line in place of ``Running X.``); the posted outputs are the
fixtures named in tests/fixtures/README.md."""

from __future__ import annotations

from gputopo.importers.nvbandwidth_import import read_nvbandwidth
from gputopo.importers.nvbandwidth_records import UNNAMED_WAIVER
from gputopo.importers.p2pbw_import import NO_PEER_SERIES, p2pbw_measurements, read_p2pbw
from helpers.paths import FIXTURES

P2P_4090 = FIXTURES / "p2pbw" / "chlc-blog_8x4090_stock-driver_p2p-none_no-device-header.txt"
STELLINE = FIXTURES / "p2pbw" / "stelline_asus-esc8000a_4xrtx6000ada.txt"
NVB_2080TI = FIXTURES / "nvbandwidth" / "nvbandwidth-13_2x2080ti_v0.2_d2d_write_ce_waiving.txt"
NVB_JSON = FIXTURES / "nvbandwidth" / "constructed_json_v0.8_2gpu_read_ce_h2d_waived.json"

# Written, not posted: nvbandwidth v0.8 on two GeForce cards without peer access, default run
# cut to its first testcases: the host copies run, the peer testcases print "Waived: ".
NVB_V08_2GPU_WAIVED = """nvbandwidth Version: v0.8
Built from Git version: v0.8

CUDA Runtime Version: 12080
CUDA Driver Version: 12080
Driver Version: 570.133.07

rig-4090
Device 0: NVIDIA GeForce RTX 4090 (00000000:01:00)
Device 1: NVIDIA GeForce RTX 4090 (00000000:41:00)

Running host_to_device_memcpy_ce.
memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)
           0         1
 0     24.91     25.02

SUM host_to_device_memcpy_ce 49.93

Waived: 
Waived: 
Running device_local_copy.
memcpy local GPU(column) bandwidth (GB/s)
           0         1
 0    1873.40   1869.10

SUM device_local_copy 3742.50

NOTE: The reported results may not reflect the full capabilities of the platform.
Performance can vary with software drivers, hardware clocks, and system topology.
"""

# Written, not posted: the same run on one GPU (nvbandwidth waives every peer testcase there).
NVB_V08_1GPU_WAIVED = """nvbandwidth Version: v0.8
Built from Git version: v0.8

CUDA Runtime Version: 12080
CUDA Driver Version: 12080
Driver Version: 570.133.07

Device 0: NVIDIA A100-SXM4-80GB (00000000:07:00)

Running host_to_device_memcpy_ce.
memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)
           0
 0     24.91

SUM host_to_device_memcpy_ce 24.91

Waived: 
"""

# Written, not posted: p2pBandwidthLatencyTest on two GeForce RTX 4090 with its Device lines
# and CANNOT lines, unidirectional matrices only.
P2P_2X4090 = """[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]
Device: 0, NVIDIA GeForce RTX 4090, pciBusID: 1, pciDeviceID: 0, pciDomainID:0
Device: 1, NVIDIA GeForce RTX 4090, pciBusID: 41, pciDeviceID: 0, pciDomainID:0
Device=0 CANNOT Access Peer Device=1
Device=1 CANNOT Access Peer Device=0

***NOTE: In case a device doesn't have P2P access to other one, it falls back to normal memcopy procedure.
So you can see lesser Bandwidth (GB/s) and unstable Latency (us) in those cases.

P2P Connectivity Matrix
     D\\D     0     1
     0       1     0
     1       0     1
Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)
   D\\D     0      1
     0 909.49  18.77
     1  19.95 919.12
Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)
   D\\D     0      1
     0 910.02  18.83
     1  19.95 920.20
P2P=Enabled Latency (P2P Writes) Matrix (us)
   GPU     0      1
     0   1.54  20.26
     1  11.60   1.48
"""


def test_p2pbw_without_peer_access_records_staged_series_not_p2p_copy():
    out = read_p2pbw(str(P2P_4090))
    assert all(out.peer_access(i, j) is False for i in range(8) for j in range(8) if i != j)
    ms = p2pbw_measurements(out)
    tests = {m.test for m in ms}
    assert "p2p.copy" not in tests and "p2p.copy_bidir" not in tests  # the old code labelled them p2p.copy
    assert {"p2p.staged_no_peer", "p2p.staged_no_peer_bidir", "p2p.staged", "p2p.staged_bidir"} <= tests
    enabled = [m for m in ms if "p2p-enabled" in m.extra["matrix"] and len(m.gpus) == 2]
    assert enabled and all(m.test in NO_PEER_SERIES or m.test.startswith("p2p.latency_staged_no_peer") for m in enabled)
    assert all(m.extra["peer_access"] is False and "host memory" in m.extra["staged"] for m in enabled)
    # the figures themselves are kept as printed: row 0 -> column 1 of the P2P=Enabled writes matrix
    (m,) = [m for m in ms if m.test == "p2p.staged_no_peer" and m.direction == "0->1"]
    assert m.extra["printed"] == 18.83 and round(m.algbw_gbps, 2) == 18.83


def test_p2pbw_with_peer_access_keeps_p2p_copy():
    ms = p2pbw_measurements(read_p2pbw(str(STELLINE)))
    assert not {m.test for m in ms} & set(NO_PEER_SERIES)
    assert any(m.test == "p2p.copy" for m in ms)


def test_p2pbw_written_2x4090_latency_named_staged(tmp_path):
    p = tmp_path / "p2p.txt"
    p.write_text(P2P_2X4090)
    out = read_p2pbw(str(p))
    assert [d.name for d in out.devices] == ["NVIDIA GeForce RTX 4090"] * 2 and out.problems == []
    tests = {m.test for m in p2pbw_measurements(out)}
    assert tests == {"p2p.staged", "self.d2d", "p2p.staged_no_peer", "p2p.latency_staged_no_peer"}


def test_nvbandwidth_v02_waiving_line_posted():
    out = read_nvbandwidth(str(NVB_2080TI))
    assert out.waived == ["device_to_device_memcpy_write_ce"] and out.matrices == []
    assert out.peer_waivers() == ["device_to_device_memcpy_write_ce"]
    assert out.summary()["waived_no_peer_access"] == ["device_to_device_memcpy_write_ce"]
    assert len(out.devices) == 2


def test_nvbandwidth_v08_unnamed_waived_is_not_pinned_on_the_testcase_above(tmp_path):
    p = tmp_path / "nvb.txt"
    p.write_text(NVB_V08_2GPU_WAIVED)
    out = read_nvbandwidth(str(p))
    # "Waived: " stands in place of "Running X.": the old parser named it after host_to_device_memcpy_ce
    assert out.waived == [UNNAMED_WAIVER, UNNAMED_WAIVER]
    assert "host_to_device_memcpy_ce" not in out.waived
    assert out.peer_waivers() == out.waived and out.peer_testcases_measured() == []
    assert out.problems == []


def test_nvbandwidth_multinode_waiver_is_not_a_peer_access_fact(tmp_path):
    p = tmp_path / "nvb.txt"
    p.write_text("nvbandwidth Version: v0.8\nProcess 0 (node-a): device 0: NVIDIA GB200 (00000000:01:00)\n"
                 "Waived: \n")
    out = read_nvbandwidth(str(p))
    assert out.multinode and out.waived == [UNNAMED_WAIVER] and out.peer_waivers() == []


def test_nvbandwidth_json_waiver_next_to_a_measured_peer_testcase():
    out = read_nvbandwidth(str(NVB_JSON))
    assert out.peer_waivers() == ["all_to_one_write_ce"]
    assert out.peer_testcases_measured() == ["device_to_device_memcpy_read_ce"]
