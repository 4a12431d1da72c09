"""`import nccl-debug`: a transport NCCL tried and failed to set up is not one it used.

NCCL prints a channel line (``Channel 00 : 0[2d000] -> 1[2e000] via P2P/IPC``) when it chooses a
transport and sets up its side (src/transport/p2p.cc ``p2pSendSetup``); the connection is made
next (``p2pSendConnect``, called from src/transport.cc), and only then ``Connected all rings``
(NCCL >= 2.12) and ``Init COMPLETE``. A set-up that fails logs its ``NCCL WARN`` and error path
(``transport.cc:68 -> 1``) after the channel line. The posted excerpts of ray_lightning issue 24
(CUDA error 217 on P2P/IPC) and nccl-tests issue 242 (the proxy's NET connect times out) are in
tests/fixtures/nccl-debug/ (sources in its README.md); the other logs here are written for the
test in NCCL's own line formats (the format strings of src/transport/*.cc and src/init.cc)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from helpers.cli import gputopo_here
from helpers.paths import FIXTURES

from gputopo.bench.nccl_transport import transport_cell
from gputopo.probe.nccl_log import parse_nccl_debug, transport_summary
from gputopo.report.nccl_routes import ddp_survived_clause

DEBUG = FIXTURES / "nccl-debug"
PEER_217 = DEBUG / "ray-lightning-24_ray-pid-prefix_nccl278_p2p-ipc-217-peer-access-not-supported_excerpt.log"
QP_TIMEOUT = DEBUG / "nccl-tests-242_2node-a100_roce-gid3_ibv-modify-qp-timeout_proxy-connect-failed_excerpt.log"


def _doc(path):
    ran = gputopo_here("import", "nccl-debug", str(path), "--json")
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout)


def test_p2p_whose_cuda_ipc_open_failed_with_217_is_tried_and_failed_not_used():
    doc = _doc(PEER_217)
    (pair,) = doc["pairs"]
    assert pair["via"] == ["P2P/IPC"] and pair["used"] is False
    bad = pair["setup_failed"]
    assert bad["transport"] == "P2P" and bad["failed"] == 1 and bad["unfinished"] == 0
    assert bad["error"].startswith("transport/p2p.cc:238 NCCL WARN failed to open CUDA IPC handle : 217")
    assert bad["at"].endswith(f"{PEER_217.name}:8")  # the WARN's line in the file
    assert [f["kind"] for f in doc["findings"]] == ["nccl-init-failed"]  # the finding is kept


def test_the_table_says_the_p2p_set_up_failed_and_names_the_error_line():
    ran = gputopo_here("import", "nccl-debug", str(PEER_217), env={"COLUMNS": "250"})
    assert ran.returncode == 0, ran.stderr
    row = next(ln for ln in ran.stdout.splitlines() if "z-pc/0000:2d:00.0 <-> z-pc/0000:2e:00.0 " in ln and "│" in ln)
    assert "none (P2P tried, set-up failed)" in row
    said = " ".join(ran.stdout.split())
    assert "NCCL tried P2P/IPC on 1 channel line(s) and its set-up failed: `transport/p2p.cc:238 NCCL WARN failed " \
           "to open CUDA IPC handle : 217 peer access is not supported between these two devices`" in said
    assert f"{PEER_217.name}:8); not a transport it used" in said


def test_a_net_connection_whose_proxy_connect_timed_out_is_tried_and_failed(tmp_path):
    # nccl-tests issue 242's error block after the channel line NCCL (src/transport/net.cc) prints
    # for rank 0's send to rank 1 on the other node (the posted excerpt starts at the WARN)
    log = tmp_path / "job.log"
    log.write_text("10:8174:8174 [0] NCCL INFO comm 0x55d0 rank 0 nranks 4 cudaDev 0 busId 7000 - Init START\n"
                   "10:8174:8174 [0] NCCL INFO Channel 00/0 : 0[7000] -> 1[7000] [send] via NET/IB/0/GDRDMA\n"
                   + QP_TIMEOUT.read_text())
    doc = _doc(log)
    (pair,) = doc["pairs"]
    assert pair["used"] is False and pair["setup_failed"]["transport"] == "NET"
    assert pair["setup_failed"]["error"] == ("misc/ibvwrap.cc:315 NCCL WARN Call to ibv_modify_qp failed with error "
                                             "Connection timed out")
    assert doc["network"]["connections"]  # the NIC and GDR facts of the line are kept


def test_the_posted_242_excerpt_has_no_channel_line_and_so_no_transport_used():
    doc = _doc(QP_TIMEOUT)
    assert doc["pairs"] == [] and doc["channel_lines"] == 0


LINES_2_19 = """\
h1:11:11 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 commId 0xabc - Init START
h1:11:11 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
h1:11:11 [0] NCCL INFO Connected all rings
"""


def test_a_line_nccl_then_said_connected_stays_used_when_a_later_step_fails():
    text = LINES_2_19 + ("h1:11:11 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct\n"
                         "h1:11:11 [0] transport/shm.cc:123 NCCL WARN Cuda failure 'out of memory'\n"
                         "h1:11:11 [0] NCCL INFO transport.cc:165 -> 1\n"
                         "h1:11:11 [0] NCCL INFO init.cc:1128 -> 1\n")
    log = parse_nccl_debug(text)
    ring, tree = log.channels
    assert ring.used and ring.setup is None  # before "Connected all rings"
    assert not tree.used and tree.setup is not None and tree.setup["status"] == "failed"
    assert tree.setup["transport"] == "SHM" and tree.setup["error"].startswith("transport/shm.cc:123 NCCL WARN")


def test_nccl_2_2x_connected_line_with_its_pxn_and_gdr_words_confirms_the_rings():
    # src/transport/generic.cc: INFO(NCCL_INIT, "Connected all rings, use ring PXN %d GDR %d", ...)
    text = LINES_2_19.replace("Connected all rings", "Connected all rings, use ring PXN 0 GDR 1") + (
        "h1:11:11 [0] transport/p2p.cc:355 NCCL WARN failed to peer with device 1(=1c000): 217 x\n"
        "h1:11:11 [0] NCCL INFO transport.cc:249 -> 3\n")
    assert [c.used for c in parse_nccl_debug(text).channels] == [True]


def test_lines_followed_by_init_complete_or_by_nothing_are_used():
    done = parse_nccl_debug(LINES_2_19.replace("Connected all rings", "comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 "
                                               "busId 1b000 commId 0xabc - Init COMPLETE"))
    assert [c.used for c in done.channels] == [True]
    warned_only = parse_nccl_debug(LINES_2_19.replace("Connected all rings", "NET/Socket : no route") +
                                   "h1:11:11 [0] misc/socket.cc:50 NCCL WARN slow peer\n")
    assert [c.used for c in warned_only.channels] == [True]  # a WARN without an error path is no failure


def test_a_failure_in_the_progress_thread_comes_after_the_connection_was_made():
    text = ("h1:11:11 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0\n"
            "h1:11:12 [0] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer with status=12\n"
            "h1:11:12 [0] NCCL INFO transport/net.cc:1302 -> 6\n"
            "h1:11:12 [0] NCCL INFO proxy.cc:878 -> 6 [Progress Thread]\n")
    assert [c.used for c in parse_nccl_debug(text).channels] == [True]


def test_lines_of_another_transport_before_the_failure_are_unfinished_not_failed():
    text = ("h1:11:11 [0] NCCL INFO comm 0x1 rank 0 nranks 3 cudaDev 0 nvmlDev 0 busId 1b000 commId 0xabc - Init START\n"
            "h1:11:11 [0] NCCL INFO Channel 00/0 : 0[0] -> 2[0] [send] via NET/Socket/0\n"
            "h1:11:11 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n"
            "h1:11:11 [0] transport/p2p.cc:355 NCCL WARN failed to peer with device 1(=1c000): 217 peer access is "
            "not supported between these two devices\n"
            "h1:11:11 [0] NCCL INFO transport.cc:249 -> 3\n")
    log = parse_nccl_debug(text)
    net, p2p = log.channels
    assert net.setup is not None and net.setup["status"] == "unfinished" and net.setup["transport"] == "P2P"
    assert p2p.setup is not None and p2p.setup["status"] == "failed"
    summary = transport_summary([net], "imported")
    assert summary["used"] is False and summary["setup_failed"]["unfinished"] == 1


def test_another_process_failing_does_not_touch_this_ones_lines():
    text = ("h1:11:11 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n"
            "h1:12:12 [1] transport/p2p.cc:238 NCCL WARN failed to open CUDA IPC handle : 217 x\n"
            "h1:12:12 [1] NCCL INFO transport.cc:68 -> 1\n")
    assert [c.used for c in parse_nccl_debug(text).channels] == [True]


def test_the_run_report_cell_and_the_ddp_sentence_never_call_a_failed_transport_used():
    lines = parse_nccl_debug(PEER_217.read_text()).channels
    rec = transport_summary(lines, "imported")
    assert transport_cell(rec) == "none (P2P/IPC set-up failed) (imported)"
    shm = dict(rec, kind="SHM", kinds=["SHM"], via=["SHM/direct/direct"])
    row = SimpleNamespace(numerics={"ddp": "ok", "dp": "wrong"}, nccl_transport=shm)
    assert ddp_survived_clause([row]) is None
    assert ddp_survived_clause([SimpleNamespace(numerics=row.numerics, nccl_transport=dict(shm, used=True))])
