"""Issue 47 item 6: two ranks that initialise different communicator ids and then fail to connect
are said as the job's ranks disagreeing (the application), not as a network fault. Written variant
(NCCL 2.18-style lines; hosts, pids and ids made up)."""

from __future__ import annotations

from gputopo.importers.nccl_debug import debug_document
from gputopo.probe.nccl_log import parse_nccl_debug
from gputopo.report.nccl_debug_findings import nccl_debug_findings

FAIL = ("{h}:{p}:{p} [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.9<43411> failed : "
        "Connection refused\n{h}:{p}:{p} [0] NCCL INFO bootstrap.cc:257 -> 6\n{h}:{p}:{p} [0] NCCL INFO init.cc:1402 -> 6\n")
START = "{h}:{p}:{p} [0] NCCL INFO ncclCommInitRank comm 0x1 rank {r} nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId {c} - Init START\n"


def _findings(text):
    return nccl_debug_findings(debug_document(parse_nccl_debug(text), ["w.log"], None))


def test_ranks_on_different_communicator_ids_are_said_as_the_application():
    text = (START.format(h="a", p=1, r=0, c="0xaaa") + START.format(h="b", p=2, r=1, c="0xbbb")
            + FAIL.format(h="a", p=1) + FAIL.format(h="b", p=2))
    (f,) = _findings(text)
    assert f.kind == "nccl-init-failed"
    assert "ranks disagree on the communicator" in (f.cause or "") and "not a network fault" in (f.cause or "")
    assert "commId 0xaaa on rank 0 (a)" in (f.cause or "") and "commId 0xbbb on rank 1 (b)" in (f.cause or "")
    assert any("ncclGetUniqueId" in r for r in f.remedies)


def test_one_communicator_that_failed_to_connect_is_not_blamed_on_the_application():
    text = (START.format(h="a", p=1, r=0, c="0xaaa") + START.format(h="b", p=2, r=1, c="0xaaa")
            + FAIL.format(h="a", p=1) + FAIL.format(h="b", p=2))
    (f,) = _findings(text)
    assert "disagree" not in (f.cause or "")
