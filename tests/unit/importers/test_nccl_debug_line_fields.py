"""Issue 47 item 1: a channel line is read by its fields, whatever follows them. RCCL appends
`` comm 0x... nRanks NN`` to every connection line (posted: ROCm/rccl issue 1026, fixture
rccl-1026_...), and a paste can join several NCCL lines into one with blanks (written variant):
neither makes a line "cut or garbled"."""

from __future__ import annotations

from gputopo.importers.run import run_import
from gputopo.probe.nccl_log import parse_nccl_debug, parse_nccl_debug_files
from helpers.paths import FIXTURES

RCCL = FIXTURES / "nccl-debug" / "rccl-1026_2node-mi250x_comm-nranks-suffix_p2p-ipc_net-socket_excerpt.log"


def test_rccl_comm_suffix_is_not_part_of_the_transport():
    log = parse_nccl_debug_files([RCCL])
    assert log.problems == []
    assert len(log.channels) == 9
    assert {c.via for c in log.channels} == {"P2P/IPC", "NET/Socket/1", "NET/Socket/2"}
    pairs = {(a.label(), b.label()) for a, b in log.pairs()}
    # "1[c6000] -> 4[c1000] [receive]" printed on g1072 by rank 4; rank 1 printed its [send] on g1064
    assert ("g1064/0000:c6:00.0", "g1072/0000:c1:00.0") in pairs
    assert ("g1064/0000:c1:00.0", "g1064/0000:c9:00.0") in pairs


def test_rccl_log_imports_with_pairs_and_no_problems():
    doc = run_import("nccl-debug", [RCCL]).imported.imports[0]
    assert doc["problems"] == [] and len(doc["pairs"]) == 5
    assert doc["hosts"] == ["g1064", "g1072"]


# Written variant (not posted): two NCCL lines joined into one by a paste, with a blank between.
JOINED = (
    "n1:10:20 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 commId 0xab - Init START\n"
    "n1:11:21 [1] NCCL INFO comm 0x2 rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 3e000 commId 0xab - Init START\n"
    "n1:10:20 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read n1:11:21 [1] NCCL INFO Channel 00/0 : "
    "1[1] -> 0[0] via P2P/IPC/read\n"
    "n1:10:20 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/IPC/read NCCL INFO Connected all rings\n"
)


def test_joined_lines_are_read_each_as_a_line():
    log = parse_nccl_debug(JOINED)
    assert log.problems == []
    assert [(c.src_rank, c.dst_rank, c.via) for c in log.channels] == [
        (0, 1, "P2P/IPC/read"), (1, 0, "P2P/IPC/read"), (0, 1, "P2P/IPC/read")]
    assert all(c.used for c in log.channels)


def test_a_transport_cut_mid_word_is_still_not_read():
    log = parse_nccl_debug("n1:10:20 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/re comm 0x1 nRanks 02\n")
    assert log.channels == [] and len(log.problems) == 1
