"""A line a tool marked as a warning or an error that no specific rule explains is a ``tool-flagged``
finding quoting it with its host, rank and GPU; a line a rule explains is said once, by that rule."""

from __future__ import annotations

from gputopo.importers.nccl_debug import debug_document
from gputopo.importers.nccl_tests import log_summary, parse_nccl_tests
from gputopo.importers.perftest_parse import parse_perftest_runs
from gputopo.probe.nccl_log import parse_nccl_debug
from gputopo.report.rules import nccl_debug_log_findings
from gputopo.report.flagged_findings import tool_flagged_findings
from gputopo.report.perftest_findings import perftest_findings

NCCL_TESTS = """# nThread 1 nGpus 1 minBytes 8 maxBytes 128 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid   4242 on      node7 device  0 [0x1b] NVIDIA A100-SXM4-80GB
#
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
node7:4242:4250 [0] enqueue.cc:1231 NCCL WARN Cuda failure 'an illegal memory access was encountered'
node7: Test NCCL failure common.cu:1005 'unhandled cuda error (run with NCCL_DEBUG=INFO for details) / Cuda failure'
 .. node7 pid 4242: Test failure common.cu:1174
"""


def test_nccl_tests_failure_lines_are_kept_and_said_as_errors():
    (log,) = parse_nccl_tests(NCCL_TESTS, op="all_reduce")
    doc = log_summary(log)
    texts = [r["text"] for r in doc["flagged_lines"]]
    assert texts == ["enqueue.cc:1231 NCCL WARN Cuda failure 'an illegal memory access was encountered'",
                     "Test NCCL failure common.cu:1005 'unhandled cuda error (run with NCCL_DEBUG=INFO for details) "
                     "/ Cuda failure'"]
    # the " .. node7 pid 4242: Test failure" line is the failure's call chain, kept with it (issue 47 item 8)
    assert doc["flagged_lines"][1]["chain"] == ["common.cu:1174"] and doc["flagged_lines"][1]["ranks"] == [0]
    found = tool_flagged_findings(doc["flagged_lines"], [])
    assert [f.severity for f in found] == ["warning", "error"]
    assert all(f.kind == "tool-flagged" for f in found)
    assert found[0].message.startswith("NCCL printed `enqueue.cc:1231 NCCL WARN Cuda failure 'an illegal memory access "
                                       "was encountered'` on node7 (rank 0, CUDA device 0) (line 8): a warning")
    assert "node7 (rank 0)" in found[1].message and "Test failure common.cu:1174" in found[1].message
    assert "not known from this input" in (found[0].cause or "")


# Written (the SHARP line as posted in nccl-tests issue 311; the WARN a socket one no rule explains:
# the CollNet WARNs of that post are claimed by nccl-collnet-failed, tests/unit/importers/test_nccl_debug_known_failures.py)
SHARP_LOG = """gpu34:34088:34116 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 7000 commId 0x7 - Init START
gpu36:20775:20807 [0] NCCL INFO ncclCommInitRank comm 0x2 rank 2 nranks 4 cudaDev 0 nvmlDev 0 busId 88000 commId 0x7 - Init START
[gpu34:0:34088 - context.c:705][2025-05-26 15:39:24] ERROR SHArP Job init error: No resource
gpu36:20775:20807 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.9<43411> failed : Software caused connection abort
gpu34:34088:34116 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.9<43411> failed : Software caused connection abort
gpu34:34088:34116 [0] NCCL INFO Channel 00/0 : 0[0] -> 2[0] [send] via NET/IB/1/GDRDMA
gpu34:34088:34116 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 7000 commId 0x7 - Init COMPLETE
gpu36:20775:20807 [0] NCCL INFO ncclCommInitRank comm 0x2 rank 2 nranks 4 cudaDev 0 nvmlDev 0 busId 88000 commId 0x7 - Init COMPLETE
"""


def test_a_warning_on_several_hosts_is_one_finding_naming_them():
    doc = debug_document(parse_nccl_debug(SHARP_LOG), ["x.log"], None)
    found = [f for f in nccl_debug_log_findings(doc, None) if f.kind == "tool-flagged"]
    assert len(found) == 2
    (sharp,) = [f for f in found if f.evidence["tool"] == "SHARP"]
    (collnet,) = [f for f in found if f.evidence["tool"] == "NCCL"]  # the socket WARN
    assert sharp.message.startswith("SHARP printed `ERROR SHArP Job init error: No resource` on gpu34 (rank 0)")
    assert "an error line that no rule of gputopo explains" in sharp.message
    assert collnet.evidence["hosts"] == ["gpu34", "gpu36"] and collnet.evidence["ranks"] == [0, 2]
    assert collnet.evidence["count"] == 2 and collnet.severity == "warning"


