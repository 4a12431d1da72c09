"""Issue 47 item 16: Ray's folded lines keep their host. Where Ray folded a peer's own lines away
(``[repeated Nx across cluster]``), a NET peer of a job whose Ray prefixes (``(RayWorkerWrapper
pid=330, ip=10.244.1.228)``, no ip on the driver's node) show exactly two machines, each paired
with the host of the NCCL lines it prefixed, is named with the other machine: never "a host not in
this log". Posted: the vLLM/Ray 2 x ND96asr_v4 log (llm-k8s); the 3-machine log below is written."""

from __future__ import annotations

from gputopo.importers.nccl_debug import debug_document
from gputopo.importers.run import run_import
from gputopo.probe.nccl_log import parse_nccl_debug
from gputopo.report.nccl_debug_findings import nccl_debug_findings
from helpers.paths import FIXTURES

RAY = FIXTURES / "nccl-debug" / "llm-k8s_2x-nd96asr-v4-16xa100_vllm-ray-ansi_p2p-ipc-read_net-socket.log"


def test_posted_ray_log_names_every_net_peer_with_its_host():
    doc = run_import("nccl-debug", [RAY]).imported.imports[0]
    assert doc["ray_nodes"] == {"10.244.1.228": ["deepseek-v2-5-0-1"], "(driver's node)": ["deepseek-v2-5-0"]}
    net = [p for p in doc["pairs"] if "NET" in p["kinds"]]
    assert net and all("not in this log" not in e and "does not show" not in e for p in net for e in p["endpoints"])
    assert {tuple(sorted(e.split("/")[0] for e in p["endpoints"])) for p in net} == {("deepseek-v2-5-0", "deepseek-v2-5-0-1")}
    assert doc["ray_peer_hosts"] > 0 and sum(p["channels"] for p in net) == 16  # no line dropped
    for f in nccl_debug_findings(doc):
        if f.kind == "nccl-socket-fallback":
            assert "not in this log" not in f.message


THREE = """(RayWorker pid=1, ip=10.0.0.1) a:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x9 - Init START
(RayWorker pid=1, ip=10.0.0.1) a:1:1 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0
(RayWorker pid=2, ip=10.0.0.2) b:2:2 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>
(RayWorker pid=3, ip=10.0.0.3) c:3:3 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.3<0>
"""


def test_with_three_machines_the_peer_is_not_guessed():
    doc = debug_document(parse_nccl_debug(THREE), ["w.log"], None)  # written
    (pair,) = doc["pairs"]
    assert any("host not in this log" in e for e in pair["endpoints"]) and doc["ray_peer_hosts"] == 0
    doc = debug_document(parse_nccl_debug("\n".join(THREE.splitlines()[:3])), ["w.log"], None)  # two machines
    (pair,) = doc["pairs"]
    assert sorted(e.split("/")[0] for e in pair["endpoints"]) == ["a", "b"] and doc["ray_peer_hosts"] == 1
