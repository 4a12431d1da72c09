"""A cause or remedy is stated only where the facts read support it (issue 46, item 6): a
peer-memory module is not offered for a NIC the log or scan does not show it serves, and a socket-only
job where nothing said RDMA was meant gets no RDMA remedy; the finding says the cause is not known
from this input and what would tell it."""

from __future__ import annotations

from gputopo.importers.nccl_debug import debug_document
from gputopo.probe.nccl_log import parse_nccl_debug
from gputopo.report.nccl_debug_findings import nccl_debug_findings
from gputopo.report.network_checks import network_findings
from gputopo.sim.description import parse_description
from gputopo.sim.scan import scan_description

# written (not posted): a NET plugin that says it takes no GPU memory, and NCCL's own IB transport
PLUGIN_LOG = """h1:10:10 [0] NCCL INFO Using network {net}
h1:10:10 [0] NCCL INFO NET/{net} : GPU Direct RDMA Disabled for HCA 0 '{dev}'
h1:10:10 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x5 - Init START
h1:10:10 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/{net}/0
h1:10:10 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x5 - Init COMPLETE
"""


def _gdr_off(net: str, dev: str):
    doc = debug_document(parse_nccl_debug(PLUGIN_LOG.format(net=net, dev=dev)), ["w.log"], None)
    return [f for f in nccl_debug_findings(doc) if f.kind == "nccl-gdr-off"]


def test_a_plugin_nic_without_gdr_gets_no_peermem_cause_or_remedy():
    (f,) = _gdr_off("AWS Libfabric", "rdmap16s27")
    text = " ".join([f.cause or ""] + f.remedies)
    assert "not known from this log" in (f.cause or "") and "instance type" in text
    assert "peermem" not in text and "peer-memory module - it looks for" not in text


def test_nccl_ib_without_gdr_keeps_its_peer_memory_cause():
    (f,) = _gdr_off("IB", "mlx5_0")
    assert "register GPU memory" in (f.cause or "") and any("nvidia_peermem" in r for r in f.remedies)


SOCKET_ONLY = """h2:20:20 [0] NCCL INFO NET/IB : No device found.
h2:20:20 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>
h2:20:20 [0] NCCL INFO Using network Socket
h2:20:20 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x5 - Init START
h2:20:20 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0
"""


def test_socket_only_job_with_no_sign_of_rdma_gets_no_rdma_remedy():
    doc = debug_document(parse_nccl_debug(SOCKET_ONLY), ["w.log"], None)
    (f,) = [f for f in nccl_debug_findings(doc) if f.kind == "nccl-socket-fallback"]
    # issue 47 item 3: traffic between hosts over TCP is a warning (no RDMA) unless the log shows it chosen
    assert f.severity == "warning"
    assert "whether the host has an RDMA NIC at all is not known from this log" in (f.cause or "")
    assert not any("device plugin" in r for r in f.remedies)
    assert any("gputopo scan" in r for r in f.remedies)


def _gdr_scan_finding(nic: str):
    toml = (f'extends = "dgx-h100"\nname = "t"\n[host]\npeermem = "none"\n'
            f'[[nic]]\nname = "{nic}"\nbus_id = "0000:19:00.0"\ngpu = 0\n')
    topo = scan_description(parse_description(toml, "t.toml"))
    return [f for f in network_findings(topo, {}) if f.kind == "gpudirect-rdma" and f.severity == "warning"]


def test_scan_offers_nvidia_peermem_only_for_mlx_hcas():
    (mlx,) = _gdr_scan_finding("mlx5_0")
    assert mlx.remedies[0].startswith("modprobe nvidia_peermem")
    (efa,) = _gdr_scan_finding("efa_0")
    assert not efa.remedies[0].startswith("modprobe") and "not known from this scan" in efa.remedies[0]


def test_nccl_tests_out_of_bounds_count_is_wrong_data_not_writes_outside_buffers():
    from gputopo.report.integrity_findings import nccl_tests_findings

    (f,) = nccl_tests_findings([{"out_of_bounds": 2, "out_of_bounds_status": "FAILED", "op": "all_gather",
                                 "file": "x.txt"}], None)
    assert "outside its buffers" not in (f.cause or "") and "wrote" not in f.message
    assert "not known from this count" in (f.cause or "")
    assert f.evidence["tool_lines"] == ["Out of bounds values : 2 FAILED"]


def test_a_slow_pcie_pair_without_host_facts_names_no_acs_remedy(tmp_path):
    """tinygrad issue 44 (posted, no topology): 2 x RTX 4090 peer copies at 6.6 GB/s. No IOMMU or
    ACS fact was read, so neither is offered as the cause or the remedy."""
    import json

    from helpers.cli import gputopo_here
    from helpers.paths import FIXTURES

    f = FIXTURES / "p2pbw" / "tinygrad-44_2x4090_patched-driver_p2p-on-but-6.6GBps-like-staged_cut_excerpt.txt"
    ran = gputopo_here("import", "p2pbw", str(f), "--out", str(tmp_path / "run"), "--no-history")
    assert ran.returncode == 0, ran.stderr
    (slow,) = [x for x in json.loads((tmp_path / "run" / "summary.json").read_text())["findings"] if x["kind"] == "slow"]
    assert slow["cause"].startswith("not known from this input")
    assert not any("ACS" in r and "disable" in r for r in slow["remedies"])
    assert any("gputopo scan" in r for r in slow["remedies"])


def test_a_gpu_slow_with_every_peer_in_an_import_says_what_on_its_path_is_not_known(tmp_path):
    """tinygrad issue 16 (posted): GPU 6 at 2.8 GB/s with every peer; the thread found large BAR off in
    the BIOS, which the output cannot tell: the finding names the GPU, not one cause."""
    import json

    from helpers.cli import gputopo_here
    from helpers.paths import FIXTURES

    f = FIXTURES / "p2pbw" / "tinygrad-16_7x4090_large-bar-off_gpu6-2.8GBps_cuda-failure-mapping-buffer_excerpt.txt"
    ran = gputopo_here("import", "p2pbw", str(f), "--out", str(tmp_path / "run"), "--no-history")
    assert ran.returncode == 0, ran.stderr
    found = json.loads((tmp_path / "run" / "summary.json").read_text())["findings"]
    (gpu6,) = [x for x in found if x["kind"] == "outlier"]
    assert gpu6["gpus"] == [6] and "not known from this output" in gpu6["cause"]
