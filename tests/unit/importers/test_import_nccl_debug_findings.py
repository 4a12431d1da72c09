"""`import nccl-debug`: what the job really did, as findings (issues 37 and 39).

Posted logs are tests/fixtures/nccl-debug/ (sources in tests/fixtures/README.md); the logs
written for these tests (not posted) are tests/data/nccl_debug_written/ (README.md there), and a
few are written inline, each labelled "written".
"""

from __future__ import annotations

import json

from conftest_report import seed_topology, write_run

from gputopo.importers.run import run_import
from gputopo.line_prefixes import strip_ray_repeat
from gputopo.model.linkclass import LinkClass
from gputopo.model.topology import Nic, topology_to_json
from gputopo.probe.nccl_log import parse_nccl_debug, parse_nccl_debug_files
from gputopo.report.nccl_debug_findings import nccl_debug_findings
from helpers.cli import gputopo_here
from helpers.paths import DATA, FIXTURES

POSTED = FIXTURES / "nccl-debug"
WRITTEN = DATA / "nccl_debug_written"


def _json(*args):
    rc, out, err = gputopo_here("import", "nccl-debug", *map(str, args), "--json")
    assert rc == 0, err
    return json.loads(out)


def _kinds(doc):
    return sorted(f["kind"] for f in doc["findings"])


# ------------------------------------------------------------------------------ init failures


def test_posted_init_failure_is_a_finding_quoting_the_call_and_rank():
    """NVIDIA/nccl issue 1529 (posted): rank 1's NVML lookup fails and NCCL returns 2."""
    f = POSTED / "nccl-1529_2containers-1node_nvml-busid-not-found_init-failed_excerpt.log"
    doc = _json(f)
    assert doc["verdict"] == "broken" and _kinds(doc) == ["nccl-init-failed"]
    fi = doc["findings"][0]
    assert fi["severity"] == "error" and fi["evidence"]["ranks"] == [1]
    assert fi["evidence"]["call"] == "nvmlDeviceGetHandleByPciBusId() failed: Not Found"
    assert fi["evidence"]["codes"] == [2] and "unhandled system error" in fi["message"]
    assert doc["problems"] == []  # a failed init is a finding, not a line that could not be read
    rc, out, _ = gputopo_here("import", "nccl-debug", str(f))
    flat = " ".join(out.split())
    assert rc == 0 and "ERROR nccl-init-failed" in flat and "`nvmlDeviceGetHandleByPciBusId() failed: Not Found`" in flat
    assert "rank 1" in flat and "NCCL_DEBUG_SUBSYS including INIT" not in flat and "verdict: broken" in flat


def test_written_init_failure_on_every_rank_names_all_ranks_and_the_error_path():
    doc = _json(WRITTEN / "init-failed_2rank_nvml-not-found_written.log")
    (fi,) = doc["findings"]
    assert fi["kind"] == "nccl-init-failed" and fi["evidence"]["ranks"] == [0, 1] and fi["evidence"]["hosts"] == ["nodea"]
    assert "init.cc:963" in fi["evidence"]["error_path"] and "group.cc:64" in fi["evidence"]["error_path"]
    assert any("unhandled system error" in line for line in fi["evidence"]["framework_lines"])


def test_a_warning_that_init_survives_is_no_failure():
    """Written, as NVIDIA/nccl issue 1066 shows: the same WARN, then init goes on and completes."""
    log = ("gcn6:60:54 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1000 - Init START\n"
           "gcn6:60:54 [0] misc/nvmlwrap.cc:181 NCCL WARN nvmlDeviceGetHandleByPciBusId() failed: Not Found\n"
           "gcn6:60:54 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0\n"
           "gcn6:60:54 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE\n")
    assert not [f for f in nccl_debug_findings(_doc(log)) if f.kind == "nccl-init-failed"]


def test_a_plugin_that_fails_over_to_ib_is_no_failure_and_gdrdma_everywhere_no_alarm():
    """slurmv4 (posted): aws-ofi-nccl fails ('plugin/net.cc:118 -> 2'), NCCL goes on with IB and
    every NET connection has GDRDMA: no finding at all."""
    doc = _json(POSTED / "slurmv4-notes_sglang-2node-16rank_nccl2275_roce-8hca_net-ib-gdrdma.log")
    assert doc["findings"] == [] and doc["verdict"] == "ok"
    conns = doc["network"]["connections"]
    assert len(conns) == 64 // 2 or sum(c["lines"] for c in conns) == 64
    assert all(c["gdr"] and c["net"] == "IB" for c in conns)
    assert {c["device"] for c in conns} == {"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_11"}
    assert doc["network"]["hosts"]["tpgds-aihub0008"]["networks_used"] == ["IB"]
    assert doc["settings"]["NCCL_NET_GDR_LEVEL"] == "PIX"


# ------------------------------------------------------------------------------ GPUDirect RDMA


