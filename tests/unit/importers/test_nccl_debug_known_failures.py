"""Issue 47 item 2: known NCCL failures said in NCCL's words. The SHARP/CollNet set-up failure of
nccl-tests issue 311 (posted, tests/fixtures/nccl-debug) is one finding naming the hosts; an RDMA
completion error is read in each of the three forms NCCL has printed it (<= 2.18, 2.19-2.27, 2.28+:
written variants, and the posted 2.19-2.27 line of nccl issue 1405); verbs calls failing with ENOMEM
and ibv_open_device failing say what they usually mean, with host and rank; the framework's
"unhandled system error" points back to the WARN that caused it; perftest and NCCL read one
ibv_wc_status table."""

from __future__ import annotations

from gputopo.importers.nccl_debug import debug_document
from gputopo.importers.run import run_import
from gputopo.model import ibv_wc_status
from gputopo.probe.nccl_log import parse_nccl_debug
from gputopo.report import perftest_findings
from gputopo.report.rules import nccl_debug_log_findings
from helpers.paths import FIXTURES

SHARP = FIXTURES / "nccl-debug" / "nccl-tests-311_4node-8xa100_ibext-v8-sharp_collnet-init-failed_fallback-p2p-cumem_net-gdrdma-pxn.log"
POSTED_1405 = ("NET/IB : Got completion from peer 10.216.210.236<54862> with status=12 opcode=0 len=0 vendor err 129 "
               "(Recv) localGid fd00:1148:9000:5000:4:200:3:ff22 remoteGidsfd00:1148:9000:5000:4:200:3:ff1f")


def _findings(text):
    return nccl_debug_log_findings(debug_document(parse_nccl_debug(text), ["x.log"], None), None)


def test_sharp_collnet_failure_is_one_finding_naming_the_hosts_and_claims_every_line():
    doc = run_import("nccl-debug", [SHARP]).imported.imports[0]
    found = nccl_debug_log_findings(doc, None)
    assert [f.kind for f in found] == ["nccl-collnet-failed"]
    (f,) = found
    assert f.severity == "warning" and f.evidence["hosts"] == ["gpu34", "gpu36", "gpu40", "gpu41"]
    assert f.evidence["ranks"] == [0, 2, 4, 6] and f.evidence["collnet_enable"] == "1"
    assert "NCCL_COLLNET_ENABLE=1 was set" in f.message and "fell back to point-to-point" in f.message
    assert "No resource" in (f.cause or "") and "sharp_am" in (f.cause or "")
    assert len(f.evidence["tool_lines"]) == 6  # 2 NCCL WARN texts, 4 SHARP library lines


def _comm_failure(warn: str):
    return _findings(
        "n1:7:9 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 3 nranks 4 cudaDev 0 busId 1b000 - Init COMPLETE\n"
        f"n1:7:9 [0] transport/net_ib.cc:1400 NCCL WARN {warn}\n"
        "n1:7:9 [0] NCCL INFO transport/net.cc:1302 -> 6\n"
        "n1:7:9 [0] NCCL INFO proxy.cc:878 -> 6 [Progress Thread]\n")


def test_completion_error_in_each_nccl_form_says_its_status():
    forms = {
        # written variants, one per form NCCL printed (src/transport/net_ib.cc)
        "NCCL <= 2.18": "NET/IB : Got completion from peer 10.0.0.2<4242> with error 12, opcode 0, len 0, vendor err 129 (Send)",
        "NCCL 2.19-2.27": POSTED_1405,
        "NCCL >= 2.28": ("NET/IB : Got completion from peer 10.0.0.2<4242> with status=IBV_WC_RETRY_EXC_ERR(12) "
                         "opcode=IBV_WC_SEND(0) reqSize=0 vendor_err=129 req_type=Send localGid ::ffff:10.0.0.1 "
                         "remoteGids ::ffff:10.0.0.2"),
    }
    for form, warn in forms.items():
        wc = ibv_wc_status.completion_error(warn)
        assert wc is not None and wc["status"] == 12 and wc["vendor_err"] == 129 and wc["form"] == form, form
        (f,) = _comm_failure(warn)
        assert f.kind == "nccl-comm-failed" and "IBV_WC_RETRY_EXC_ERR (12" in (f.cause or ""), form
        assert "vendor error 129" in (f.cause or "") and form in (f.cause or "")


def test_a_status_not_in_the_table_is_said_as_such():
    (f,) = _comm_failure("NET/IB : Got completion from peer 10.0.0.2<1> with status=16 opcode=0 len=0 vendor err 1 (Send)")
    assert "IBV_WC_REM_ABORT_ERR (16)" in (f.cause or "") and "not a status gputopo's table explains" in (f.cause or "")


def test_flushed_status_points_at_the_first_error():
    wc = ibv_wc_status.completion_error("Got completion from peer a<1> with status=5 opcode=32656 len=32659 vendor err 249 (Recv)")
    assert wc is not None and "first error is the cause" in wc["meaning"]


# Written variants of NCCL's src/misc/ibvwrap.cc lines (host, pid and ranks made up)
ENOMEM = ("gpu7:51:60 [2] NCCL INFO ncclCommInitRank comm 0x1 rank 5 nranks 8 cudaDev 2 busId 3e000 - Init START\n"
          "gpu7:51:60 [2] misc/ibvwrap.cc:210 NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory\n"
          "gpu7:51:60 [2] NCCL INFO transport/net_ib.cc:1200 -> 2\n"
          "gpu7:51:60 [2] NCCL INFO init.cc:1000 -> 2\n"
          "Traceback: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
          "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1\n")


def test_verbs_enomem_says_locked_memory_and_the_framework_error_points_back():
    (f,) = _findings(ENOMEM)
    assert f.kind == "nccl-init-failed" and "gpu7: rank 5" in f.message
    assert "ulimit -l" in (f.cause or "") and "queue pairs" in (f.cause or "")
    assert "unhandled system error" in f.message and "this WARN its cause" in f.message


def test_known_warn_on_a_process_that_went_on_is_said_with_host_and_rank():
    text = ("h2:5:6 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 1 nranks 2 cudaDev 0 busId 1b000 - Init START\n"
            "h2:5:6 [0] misc/ibvwrap.cc:98 NCCL WARN Call to ibv_open_device failed\n"
            "h2:5:6 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 1 nranks 2 cudaDev 0 busId 1b000 - Init COMPLETE\n")
    (f,) = _findings(text)
    assert f.kind == "nccl-known-warn" and f.severity == "warning"
    assert "h2 (rank 1)" in f.message and "/dev/infiniband" in (f.cause or "")
    assert f.evidence["tool_lines"] == ["misc/ibvwrap.cc:98 NCCL WARN Call to ibv_open_device failed"]


def test_one_wc_status_table_serves_perftest_and_nccl():
    assert perftest_findings.WC_STATUS is ibv_wc_status.WC_STATUS
    import gputopo.report.nccl_debug_findings as nf
    assert not hasattr(nf, "_WC_STATUS")
