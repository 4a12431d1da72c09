"""One GPU is one GPU (issue 47, item 14): a p2pBandwidthLatencyTest or nvbandwidth output of a
single GPU says there was no pair to measure and what was measured (the GPU's own copies), and a
single GPU's copy is that GPU's, never "the link between these GPUs"; nvbandwidth's headline series
is the unidirectional one; a latency testcase is a latency (no buffer size). The A100 output is
posted (tests/fixtures/README.md); the outputs written here are labelled WRITTEN (in the tools'
own print format, one change each from posted ones)."""

from __future__ import annotations

import csv
import json

from helpers.cli import gputopo_here
from helpers.paths import FIXTURES

A100_H2D = FIXTURES / "nvbandwidth" / "nvbandwidth-42_1xa100_h2d_sm_v0.8.txt"
STELLINE = FIXTURES / "p2pbw" / "stelline_asus-esc8000a_4xrtx6000ada.txt"

#: WRITTEN: nvbandwidth v0.8's device_local_copy on the posted A100's one GPU.
LOCAL = """nvbandwidth Version: v0.8
Built from Git version: v0.8

Device 0: NVIDIA A100-SXM4-40GB (00000000:99:00)

Running device_local_copy.
memcpy local GPU(column) bandwidth (GB/s)
           0
 0   1290.20

SUM device_local_copy 1290.20
"""

#: WRITTEN: two GPUs, a unidirectional and a bidirectional read testcase (v0.8 print format).
UNI_AND_BIDIR = """nvbandwidth Version: v0.8
Built from Git version: v0.8

Device 0: NVIDIA H100 80GB HBM3 (00000000:18:00)
Device 1: NVIDIA H100 80GB HBM3 (00000000:2a:00)

Running device_to_device_memcpy_read_ce.
memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)
           0         1
 0       N/A    370.10
 1    371.20       N/A

SUM device_to_device_memcpy_read_ce 741.30

Running device_to_device_bidirectional_memcpy_read_ce.
memcpy CE GPU(row) <-> GPU(column) Read1 bandwidth (GB/s)
           0         1
 0       N/A    365.10
 1    366.20       N/A

SUM device_to_device_bidirectional_memcpy_read_ce_read1 731.30

memcpy CE GPU(row) <-> GPU(column) Total bandwidth (GB/s)
           0         1
 0       N/A    730.00
 1    731.20       N/A

SUM device_to_device_bidirectional_memcpy_read_ce_total 1461.20

Running device_to_device_latency_sm.
Device to Device Latency SM GPU(row) <-> GPU(column) (ns)
           0         1
 0       N/A    912.40
 1    915.10       N/A

&&&& PERF device_to_device_latency_sm 1827.50 -ns
"""


def _one_gpu_p2pbw() -> str:
    """WRITTEN: the posted 4-GPU p2pBandwidthLatencyTest cut to its GPU 0 (one device line, 1x1 matrices)."""
    out = []
    for line in STELLINE.read_text().splitlines():
        s = line.strip()
        if s.startswith(("Device: 1", "Device: 2", "Device: 3", "Device=")):
            continue
        if s[:1].isdigit() and s.split()[0] != "0":
            continue  # rows of GPUs 1-3
        if s.startswith(("D\\D", "GPU", "CPU")) or (s[:1] == "0" and len(s.split()) > 2):
            line = "  ".join(line.split()[:2])
        out.append(line)
    return "\n".join(out) + "\n"


def _run(tmp_path, tool, path):
    out = tmp_path / "run"
    ran = gputopo_here("import", tool, str(path), "--out", str(out), "--no-history")
    assert ran.returncode == 0, ran.stderr
    return ran.stdout, json.loads((out / "summary.json").read_text()), out


def test_posted_one_a100_says_no_pair_and_what_was_measured(tmp_path):
    stdout, s, _ = _run(tmp_path, "nvbandwidth", A100_H2D)
    (note,) = [n for n in s["notes"] if n.startswith("one GPU: ")]
    assert "no GPU pair to measure" in note and "host_to_device_memcpy_sm 25.13 GB/s" in note
    assert "host -> GPU 0" in note
    assert "no GPU pair to measure" in stdout


def test_written_one_gpu_p2pbw_is_that_gpus_own_copy(tmp_path):
    p = tmp_path / "one.txt"
    p.write_text(_one_gpu_p2pbw())
    _, s, _ = _run(tmp_path, "p2pbw", p)
    (note,) = [n for n in s["notes"] if n.startswith("one GPU: ")]
    assert "p2pBandwidthLatencyTest" in note and "within GPU 0's own memory" in note
    assert not any("between these GPUs" in n for n in s["notes"])


def test_written_one_gpu_local_copy_is_not_a_link_between_gpus(tmp_path):
    p = tmp_path / "local.txt"
    p.write_text(LOCAL)
    _, s, _ = _run(tmp_path, "nvbandwidth", p)
    assert not any("between these GPUs" in n for n in s["notes"]), s["notes"]
    assert any("a copy of GPU 0's own" in n for n in s["notes"])


def test_written_headline_is_the_unidirectional_series_and_latency_has_no_size(tmp_path):
    p = tmp_path / "two.txt"
    p.write_text(UNI_AND_BIDIR)
    _, s, out = _run(tmp_path, "nvbandwidth", p)
    (pair,) = [x for x in s["pairs"] if x["gpus"] == [0, 1]]
    assert pair["headline_series"] == "nvbandwidth.device_to_device_memcpy_read_ce"
    assert not any(n.startswith("one GPU: ") for n in s["notes"])
    rows = [r for r in csv.DictReader((out / "results.csv").open()) if "latency" in r["test"]]
    assert rows and all(r["metric"] == "latency" and "size_assumed" not in r["extra"] for r in rows)
