"""A crashed nccl-tests run is said as it crashed (issue 47 item 8): `Test CUDA failure` quoted as
an error naming the host and, through the `# Rank N ... Pid P on HOST` lines, the rank; its `Test
failure` chain kept with it; never "hung, died or cut"."""

from __future__ import annotations

import json

from helpers.cli import gputopo_here
from helpers.paths import FIXTURES

from gputopo.importers.nccl_tests import log_summary, parse_nccl_tests_file

# posted (NVIDIA/nccl-tests issue 355): the failure cuts the first result row on node0
NCCL_355 = FIXTURES / "nccl-tests" / "nccl-tests-355_2x8xh800_alltoall_test-cuda-failure-illegal-address-mid-row.txt"


def test_a_failure_in_the_middle_of_a_row_names_its_host_and_rank():
    """The old code read no host from '   2097152 ... -1 node0: Test CUDA failure ...'."""
    (log,) = parse_nccl_tests_file(NCCL_355)
    lines = log_summary(log)["flagged_lines"]
    first = lines[0]
    assert first["text"].startswith("Test CUDA failure common.cu:389 'an illegal memory access")
    assert first["host"] == "node0" and first["ranks"] == [0]  # pid 62767 of its chain is rank 0's
    # the chain is the same failure's, kept with it (the old code: 7 errors)
    assert len(lines) == 1
    assert first["chain"][:2] == ["common.cu:519", "common.cu:532"] and len(first["chain"]) == 6


def test_the_crash_is_one_error_and_never_hung_died_or_cut(tmp_path):
    rc, out, err = gputopo_here("import", "nccl-tests", NCCL_355, "--out", tmp_path / "run", "--no-history")
    assert rc == 0, err
    doc = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert doc["verdict"] == "broken"
    (err_f,) = [f for f in doc["findings"] if f["severity"] == "error"]
    assert err_f["kind"] == "tool-flagged" and "on node0 (rank 0)" in err_f["message"]
    assert "Test failure common.cu:519" in err_f["message"]
    flat = " ".join(out.split())
    assert "hung or died" not in flat and "stopped at its own failure on node0" in flat


def test_a_failure_without_its_chain_names_the_host_only(tmp_path):
    """Written variant: the chain cut off; the host is named, no rank is guessed (node0 runs 8)."""
    text = NCCL_355.read_text().split(" .. node0 pid")[0]
    f = tmp_path / "cut.txt"
    f.write_text(text)
    (log,) = parse_nccl_tests_file(f)
    (first,) = log_summary(log)["flagged_lines"]
    assert first["host"] == "node0" and not first.get("ranks")