def test_posted_gdr_disabled_on_both_hcas_without_blaming_peermem():
    """NVIDIA/nccl issue 1537 (posted): HCA 0 and 1 GDR disabled although nvidia_peermem was loaded."""
    doc = _json(POSTED / "nccl-1537_roce-2hca_gdr-disabled-for-hca-0-1_peermem-loaded_excerpt.log")
    assert _kinds(doc) == ["nccl-gdr-off"] and doc["verdict"] == "degraded"
    fi = doc["findings"][0]
    assert [h["device"] for h in fi["evidence"]["hcas"]] == ["mlx5_0", "mlx5_1"]
    assert "HCA 0 'mlx5_0'" in fi["message"] and "HCA 1 'mlx5_1'" in fi["message"]
    assert "cannot register GPU memory" in fi["cause"] and "not loaded" not in fi["cause"]


def test_written_connections_without_gdrdma_name_the_hca_and_the_cause():
    doc = _json(WRITTEN / "ib-no-gdrdma_gdr-disabled-hca1_written.log")
    gdr = [f for f in doc["findings"] if f["kind"] == "nccl-gdr-off"]
    assert sorted((f["evidence"]["host"], f["evidence"]["device"], tuple(f["evidence"]["ranks"])) for f in gdr) == [
        ("n1", "mlx5_1", (1,)), ("n2", "mlx5_1", (3,))]
    assert all("GPU Direct RDMA Disabled for HCA 1" in f["cause"] for f in gdr)
    # the HCA 0 connections used GDRDMA: no finding names mlx5_0
    assert not any("mlx5_0" in f["message"] for f in doc["findings"])


def test_sockets_never_use_gdr_so_their_disabled_line_is_no_finding():
    doc = _json(WRITTEN / "socket-gdr-disabled-bond0_written.log")
    assert not any(f["kind"] == "nccl-gdr-off" for f in doc["findings"])
    # what is said is the TCP traffic between node155 and node156 (issue 47 item 3), not GPUDirect RDMA
    assert {f["kind"] for f in doc["findings"]} == {"nccl-socket-fallback"}
    assert all("GPU Direct RDMA" not in f["message"] for f in doc["findings"])


def test_gdr_off_cause_from_the_topology_and_the_gdr_level():
    """Written: no 'Disabled' line; --topo says GPU 0 -> mlx5_0 is SYS, beyond the level PXB."""
    topo = _topo_with_nics({"mlx5_0": {0: "SYS", 1: "PIX"}})
    log = ("n1:10:10 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB; OOB ib0:10.0.0.1<0>\n"
           "n1:10:10 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 7000 commId 0x5 - Init START\n"
           "n1:10:11 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0\n")
    (fi,) = nccl_debug_findings(_doc(log, topo), topo)
    assert fi.kind == "nccl-gdr-off" and "SYS, farther than NCCL's default level PXB" in fi.cause


# ------------------------------------------------------------------------------ sockets, NICs


def test_socket_fallback_is_a_warning_where_ib_was_expected():
    """Written: NCCL_IB_HCA set, then 'No device found' and NET/Socket connections."""
    log = ("h1:1:1 [0] NCCL INFO NCCL_IB_HCA set by environment to mlx5_0\n"
           "h1:1:1 [0] NCCL INFO NET/IB : No device found.\n"
           "h1:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n"
           "h1:1:1 [0] NCCL INFO Using network Socket\n"
           "h1:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n")
    (fi,) = nccl_debug_findings(_doc(log))
    assert (fi.kind, fi.severity) == ("nccl-socket-fallback", "warning") and "NCCL_IB_HCA set" in fi.message


def test_far_nic_with_topo():
    """Written: GPU 0's NET connections use mlx5_1 (SYS) while mlx5_0 is PIX to it."""
    topo = _topo_with_nics({"mlx5_0": {0: "PIX", 1: "SYS"}, "mlx5_1": {0: "SYS", 1: "PIX"}})
    log = ("n1:10:10 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB; OOB ib0:10.0.0.1<0>\n"
           "n1:10:10 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 7000 commId 0x5 - Init START\n"
           "n1:10:11 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/1/GDRDMA\n")
    found = nccl_debug_findings(_doc(log, topo), topo)
    assert [f.kind for f in found] == ["nccl-far-nic"] and found[0].gpus == [0]
    assert found[0].evidence["nearest"] == "mlx5_0" and found[0].evidence["class"] == "SYS"
    # the nearest NIC: no finding; a topology without NICs: none either (read only what exists)
    near = log.replace("NET/IB/1/GDRDMA", "NET/IB/0/GDRDMA")
    assert nccl_debug_findings(_doc(near, topo), topo) == []
    bare = _topo_with_nics({})
    assert nccl_debug_findings(_doc(log, bare), bare) == []


# ------------------------------------------------------------------------------ logs as launchers write them


