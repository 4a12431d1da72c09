"""`gputopo import nvbandwidth FILE`: every shared real output imports with its exact values,
the JSON form and pasted variants read the same, a failed data check is `corrupt` (never a
refusal), and bad input gets one line and exit 2 (or an `incomplete-data` finding)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gputopo.errors import InputFileError
from gputopo import text_input
from gputopo.importers.nvbandwidth_import import read_nvbandwidth
from gputopo.importers.run import run_import
from gputopo.importers.nvbandwidth_measure import output_measurements
from helpers.cli import gputopo_here
from helpers.paths import FIXTURES

NVB = FIXTURES / "nvbandwidth"
A6000 = NVB / "nvbandwidth-50_6xa6000_d2d_read_ce_v0.8.txt"
A100_H2D = NVB / "nvbandwidth-42_1xa100_h2d_sm_v0.8.txt"
A100_FAILED = NVB / "nvbandwidth-34_8xa100_d2d_read_ce_pattern-check-failed_v0.7.txt"
RTX4090_V02 = NVB / "nvbandwidth-15_8xrtx4090_v0.2_excerpt.txt"
JSON_FORM = NVB / "constructed_json_v0.8_2gpu_read_ce_h2d_waived.json"


def _by_cell(ms, test):
    return {(m.direction): round(m.algbw_gbps, 4) for m in ms if m.test == test}


def _findings(run_dir):
    return json.loads((Path(run_dir) / "summary.json").read_text())["findings"]


def test_a6000_read_ce_matrix_every_cell(tmp_path):
    out = read_nvbandwidth(str(A6000))
    assert (out.version, out.git_version, out.cuda_runtime, out.cuda_driver, out.driver) == (
        "v0.8", "v0.8", 13000, 13000, "580.95.05")
    (m,) = out.matrices
    assert m.key == m.testcase == "device_to_device_memcpy_read_ce"  # named by its SUM line: "Running" was cut
    assert m.printed_sum == 715.53 and m.complete
    assert m.cells[0] == [None, 26.34, 26.35, 21.95, 22.64, 21.80]
    assert m.cells[5] == [21.86, 22.67, 22.01, 26.34, 26.35, None]
    assert sum(v for row in m.cells for v in row if v is not None) == pytest.approx(715.53, abs=30 * 0.005)
    ms = output_measurements(out)
    assert len(ms) == 30  # 36 cells less the N/A diagonal
    cells = _by_cell(ms, "nvbandwidth.device_to_device_memcpy_read_ce")
    # read: the row GPU reads from the column GPU, so cell (0, 3) is data 3 -> 0
    assert cells["3->0"] == 21.95 and cells["0->3"] == 21.82 and cells["4->5"] == 26.35
    assert {m.gpus for m in ms} == {(a, b) for a in range(6) for b in range(a + 1, 6)}
    assert all(m.size_bytes == 512 << 20 and m.timing == "cuda-events" for m in ms)
    res = run_import("nvbandwidth", [str(A6000)], out_dir=tmp_path / "run")
    kinds = [f["kind"] for f in _findings(res.run_dir)]
    assert kinds == ["incomplete-data"]  # the "..." of the post; no pair judged bad
    assert "'...'" in _findings(res.run_dir)[0]["message"]


def test_a100_h2d_sm_one_gpu_with_bus_id(tmp_path):
    out = read_nvbandwidth(str(A100_H2D))
    assert [(d.index, d.name, d.bus_id) for d in out.devices] == [(0, "NVIDIA A100-SXM4-40GB", "00000000:99:00")]
    (m,) = out.matrices
    assert (m.testcase, m.cells, m.printed_sum) == ("host_to_device_memcpy_sm", [[25.13]], 25.13)
    (meas,) = output_measurements(out)
    assert meas.gpus == (0,) and meas.direction == "host->0" and meas.algbw_gbps == pytest.approx(25.13)
    res = run_import("nvbandwidth", [str(A100_H2D)], out_dir=tmp_path / "run")
    topo = json.loads((res.run_dir / "topology.json").read_text())
    assert topo["gpus"][0]["pci_bus_id"] == "00000000:99:00.0"
    assert _findings(res.run_dir) == []


def test_failed_pattern_check_is_corrupt_naming_the_testcase():
    r = gputopo_here("import", "nvbandwidth", A100_FAILED, "--out",
                     Path(os.environ.get("TMPDIR", "/tmp")) / f"nvb-{os.getpid()}")
    assert r.returncode == 0, r.stderr  # imported, never refused
    run_dir = r.stdout.strip().splitlines()[-1].removeprefix("run folder: ")
    (f,) = _findings(run_dir)
    assert (f["kind"], f["severity"]) == ("corrupt", "error")
    assert "device_to_device_memcpy_read_ce" in f["message"] and "pattern check" in f["message"]
    assert f["evidence"]["details"][0] == "Current offset : 11136"
    out = read_nvbandwidth(str(A100_FAILED))
    assert [d.bus_id for d in out.devices][4] == "00000000:9b:00" and out.driver == "550.127.08"
    assert out.matrices == [] and len(out.failures) == 1


def test_v02_excerpt_cut_mid_row(tmp_path):
    out = read_nvbandwidth(str(RTX4090_V02))
    assert out.version == "v0.2" and out.git_version == "6cefdda" and len(out.devices) == 8
    assert all(d.bus_id is None and d.name == "NVIDIA GeForce RTX 4090" for d in out.devices)
    h2d, d2h, bidir = out.matrices
    assert h2d.cells == [[25.50, 24.26, 23.90, 26.30, 26.28, 26.38, 26.09, 26.31]] and h2d.printed_sum == 205.04
    assert d2h.cells[0][7] == 26.83 and d2h.printed_sum == 214.28
    assert bidir.cells == [[11.24, 14.42]] and not bidir.complete  # "16." may be cut: left out
    ms = output_measurements(out)
    assert _by_cell(ms, "nvbandwidth.device_to_host_memcpy_ce")["7->host"] == 26.83
    assert ms[0].size_bytes == 64 << 20  # v0.2 default buffer
    res = run_import("nvbandwidth", [str(RTX4090_V02)], out_dir=tmp_path / "run")
    kinds = {f["kind"] for f in _findings(res.run_dir)}
    assert kinds == {"incomplete-data"}


def test_json_form():
    out = read_nvbandwidth(str(JSON_FORM))
    assert out.form == "json" and out.version == "v0.8" and out.driver == "580.95.05"
    assert [(d.index, d.bus_id, d.host) for d in out.devices] == [(0, "00000000:01:00", "node-a"),
                                                                   (1, "00000000:25:00", "node-a")]
    h2d, read = out.matrices
    assert h2d.cells == [[24.7801, 24.81]] and read.cells == [[None, 26.34], [26.3512, None]]
    assert out.waived == ["all_to_one_write_ce"]
    cells = _by_cell(output_measurements(out), "nvbandwidth.device_to_device_memcpy_read_ce")
    assert cells == {"1->0": 26.34, "0->1": 26.3512}


def test_json_failed_testcase_is_a_failure(tmp_path):
    doc = json.loads(JSON_FORM.read_text())
    tc = doc["nvbandwidth"]["testcases"][1]
    tc.pop("bandwidth_matrix")
    tc["status"] = "Running"
    tc["error"] = " Invalid value when checking the pattern at <0x7f00> Current offset [ 4/536870912]"
    p = tmp_path / "nvb.json"
    p.write_text(json.dumps(doc, indent="\t"))
    res = run_import("nvbandwidth", [str(p)], out_dir=tmp_path / "run")
    corrupt = [f for f in _findings(res.run_dir) if f["kind"] == "corrupt"]
    assert len(corrupt) == 1 and "device_to_device_memcpy_read_ce" in corrupt[0]["message"]


def test_quoted_paste_launcher_prefixes_and_lost_blanks_read_the_same(tmp_path):
    want = read_nvbandwidth(str(A6000)).matrices[0].cells
    lines = A6000.read_text().splitlines()
    quoted = tmp_path / "quoted.txt"
    quoted.write_text("".join(f"> {ln.lstrip()}\n" for ln in lines))
    tagged = tmp_path / "tagged.txt"
    tagged.write_text("".join(f"[1,0]<stdout>:\x1b[0m{ln}\n" for ln in lines))
    for p in (quoted, tagged):
        out = read_nvbandwidth(str(p))
        assert out.matrices[0].cells == want and out.matrices[0].printed_sum == 715.53
    assert "quoted paste" in " ".join(read_nvbandwidth(str(quoted)).notes)


def test_stdin_dash(tmp_path):
    r = gputopo_here("import", "nvbandwidth", "-", "--out", tmp_path / "run", input=A100_H2D.read_text())
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "run" / "imported.json").read_text())["imports"][0]["matrices"][0]["cells"] == [[25.13]]


@pytest.mark.parametrize("content, words", [
    (b"", "is empty"),
    (b"   \n\n", "is empty"),
    (b"\x7fELF\x02\x01\x01\x00\x00\x00\x00", "binary"),
    (b"#  Rank  0 Pid 1 on host device 0 [0x1b] Tesla\n#  out-of-place in-place\n", "not nvbandwidth output"),
    (b"{\"nvbandwidth\": {\"testcases\": [", "not valid JSON"),
])
def test_bad_input_one_line_exit_2(tmp_path, content, words):
    p = tmp_path / "in.txt"
    p.write_bytes(content)
    r = gputopo_here("import", "nvbandwidth", p, "--out", tmp_path / "run")
    assert r.returncode == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "run").exists()


def test_missing_file_and_p2pbw_output_refused(tmp_path):
    r = gputopo_here("import", "nvbandwidth", tmp_path / "nope.txt")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    p2p = FIXTURES / "p2pbw" / "stelline_asus-esc8000a_4xrtx6000ada.txt"
    with pytest.raises(InputFileError, match="not nvbandwidth output"):
        read_nvbandwidth(str(p2p))


def test_a_1gb_file_is_read_with_bounded_effort(tmp_path, monkeypatch):
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:  # sparse: 1 GB of NUL bytes costs no disk and is refused at its first block
        f.truncate(1 << 30)
    with pytest.raises(InputFileError, match="binary"):
        read_nvbandwidth(str(big))
    # A large text output: reading stops at the byte limit and says so (limit made small for speed).
    monkeypatch.setattr(text_input, "MAX_INPUT_BYTES", 64 << 10)
    long = tmp_path / "long.txt"
    long.write_text(A100_H2D.read_text() + "NOTE: padding line of a runaway log\n" * 20000)
    out = read_nvbandwidth(str(long))
    assert out.matrices[0].cells == [[25.13]]
    assert any("only the first" in p for p in out.problems)


def test_topo_of_another_machine_is_refused(tmp_path):
    topo = FIXTURES / "topo" / "nccl-667_4gpu_pxb_pix_sys.txt"
    r = gputopo_here("import", "nvbandwidth", A6000, "--topo", topo, "--out", tmp_path / "run")
    assert r.returncode == 2 and "another machine" in r.stderr, r.stderr


# Printed as nvbandwidth v0.8's output.cpp / inline_common.h print them (constructed, not a post):
# the hostname line, v0.6+ bidirectional read1/read2/total matrices, a latency matrix closed by
# "&&&& PERF", a one-row all-to-one matrix, and a waived testcase.
V08_FORMS = """nvbandwidth Version: v0.8
Built from Git version: v0.8

