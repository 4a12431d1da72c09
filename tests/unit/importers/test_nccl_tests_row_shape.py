"""`import nccl-tests` on a posted all_reduce with #wrong > 0 and no header lines (NVIDIA/nccl
issue 1184): the rows themselves tell the collective, the wrong elements are kept and said.

- nccl-tests prints a row's size as the whole buffer (``max(sendBytes, expectedBytes)``) and its
  count as one rank's (``nbytes / wordSize``): size = count x element size for all_reduce,
  broadcast, reduce and sendrecv, size = ranks x count x element size for the collectives cut in
  per-rank chunks; its redop column is "none" for a collective without a reduction, its root
  column -1 for one without a root. With busbw / algbw these leave one answer where busbw / algbw
  alone leaves two (all_reduce on 2 ranks, reduce_scatter on 82+ ranks);
- #wrong is summed over every rank (BenchTime: CheckData, then Allreduce sum), so more wrong
  elements than one rank's count is no impossible figure: the row was dropped, and with it the
  only evidence that the results were wrong;
- a "..." line where the poster left rows out is said, not read over;
- a corrupt finding on a log that names no GPUs names the whole job, not "GPU ", and blames no
  peer path it never saw.
"""

from __future__ import annotations

import json

import pytest

from gputopo.errors import InputFileError
from gputopo.importers.nccl_tests import parse_nccl_tests, parse_nccl_tests_file
from helpers.cli import gputopo_here
from helpers.paths import FIXTURES

WRONG_2NODE = FIXTURES / "nccl-tests" / "nccl-1184_dgx-h100-a100_2node-bond_proto-simple_wrong-from-512KiB_elided_excerpt.txt"

HEADER = """#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
"""


def test_size_count_redop_and_root_tell_all_reduce_on_2_ranks_from_reduce_scatter():
    (log,) = parse_nccl_tests_file(WRONG_2NODE)
    assert (log.op, log.rank_count) == ("all_reduce", 2)
    assert any("size = 1 x count x element size" in i and "root -1" in i for i in log.inferred)


def test_reduce_scatter_rows_give_their_rank_count_by_size_over_count():
    # reduce_scatter on 4 ranks: size = 4 x count x 4 B, busbw / algbw = 3/4 (also all_gather's,
    # alltoall's, scatter's and gather's on 4 ranks: redop sum and root -1 leave reduce_scatter)
    text = HEADER + ("     1048576         65536     float     sum      -1    40.00   26.21   19.66      0    40.00   26.21   19.66      0\n"
                     "     4194304        262144     float     sum      -1   100.00   41.94   31.46      0   100.00   41.94   31.46      0\n")
    (log,) = parse_nccl_tests(text, source="rs.txt")
    assert (log.op, log.rank_count) == ("reduce_scatter", 4)


def test_wrong_elements_summed_over_ranks_are_kept_and_make_the_run_broken(tmp_path):
    (log,) = parse_nccl_tests_file(WRONG_2NODE)
    wrong = {r.size_bytes: (r.out_of_place.wrong, r.in_place.wrong) for r in log.rows}
    assert wrong[524288] == (237858, 238038)  # more than the row's count (131072), fewer than 2 ranks hold
    assert not any("impossible" in p for p in log.problems)
    out = tmp_path / "run"
    ran = gputopo_here("import", "nccl-tests", str(WRONG_2NODE), "--out", str(out), "--no-history",
                       env={"GPUTOPO_HISTORY": str(tmp_path / "h.sqlite")})
    assert ran.returncode == 0, ran.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verdict"] == "broken"
    (corrupt,) = [f for f in summary["findings"] if f["kind"] == "corrupt"]
    assert corrupt["severity"] == "error" and corrupt["evidence"]["total_wrong"] == 237858 + 238038
    assert corrupt["message"].startswith("the whole job (its GPUs not named)")
    assert "no GPU, pair or link is blamed" in corrupt["cause"]
    assert not any("NCCL_P2P_DISABLE" in r for r in corrupt["remedies"])


def test_more_wrong_elements_than_the_named_ranks_hold_is_still_impossible():
    ranks = "".join(f"#  Rank  {i} Group  0 Pid  1{i} on host device  {i} [0x1{i}] NVIDIA H100\n" for i in range(2))
    text = "# Using devices\n" + ranks + HEADER + (
        "        1024           256     float     sum      -1    10.00    0.10    0.10   2000    10.00    0.10    0.10      0\n"
        "        2048           512     float     sum      -1    10.00    0.20    0.20      0    10.00    0.20    0.20      0\n"
        "# Out of bounds values : 1 FAILED\n# Avg bus bandwidth    : 0.15\n")
    (log,) = parse_nccl_tests(text, source="all_reduce.txt")
    assert [r.size_bytes for r in log.rows] == [2048]
    assert any("2000 wrong, more than the 1024 elements 2 ranks' results hold" in p for p in log.problems)


def test_an_elided_stretch_of_rows_is_said():
    (log,) = parse_nccl_tests_file(WRONG_2NODE)
    assert any(p.startswith("line 5: '...' in place of rows") for p in log.problems)


def test_a_refusal_still_says_the_results_were_wrong():
    # nccl-tests 1.x rows (no redop, no root): size = count x 4 B and busbw / algbw = 1 fit
    # all_reduce on 2 ranks and broadcast, reduce, sendrecv on any number: refused, naming --op,
    # and saying the #wrong the rows count
    text = ("#       size         count      type     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong\n"
            "      524288        131072     float    663.1    0.79    0.79  237858    569.4    0.92    0.92  238038\n")
    with pytest.raises(InputFileError) as e:
        parse_nccl_tests(text, source="posted.txt")
    assert "--op" in str(e.value) and "#wrong > 0 (from 524288 B): this run's results were wrong" in str(e.value)


HANG = FIXTURES / "nccl-tests" / "nccl-tests-117_2x4090_driver520_all_reduce_hangs-after-header_no-rows.txt"


def test_a_test_that_printed_its_header_and_no_row_is_said_not_refused(tmp_path):
    # NVIDIA/nccl-tests issue 117: 2 x RTX 4090 on driver 520, all_reduce_perf hangs before its
    # first size; the posted output ends after the column header. It was refused as "no
    # nccl-tests result rows found", as if it were not nccl-tests output.
    posted = tmp_path / "log.txt"  # no op in the name: the pasted command line names it
    posted.write_text(HANG.read_text())
    (log,) = parse_nccl_tests_file(posted)
    assert log.op == "all_reduce" and log.program == "all_reduce_perf" and len(log.ranks) == 2 and log.rows == []
    assert log.problems == ["no result row after the column header: the test printed no figure (it hung or died "
                            "before its first size, or the log was cut there), so nothing was measured"]
    out = tmp_path / "run"
    ran = gputopo_here("import", "nccl-tests", str(posted), "--out", str(out), "--no-history",
                       env={"GPUTOPO_HISTORY": str(tmp_path / "h.sqlite")})
    assert ran.returncode == 0, ran.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verdict"] != "ok"
    assert [f["kind"] for f in summary["findings"]] == ["incomplete-data"]


def test_text_without_a_column_header_or_rows_is_still_refused():
    with pytest.raises(InputFileError, match="no nccl-tests result rows"):
        parse_nccl_tests("$ ./build/all_reduce_perf -b 8\nSegmentation fault\n", source="x.txt")