def test_ray_vllm_log_decorations_stripped_and_cut_lines_counted_not_guessed():
    """llm-k8s (posted): ANSI, Ray prefixes, '[repeated Nx across cluster]', lines cut mid-word."""
    f = POSTED / "llm-k8s_2x-nd96asr-v4-16xa100_vllm-ray-ansi_p2p-ipc-read_net-socket.log"
    log = parse_nccl_debug_files([f])
    vias = {c.via for c in log.channels}
    assert vias == {"P2P/IPC/read", "NET/Socket/0"}  # no "P", no "[repeated ...]"
    assert not any("repeated" in v for v in log.settings.values())
    cut = [p for p in log.problems if "could not be read whole" in p]
    assert any(":477:" in p and "'P'" in p for p in cut) and any(":635:" in p for p in cut)
    assert any("Ray left" in p and "RAY_DEDUP_LOGS=0" in p for p in log.problems)
    labels = {e.label() for c in log.channels for e in (c.src, c.dst)}
    assert not any(lab.startswith("?") for lab in labels)
    doc = _json(f)
    assert {fi["kind"] for fi in doc["findings"]} == {"nccl-socket-fallback", "incomplete-data"}
    # issue 47 item 3: NET/Socket between the two nodes, nothing in the log choosing it: a warning
    assert {fi["severity"] for fi in doc["findings"] if fi["kind"] == "nccl-socket-fallback"} == {"warning"}


def test_peer_host_not_in_the_log_is_said_in_words():
    doc = _json(POSTED / "slurmv4-notes_sglang-2node-16rank_nccl2275_roce-8hca_net-ib-gdrdma.log")
    ends = {e for p in doc["pairs"] for e in p["endpoints"]}
    assert "rank 7 (nvml 7), on a host not in this log" in ends and not any(e.startswith("?") for e in ends)


def test_lines_without_the_host_prefix_are_read_host_unknown():
    log = parse_nccl_debug_files([WRITTEN / "grep-o_no-prefix_written.log"])
    assert log.no_prefix_lines == 6 and len(log.channels) == 4
    labels = sorted((a.label(), b.label()) for a, b in log.pairs())
    assert ("(host unknown)/0000:1b:00.0", "(host unknown)/0000:3d:00.0") in labels
    # `cut -d' ' -f2-` keeps the [cudaDev] (written)
    cut = parse_nccl_debug("[0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n")
    assert [c.via for c in cut.channels] == ["P2P/IPC"] and cut.no_prefix_lines == 1
    rc, out, _ = gputopo_here("import", "nccl-debug", str(WRITTEN / "grep-o_no-prefix_written.log"))
    assert rc == 0 and "their host is unknown" in " ".join(out.split())


def test_nccl27_direct_shared_memory_is_shm():
    log = parse_nccl_debug_files([WRITTEN / "nccl27_direct-shared-memory_written.log"])
    assert sorted(c.kind for c in log.channels) == ["P2P", "SHM", "SHM"]


def test_ring_order_lines_are_not_cut_channel_lines():
    """training-on-eks (posted): 'Ring 08 : 0 -> 1 -> 2' is NCCL's ring order, not a connection."""
    log = parse_nccl_debug_files([POSTED / "training-on-eks_p4d-24xlarge-1pod-4proc.log"])
    assert log.problems == [] and len(log.channels) == 192


def test_strip_ray_repeat():
    assert strip_ray_repeat("x via NET/IB/0/GDRDMA [repeated 14x across cluster]") == ("x via NET/IB/0/GDRDMA", 14)
    assert strip_ray_repeat("a [repeated 8x across cluster] (Ray deduplicates logs by default.") == ("a", 8)
    assert strip_ray_repeat("plain line") == ("plain line", 0)


# ------------------------------------------------------------------------------ --into


def test_into_puts_the_init_failure_in_the_run_folders_report(tmp_path):
    from gputopo.report.analysis import analyze
    from gputopo.report.run_folder import load_run

    topo = seed_topology(set())
    topo.host.hostname = "nodea"
    run = write_run(tmp_path / "run", topo=topo)
    run_import("nccl-debug", [WRITTEN / "init-failed_2rank_nvml-not-found_written.log"], into=run, render=False)
    kinds = [f.kind for f in analyze(load_run(run)).findings]
    assert "nccl-init-failed" in kinds
    rc, out, _ = gputopo_here("report", str(run), "--json")
    assert rc == 0 and "nccl-init-failed" in out


# ------------------------------------------------------------------------------ helpers


def _doc(text, topo=None):
    from gputopo.importers.nccl_debug import debug_document

    return debug_document(parse_nccl_debug(text), ["written"], topo)


def _topo_with_nics(classes):
    topo = seed_topology(set())
    topo.host.hostname = "n1"
    topo.nics = [Nic(label=f"NIC{k}", device=name, gpu_classes={g: LinkClass.parse(c) for g, c in per.items()})
                 for k, (name, per) in enumerate(classes.items())]
    assert topology_to_json(topo)["nics"] is not None
    return topo