FAILED_INIT = """z-pc:909608:910337 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 1 nranks 2 cudaDev 0 busId 2d000 - Init START
z-pc:909608:910337 [0] transport/p2p.cc:238 NCCL WARN failed to open CUDA IPC handle : 217 peer access is not supported between these two devices
z-pc:909608:910337 [0] NCCL INFO transport/p2p.cc:262 -> 1
z-pc:909608:910337 [0] NCCL INFO init.cc:778 -> 1
"""


def test_a_line_a_rule_explains_is_said_once_by_that_rule():
    doc = debug_document(parse_nccl_debug(FAILED_INIT), ["x.log"], None)
    found = nccl_debug_log_findings(doc, None)
    assert [f.kind for f in found] == ["nccl-init-failed"]
    assert found[0].evidence["tool_lines"] == ["transport/p2p.cc:238 NCCL WARN failed to open CUDA IPC handle : 217 "
                                               "peer access is not supported between these two devices"]


PERFTEST = """ Couldn't allocate MR
failed to create mr
 Couldn't create IB resources
 Unable to frobnicate the widget
"""


def test_perftest_lines_a_failure_explains_are_claimed_and_the_rest_said():
    (run,) = parse_perftest_runs(enumerate(PERFTEST.splitlines(), start=1), "p.txt")
    doc = run.summary()
    made = perftest_findings(doc)
    assert [f.kind for f in made] == ["rdma-test-failed"]
    found = tool_flagged_findings(doc["flagged_lines"], made)
    assert [f.evidence["tool_lines"] for f in found] == [["Unable to frobnicate the widget"]]
    assert found[0].severity == "error"


FAILED_BEFORE_HEADER = """# nThread 1 nGpus 2 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 0 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid 3740409 on fengyun416 device  0 [0x01] NVIDIA RTX A6000
#  Rank  1 Group  0 Pid 3164639 on    fengyun device  0 [0x01] NVIDIA RTX A6000
fengyun: Test NCCL failure common.cu:959 'internal error - please report this issue to the NCCL developers / '
 .. fengyun pid 3164639: Test failure common.cu:844
"""


def test_a_test_that_failed_before_its_header_is_imported_with_its_failure_not_refused():
    (log,) = parse_nccl_tests(FAILED_BEFORE_HEADER, op="all_reduce")
    assert not log.rows and log.failed_early
    found = tool_flagged_findings(log_summary(log)["flagged_lines"], [])
    # the chain line is kept with the failure it unwound from, which it maps to rank 1 (issue 47 item 8)
    assert [f.severity for f in found] == ["error"]
    assert "on fengyun (rank 1) (line 6): an error that ended its run (then its call chain: `Test failure " \
           "common.cu:844`)" in found[0].message


def test_each_flagged_line_has_its_own_row_and_its_quote_stays_whole_in_the_story():
    from gputopo.report.outputs.cell_text import group_findings, message_head

    (log,) = parse_nccl_tests(NCCL_TESTS, op="all_reduce")
    found = tool_flagged_findings(log_summary(log)["flagged_lines"], [])
    assert [len(g) for g in group_findings(found)] == [1, 1]  # alike incomplete-data would share one
    assert message_head(found[1].message) == (
        "nccl-tests printed `Test NCCL failure common.cu:1005 'unhandled cuda error (run with NCCL_DEBUG=INFO for "
        "details) / Cuda failure'` on node7 (rank 0) (line 9)")


def test_the_oldest_failure_line_and_a_warn_saying_cuda_failure_are_told_apart():
    text = ("nThread 1 nGpus 8 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 validation: 1\n"
            "n1:7:7 [0] enqueue.cc:1 NCCL WARN Cuda failure 'invalid argument'\n"
            "NCCL failure all_reduce.cu:95 'unhandled cuda error'\n")
    (log,) = parse_nccl_tests(text, op="all_reduce")
    assert [(f["tool"], f["text"], f["fails_run"]) for f in log.flagged] == [
        ("NCCL", "enqueue.cc:1 NCCL WARN Cuda failure 'invalid argument'", False),
        ("nccl-tests", "NCCL failure all_reduce.cu:95 'unhandled cuda error'", True)]
    found = tool_flagged_findings(log_summary(log)["flagged_lines"], [])
    assert found[1].message.startswith("nccl-tests printed `NCCL failure all_reduce.cu:95 'unhandled cuda error'` "
                                       "(line 3): an error that ended its run")


def test_a_failed_test_whose_collective_cannot_be_told_is_refused_quoting_its_failure():
    import pytest

    from gputopo.errors import InputFileError

    with pytest.raises(InputFileError) as e:
        parse_nccl_tests(FAILED_BEFORE_HEADER)
    assert "the test failed before its first row (line 6: `Test NCCL failure common.cu:959" in str(e.value)
    assert "--op" in str(e.value)
