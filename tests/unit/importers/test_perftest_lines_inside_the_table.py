"""perftest's own warning between its result header and rows drops nothing, and a row dropped for
any other reason is said (issue 47 item 11)."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.cli import gputopo_here
from helpers.paths import FIXTURES

from gputopo.importers.perftest_parse import parse_perftest_lines

# posted (NVIDIA/deepops docs): 'Conflicting CPU frequency values detected ...' between header and row
DEEPOPS = FIXTURES / "perftest" / "deepops-roce-perf-k8s_cx5-roce_ib-write-bw_gbits_cpu-freq-line-before-row_excerpt.txt"


def _lines(text: str):
    return list(enumerate(text.splitlines(), start=1))


def test_the_cpu_frequency_warning_between_header_and_row_drops_nothing(tmp_path):
    """The old code ended the table at the warning and dropped the row: 'No findings', not-measured."""
    out = parse_perftest_lines(_lines(DEEPOPS.read_text()), DEEPOPS.name)
    assert [(r.size_bytes, r.bw_average) for r in out.rows] == [(65536, 92.40)]
    assert not out.problems
    assert any("CPU-frequency warning" in n for n in out.notes)
    rc, stdout, err = gputopo_here("import", "perftest", DEEPOPS, "--out", tmp_path / "run", "--no-history")
    assert rc == 0, err
    doc = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert doc["verdict"] == "not-judged"  # measured; the port's rate is not in the output
    assert "92.4 Gb/sec" in stdout and "No findings" not in stdout


def test_the_warning_repeated_between_every_row_of_a_sweep(tmp_path):
    """Written variant (the form of a posted `-a` sweep: the warning before every row)."""
    text = ("                    RDMA_Write BW Test\n"
            " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
            "Conflicting CPU frequency values detected: 800.000000 != 3177.498000. CPU Frequency is not max.\n"
            " 2          20000           0.058511            0.058226            3.639132\n"
            "Conflicting CPU frequency values detected: 799.996000 != 3384.422000. CPU Frequency is not max.\n"
            " 4194304    20000            165.55             165.55            0.004934\n"
            "Conflicting CPU frequency values detected: 800.000000 != 2967.226000. CPU Frequency is not max.\n"
            " 8388608    20000            165.65             165.63            0.002468\n"
            "---------------------------------------------------------------------------------------\n")
    out = parse_perftest_lines(_lines(text), "written.txt")
    assert [r.size_bytes for r in out.rows] == [2, 4194304, 8388608] and not out.problems


def test_a_row_dropped_for_another_reason_is_said_on_the_console(tmp_path: Path):
    """Written variant: a line perftest never prints between the header and the row. The old code
    dropped the row into a note nobody saw ('No findings')."""
    f = tmp_path / "stray.txt"
    f.write_text(DEEPOPS.read_text().replace(
        "    Conflicting CPU frequency values detected: 1200.535000 != 1251.336000. CPU Frequency is not max.",
        "    [stray] a line another program printed"))
    rc, stdout, err = gputopo_here("import", "perftest", f, "--out", tmp_path / "run", "--no-history")
    assert rc == 0, err
    assert "result row outside its table" in " ".join(stdout.split()) and "No findings" not in stdout


def _completion_finding(tmp_path: Path, status_line: str) -> dict:
    f = tmp_path / "err.txt"
    f.write_text("                    RDMA_Write BW Test\n"
                 " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
                 f" Completion with error at client\n {status_line}\n")
    rc, _, err = gputopo_here("import", "perftest", f, "--out", tmp_path / "run", "--no-history")
    assert rc == 0, err
    doc = json.loads((tmp_path / "run" / "summary.json").read_text())
    (found,) = [x for x in doc["findings"] if x["evidence"].get("wc_status") is not None]
    return found


def test_a_remote_access_error_points_at_the_two_sides_options_not_cables(tmp_path):
    """Written variant (perftest's 'Failed status 10: wr_id 0 syndrom 0x88' form). The old advice
    for every status: 'swap the cable or the peer'."""
    found = _completion_finding(tmp_path, "Failed status 10: wr_id 0 syndrom 0x88")
    text = " ".join(found["remedies"])
    assert "same options on both sides" in text and "cable" not in text


def test_a_retry_exceeded_error_still_checks_ports_and_cables(tmp_path):
    """The posted softiwarp issue 27 status (12, transport retry counter exceeded)."""
    found = _completion_finding(tmp_path, "Failed status 12: wr_id 0 syndrom 0x81")
    text = " ".join(found["remedies"])
    assert "ibstat" in text and "cable" in text and "lossless" in text


def test_use_rocm_and_use_cuda_say_gpu_memory_was_used(tmp_path):
    """Written variants: the DeepOps run with a command line naming --use_rocm / --use_cuda. The
    old code said nothing of --use_rocm."""
    for flag in ("--use_rocm", "--use_cuda"):
        f = tmp_path / f"{flag[2:]}.txt"
        f.write_text(f"$ ib_write_bw -R -d mlx5_0 --report_gbits -x 3 {flag}=0 10.10.11.11\n" + DEEPOPS.read_text())
        rc, stdout, err = gputopo_here("import", "perftest", f, "--out", tmp_path / flag[2:], "--no-history")
        assert rc == 0, err
        assert f"with {flag} (GPU memory)" in " ".join(stdout.split())


def test_run_infinitely_rows_are_repeated_measurements_judged_by_their_median(tmp_path):
    """Written variant: the DeepOps run with --run_infinitely, three intervals of 65536 B (92.40,
    92.38, then 20.10 Gb/sec). The old code judged the last row alone (20.1 Gb/s)."""
    row = "    65536      5000             92.42              92.40              0.176230\n"
    text = ("$ ib_write_bw -R -d mlx5_0 --report_gbits -x 3 --run_infinitely 10.10.11.11\n"
            + DEEPOPS.read_text().replace(row, row + "    65536      1762300          0.00               92.38"
                                                     "              0.176200\n    65536      1762310          0.00"
                                                     "               20.10              0.038300\n"))
    f = tmp_path / "inf.txt"
    f.write_text(text)
    rc, stdout, err = gputopo_here("import", "perftest", f, "--out", tmp_path / "run", "--no-history")
    assert rc == 0, err
    doc = json.loads((tmp_path / "run" / "summary.json").read_text())
    (bw,) = [x for x in doc["findings"] if x["kind"] == "rdma-bandwidth"]
    assert bw["evidence"]["bw_average_gbps"] == 92.38
    assert bw["evidence"]["repeats"]["count"] == 3 and bw["evidence"]["repeats"]["min_gbps"] == 20.1
    assert "median of 3 repeated measurements of this size (--run_infinitely)" in bw["message"]
    assert "repeated" in stdout
