"""Issue 47 item 3: traffic between hosts over TCP. NET connections between hosts over
``NET/Socket`` are a warning naming the interfaces (posted: ROCm/rccl issue 1026, g1064 <-> g1072),
with the cause where the log shows one; info naming the setting where the log shows the job chose
sockets; a one-node job that chose a Socket device and connected nothing through it raises nothing
and is not said to have "used Socket" (written variants)."""

from __future__ import annotations

from gputopo.cli.importer import network_lines
from gputopo.importers.nccl_debug import debug_document
from gputopo.importers.run import run_import
from gputopo.probe.nccl_log import parse_nccl_debug
from gputopo.report.nccl_debug_findings import nccl_debug_findings
from helpers.paths import FIXTURES

RCCL = FIXTURES / "nccl-debug" / "rccl-1026_2node-mi250x_comm-nranks-suffix_p2p-ipc_net-socket_excerpt.log"


def _doc(text):
    return debug_document(parse_nccl_debug(text), ["w.log"], None)


def _socket(doc):
    return [f for f in nccl_debug_findings(doc) if f.kind == "nccl-socket-fallback"]


def test_posted_rccl_job_between_two_hosts_over_sockets_is_a_warning_per_host():
    found = _socket(run_import("nccl-debug", [RCCL]).imported.imports[0])
    assert [(f.evidence["host"], f.severity, f.evidence["peer_hosts"]) for f in found] == [
        ("g1064", "warning", ["g1072"]), ("g1072", "warning", ["g1064"])]
    assert "TCP" in found[0].message and "NET/Socket/1" in found[0].message and "host memory" in found[0].message


TWO_HOSTS = """{pre}a:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>
b:2:2 [0] NCCL INFO NET/Socket : Using [0]ens5:10.0.0.2<0>
a:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x5 - Init START
b:2:2 [0] NCCL INFO comm 0x2 rank 1 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x5 - Init START
a:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0
b:2:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [receive] via NET/Socket/0
"""


def test_sockets_between_hosts_name_the_interfaces_and_the_cause_the_log_shows():
    found = _socket(_doc(TWO_HOSTS.format(pre="a:1:1 [0] NCCL INFO Failed to open libibverbs.so[.1]\n")))
    assert [f.severity for f in found] == ["warning", "warning"]
    a = next(f for f in found if f.evidence["host"] == "a")
    assert "eth0 (NET/Socket/0)" in a.message and "libibverbs" in (a.cause or "")
    b = next(f for f in found if f.evidence["host"] == "b")
    assert "ens5 (NET/Socket/0)" in b.message and "not known from this log" in (b.cause or "")


def test_sockets_the_job_chose_are_info_naming_the_setting():
    found = _socket(_doc(TWO_HOSTS.format(pre="a:1:1 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.\n")))
    assert {f.severity for f in found} == {"info"} and all("NCCL_IB_DISABLE=1" in f.message for f in found)
    found = _socket(_doc(TWO_HOSTS.format(pre="a:1:1 [0] NCCL INFO NCCL_NET set by environment to Socket\n")))
    assert {f.severity for f in found} == {"info"} and all("NCCL_NET=Socket" in f.message for f in found)


def test_an_ib_plugin_that_found_nothing_is_the_cause():
    found = _socket(_doc(TWO_HOSTS.format(pre="a:1:1 [0] NCCL INFO NET/IBext_v8 : No device found.\n")))
    a = next(f for f in found if f.evidence["host"] == "a")
    assert a.severity == "warning" and "No device found" in (a.cause or "")


ONE_NODE = """n:1:1 [0] NCCL INFO NET/IB : No device found.
n:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>
n:1:1 [0] NCCL INFO Using network Socket
n:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x5 - Init START
n:2:2 [1] NCCL INFO comm 0x2 rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 2000 commId 0x5 - Init START
n:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read
n:2:2 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/IPC/read
"""


def test_one_node_job_that_chose_socket_and_connected_nothing_raises_nothing():
    doc = _doc(ONE_NODE)
    assert nccl_debug_findings(doc) == []
    (line,) = [ln for ln in network_lines(doc) if ln.startswith("Network on n:")]
    assert "used Socket" not in line and "chose Socket (no connection over it in the log)" in line