CUDA Runtime Version: 12080
CUDA Driver Version: 12080
Driver Version: 570.86.15

gpu-node-07
Device 0: NVIDIA H100 80GB HBM3 (00000000:18:00)
Device 1: NVIDIA H100 80GB HBM3 (00000000:2a:00)

Running device_to_device_bidirectional_memcpy_read_ce.
memcpy CE GPU(row) <-> GPU(column) Read1 bandwidth (GB/s)
           0         1
 0       N/A    365.10
 1    366.20       N/A

SUM device_to_device_bidirectional_memcpy_read_ce_read1 731.30

memcpy CE GPU(row) <-> GPU(column) Read2 bandwidth (GB/s)
           0         1
 0       N/A    364.90
 1    365.00       N/A

SUM device_to_device_bidirectional_memcpy_read_ce_read2 729.90

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

Running all_to_one_write_ce.
memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)
           0         1
 0    370.50    371.00

SUM all_to_one_write_ce 741.50

Waived: 
NOTE: The reported results may not reflect the full capabilities of the platform.
Performance can vary with software drivers, hardware clocks, and system topology.
"""


def test_v08_forms_bidirectional_latency_all_to_one(tmp_path):
    p = tmp_path / "v08.txt"
    p.write_text(V08_FORMS)
    out = read_nvbandwidth(str(p))
    assert out.hostname == "gpu-node-07" and out.problems == [] and len(out.waived) == 1
    assert [m.key for m in out.matrices] == [
        "device_to_device_bidirectional_memcpy_read_ce_read1", "device_to_device_bidirectional_memcpy_read_ce_read2",
        "device_to_device_bidirectional_memcpy_read_ce_total", "device_to_device_latency_sm", "all_to_one_write_ce"]
    assert {m.testcase for m in out.matrices[:3]} == {"device_to_device_bidirectional_memcpy_read_ce"}
    ms = output_measurements(out)
    total = [m for m in ms if m.test.endswith("_total")]
    assert {round(m.algbw_gbps, 2) for m in total} == {730.0, 731.2} and {m.direction for m in total} == {"both"}
    lat = [m for m in ms if m.test == "nvbandwidth.device_to_device_latency_sm"]
    assert sorted(round(m.median_s * 1e9, 2) for m in lat) == [912.4, 915.1] and all(m.size_bytes == 0 for m in lat)
    a2o = _by_cell(ms, "nvbandwidth.all_to_one_write_ce")
    assert a2o == {"all->0": 370.5, "all->1": 371.0}
    res = run_import("nvbandwidth", [str(p)], out_dir=tmp_path / "run")
    assert _findings(res.run_dir) == []


def test_a_changed_cell_disagrees_with_the_printed_sum(tmp_path):
    p = tmp_path / "changed.txt"
    p.write_text(A6000.read_text().replace("26.35       N/A     26.34", "29.35       N/A     26.34"))
    out = read_nvbandwidth(str(p))
    assert any("not the printed SUM 715.53" in x for x in out.problems)


def test_directions_of_one_pair_compared_without_topo(tmp_path):
    p = tmp_path / "asym.txt"
    p.write_text(A6000.read_text().replace(" 3     21.82     21.82", " 3     11.82     21.82"))
    res = run_import("nvbandwidth", [str(p)], out_dir=tmp_path / "run")
    outl = [f for f in _findings(res.run_dir) if f["kind"] == "outlier"]
    assert [f["gpus"] for f in outl] == [[0, 3]] and "0->3 11.8 GB/s" in outl[0]["message"]


def test_many_unreadable_lines_are_counted_not_kept(tmp_path):
    p = tmp_path / "noisy.txt"
    p.write_text(A100_H2D.read_text() + "".join(f"garbage line {k}\n" for k in range(5000)))
    out = read_nvbandwidth(str(p))
    assert out.matrices[0].cells == [[25.13]]
    assert len(out.notes) == 51 and "4950 more" in out.notes[-1]


@pytest.mark.parametrize("path, cut", [(A6000, 0), (A100_H2D, 0), (RTX4090_V02, 1)])
def test_every_printed_number_is_read_in_order(path, cut):
    """All matrix cells, read independently (every value after a row label), in file order."""
    import re

    rows = [ln for ln in path.read_text().splitlines() if re.match(r"^\s*\d+\s+(?:[\d.]+|N/A)(?:\s|$)", ln)
            and not all(t.isdigit() for t in ln.split())]  # not the column-number header
    naive = [None if t == "N/A" else float(t) for ln in rows for t in ln.split()[1:]]
    read = [v for m in read_nvbandwidth(str(path)).matrices for row in m.cells for v in row]
    assert read == naive[: len(naive) - cut] and read


def test_multinode_process_lines_and_the_same_file_twice(tmp_path):
    p = tmp_path / "mn.txt"
    p.write_text("nvbandwidth Version: v0.8\nBuilt from Git version: v0.8\n\nMPI version: Open MPI v4.1.5\n"
                 "Process 0 (node-a): device 0: NVIDIA GB200 (00000008:06:00)\n"
                 "Process 1 (node-b): device 0: NVIDIA GB200 (00000008:06:00)\n\n"
                 "Running multinode_device_to_device_memcpy_read_ce.\n"
                 "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)\n           0         1\n"
                 " 0       N/A    770.10\n 1    771.20       N/A\n\nSUM multinode_device_to_device_memcpy_read_ce 1541.30\n")
    out = read_nvbandwidth(str(p))
    assert [(d.index, d.host, d.bus_id) for d in out.devices] == [(0, "node-a", "00000008:06:00"),
                                                                   (1, "node-b", "00000008:06:00")]
    assert _by_cell(output_measurements(out), "nvbandwidth.multinode_device_to_device_memcpy_read_ce") == {
        "1->0": 770.1, "0->1": 771.2}
    from gputopo.errors import UsageError

    with pytest.raises(UsageError, match="counted twice"):
        run_import("nvbandwidth", [str(p), str(p)], out_dir=tmp_path / "run", render=False)


def test_a_cuda_error_is_a_crash_naming_the_testcase(tmp_path):
    p = tmp_path / "oom.txt"
    p.write_text(A100_H2D.read_text() + "Running device_to_host_memcpy_ce.\n[CUDA_ERROR_ILLEGAL_ADDRESS] an illegal memory access was "
                 "encountered in expression cuStreamSynchronize(stream) in doMemcpy() : memcpy.cpp:240\n")
    res = run_import("nvbandwidth", [str(p)], out_dir=tmp_path / "run")
    (f,) = _findings(res.run_dir)
    assert (f["kind"], f["severity"]) == ("crash", "error")
    assert "device_to_host_memcpy_ce" in f["message"] and "CUDA_ERROR_ILLEGAL_ADDRESS" in f["message"]
