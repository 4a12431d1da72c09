"""The network path of every GPU (report/network_checks.py), each finding on a simulated machine:
nearest NIC and NCCL's GDR distance rule, GPUDirect RDMA's kernel side, NIC port state, rate,
error counters, PCIe link and ACS redirect between a GPU and its NIC."""

from __future__ import annotations

import pytest

from gputopo.model import LinkClass
from gputopo.model.nic import GdrKernel
from gputopo.report.network_checks import gdr_level, gpu_network_paths, network_findings, network_json
from gputopo.report.topology_checks import topology_findings
from gputopo.sim.description import builtin_names, parse_description
from gputopo.sim.scan import scan_description, scan_simulated

NO_ENV: dict = {}


def scan(toml: str):
    return scan_description(parse_description(toml, "net.toml"))


def kinds(findings, *only):
    return [(f.kind, f.severity) for f in findings if not only or f.kind in only]


NETWORK_KINDS = ("nic-far", "gpudirect-rdma", "nic-port-down", "nic-rate", "nic-errors")


def net(findings):
    return [f for f in findings if f.kind in NETWORK_KINDS or "nic" in f.evidence]


def with_nic(extra: str, host: str = "") -> str:
    """dgx-h100 with its 8 NICs, NIC mlx5_0 (beside GPU 0) given ``extra`` keys."""
    nics = "\n".join(f'[[nic]]\nname = "mlx5_{k}"\nbus_id = "{bus}"\ngpu = {k}\n' + (extra if k == 0 else "")
                     for k, bus in enumerate(["0000:19:00.0", "0000:2b:00.0", "0000:3b:00.0", "0000:5e:00.0",
                                              "0000:9b:00.0", "0000:ac:00.0", "0000:bb:00.0", "0000:dc:00.0"]))
    return f'extends = "dgx-h100"\nname = "net-test"\n[host]\n{host}\n{nics}'


def test_healthy_dgx_h100_has_no_network_finding_and_gdr_on_every_gpu():
    topo = scan_simulated("dgx-h100")
    assert net(topology_findings(topo)) == []
    paths = gpu_network_paths(topo, NO_ENV)
    assert [(p.gpu, p.devices, str(p.link_class), p.gdr_by_distance) for p in paths] == [
        (g, [f"mlx5_{g}"], "PIX", True) for g in range(8)]
    assert isinstance(topo.host.gpudirect_rdma, GdrKernel) and topo.host.gpudirect_rdma.available is True


@pytest.mark.parametrize("name", builtin_names())
def test_machines_without_nics_get_no_network_finding(name):
    topo = scan_simulated(name)
    if topo.nics:
        return
    assert net(topology_findings(topo)) == []
    assert gpu_network_paths(topo, NO_ENV) == []


def test_one_gpu_vms_keep_zero_warnings():
    for name in ("h100-sxm-1gpu", "h200-1gpu"):
        found = topology_findings(scan_simulated(name))
        assert [f for f in found if f.severity != "info"] == [], name


def test_nics_on_one_socket_flag_the_other_sockets_gpus():
    topo = scan_simulated("h100-nics-one-socket")
    found = net(topology_findings(topo))
    # issue 47 item 15: a design fact, said as info with what it costs (no GPUDirect RDMA; PXN over
    # NVLink to a GPU beside a NIC), not a warning
    assert kinds(found) == [("nic-far", "info")]
    f = found[0]
    assert f.gpus == [4, 5, 6, 7] and f.link_class == "SYS"
    assert "no GPUDirect RDMA" in f.message and "PXN" in f.message and f.evidence["pxn_via_nvlink"]
    assert f.evidence["nic"] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert f.evidence["gdr_by_distance"] is False
    # the near GPUs keep GPUDirect RDMA by distance, the far ones lose it
    by_gpu = {p.gpu: p for p in gpu_network_paths(topo, NO_ENV)}
    assert by_gpu[0].gdr_by_distance is True and by_gpu[5].gdr_by_distance is False
    assert by_gpu[5].nccl_path == "SYS"


def test_distance_rule_alone_is_info_when_every_gpu_is_far():
    # one NIC on its own host bridge on socket 0: NODE to GPUs 0-3, SYS to 4-7; no GPU has a near one
    topo = scan('extends = "dgx-h100"\nname = "far"\n[[nic]]\nname = "mlx5_0"\nbus_id = "0000:c0:00.0"\nnuma_node = 0\n')
    found = net(network_findings(topo, NO_ENV))
    assert kinds(found) == [("gpudirect-rdma", "info"), ("gpudirect-rdma", "info")]
    assert {tuple(f.gpus): f.evidence["nccl_path"] for f in found} == {(0, 1, 2, 3): "PHB", (4, 5, 6, 7): "SYS"}
    # NCCL_NET_GDR_LEVEL=SYS lets it through: no finding
    assert net(network_findings(topo, {"NCCL_NET_GDR_LEVEL": "SYS"})) == []
    # old numbering: 3 is PHB, so the NODE GPUs pass and the SYS ones do not
    found = network_findings(topo, {"NCCL_NET_GDR_LEVEL": "3"})
    assert [f.gpus for f in found] == [[4, 5, 6, 7]]


def test_gdr_level_reads_nccl_names_and_old_numbers():
    assert gdr_level({})[0] == "P2C"
    assert gdr_level({"NCCL_NET_GDR_LEVEL": "PIX"})[0] == "PIX"
    assert gdr_level({"NCCL_NET_GDR_LEVEL": "1"})[0] == "PIX"
    assert gdr_level({"NCCL_NET_GDR_LEVEL": "9"})[0] == "SYS"
    level, where = gdr_level({"NCCL_NET_GDR_LEVEL": "bogus"})
    assert level == "P2C" and "ignored" in where


def test_gdr_read_0_turns_sends_off():
    topo = scan_simulated("dgx-h100")
    p = gpu_network_paths(topo, {"NCCL_NET_GDR_READ": "0"})[0]
    assert p.gdr_by_distance is True and p.gdr_send is False


def test_no_peermem_and_no_dmabuf_is_gpudirect_unavailable():
    found = net(network_findings(scan(with_nic("", 'peermem = "none"')), NO_ENV))
    assert kinds(found) == [("gpudirect-rdma", "warning")]
    assert "proprietary" in found[0].message and len(found[0].evidence["nic"]) == 8


def test_no_peermem_but_dmabuf_is_not_unavailable():
    topo = scan(with_nic("", 'peermem = "none"\nopen_kernel_module = true\nkernel = "6.5.0-1018-nvidia"'))
    assert topo.host.gpudirect_rdma.dmabuf is True
    assert net(network_findings(topo, NO_ENV)) == []


def test_old_kernel_has_no_dmabuf_but_peermem_suffices():
    topo = scan(with_nic("", 'open_kernel_module = true\nkernel = "5.4.0-150-generic"'))
    g = topo.host.gpudirect_rdma
    assert g.dmabuf is False and "5.4.0" in g.dmabuf_reason and g.peermem is True
    assert net(network_findings(topo, NO_ENV)) == []


def test_polling_port_is_a_warning_disabled_an_info():
    polling = [f for f in network_findings(scan(with_nic('state = "Down"\n')), NO_ENV) if f.kind == "nic-port-down"]
    assert kinds(polling) == [("nic-port-down", "warning")]
    assert "Polling" in polling[0].message and polling[0].evidence["nic"] == "mlx5_0"
    disabled = [f for f in network_findings(scan(with_nic('state = "Down"\nphys_state = "Disabled"\n')), NO_ENV)
                if f.kind == "nic-port-down"]
    assert kinds(disabled) == [("nic-port-down", "info")]
    assert "deliberate" in disabled[0].message


def test_port_below_its_peers_rate():
    found = net(network_findings(scan(with_nic("rate_gbps = 200\n")), NO_ENV))
    assert kinds(found) == [("nic-rate", "warning")]
    assert found[0].evidence["nic"] == "mlx5_0" and found[0].evidence["peer_rate_gbps"] == 400.0


def test_front_end_nic_of_another_model_is_no_peer():
    toml = with_nic("") + ('[[nic]]\nname = "mlx5_8"\nbus_id = "0000:c0:00.0"\nnuma_node = 0\n'
                           'rate_gbps = 100\nlink_layer = "Ethernet"\nca_type = "MT4125"\n')
    assert net(network_findings(scan(toml), NO_ENV)) == []


def test_error_counters_are_a_stated_fact():
    found = net(network_findings(scan(with_nic("counters = { symbol_error = 12, link_downed = 1 }\n")), NO_ENV))
    assert kinds(found) == [("nic-errors", "info")]
    assert found[0].evidence["counters"] == {"symbol_error": 12, "link_downed": 1}


def test_nic_pcie_downtrained():
    found = net(network_findings(scan(with_nic("pcie_width = 8\n")), NO_ENV))
    assert kinds(found) == [("pcie-downgraded", "warning")]
    assert found[0].evidence["nic"] == "mlx5_0" and found[0].evidence["width_current"] == 8


def test_acs_redirect_between_gpu_and_its_nic():
    topo = scan(with_nic("", "acs_redirect = true"))
    found = [f for f in network_findings(topo, NO_ENV) if f.kind == "acs"]
    assert found and all("nic" in f.evidence for f in found)
    assert sorted(g for f in found for g in f.gpus) == list(range(8))


def test_network_json_and_round_trip():
    from gputopo.model import topology_from_json, topology_to_json

    topo = scan(with_nic("counters = { symbol_error = 3 }\n"))
    doc = topology_to_json(topo)
    assert doc["nics"][0]["ports"][0]["counters"]["symbol_error"] == 3
    assert doc["host"]["gpudirect_rdma"]["available"] is True
    back = topology_from_json(doc)
    assert back.nics[0].ports == topo.nics[0].ports
    assert back.host.gpudirect_rdma == topo.host.gpudirect_rdma
    assert kinds(network_findings(back, NO_ENV)) == kinds(network_findings(topo, NO_ENV))
    j = network_json(topo, NO_ENV)
    assert j["gdr_level"]["nccl_path"] == "P2C" and j["gpus"][0]["gdr_by_distance"] is True
    assert LinkClass.parse(j["gpus"][0]["link_class"]) == LinkClass.parse("PIX")


def test_a_single_nic_far_from_some_gpus_is_info_not_warning():
    # one NIC beside GPU 4 (socket 1): GPUs 0-3 reach it across the socket; one NIC cannot be
    # beside both sockets, so the far GPUs are stated, not warned about
    topo = scan('extends = "dgx-h100"\nname = "one"\n[[nic]]\nname = "mlx5_0"\nbus_id = "0000:9b:00.0"\ngpu = 4\n')
    found = [f for f in network_findings(topo, NO_ENV) if f.kind == "nic-far"]
    assert [(f.severity, f.gpus, f.link_class) for f in found] == [("info", [0, 1, 2, 3], "SYS"),
                                                                   ("info", [5, 6, 7], "NODE")]


def test_a_down_nic_is_nobodys_nearest():
    # mlx5_0 beside GPU 0 is down: NCCL uses Active ports only, so GPU 0's nearest usable NIC is
    # another GPU's (NODE, through the CPU) while GPUs 1-7 keep theirs at PIX
    topo = scan(with_nic('state = "Down"\n'))
    by_gpu = {p.gpu: p for p in gpu_network_paths(topo, NO_ENV)}
    assert str(by_gpu[0].link_class) == "NODE" and "mlx5_0" not in by_gpu[0].devices
    found = network_findings(topo, NO_ENV)
    assert ("nic-far", "info") in kinds(found) and ("nic-port-down", "warning") in kinds(found)
    assert [f.gpus for f in found if f.kind == "nic-far"] == [[0]]


# ----------------------------------------------------------------------------- issue 47, item 15
# A NIC far from some GPUs is a design fact: info with what it costs, NICs counted by adapter; a
# warning only where a job's own NCCL log shows those GPUs' traffic staged through host memory.

CHLC_TOPO = "chlc-blog_8x4090_stock-driver_p2p-none_no-device-header.topo.txt"


def _posted_topo(name):
    from gputopo.probe.smi import topology_from_smi
    from helpers.paths import FIXTURES

    return topology_from_smi((FIXTURES / "p2pbw" / name).read_text())


def test_posted_8x4090_without_nvlink_far_gpus_are_info_counted_by_adapter():
    """Posted (chlc blog): 8x RTX 4090, no NVLink, 4 NIC functions on two dual-port cards beside GPU 6."""
    topo = _posted_topo(CHLC_TOPO)
    (f,) = [f for f in network_findings(topo, NO_ENV) if f.kind == "nic-far"]
    assert f.severity == "info" and f.gpus == [0, 1, 2, 3, 4, 5, 7]
    assert f.evidence["adapters"] == 2 and "2 RDMA adapters for 8 GPUs" in f.message
    assert "no GPUDirect RDMA" in f.message and "PXN" not in f.message  # no NVLink: nothing to relay over


def test_written_staging_in_the_jobs_log_makes_the_far_gpus_a_warning():
    topo = _posted_topo(CHLC_TOPO)
    found = [f for f in network_findings(topo, NO_ENV, staged_gpus={3}) if f.kind == "nic-far"]
    (f,) = found
    assert f.severity == "warning" and f.evidence["staged_in_job_log"] == [3]
    assert "staged through host memory" in f.message
    # a staged GPU that is beside its NIC changes nothing
    assert [x.severity for x in network_findings(topo, NO_ENV, staged_gpus={6}) if x.kind == "nic-far"] == ["info"]


def test_written_staged_gpus_read_from_a_jobs_nccl_log_facts():
    from gputopo.report.network_checks import staged_gpus

    doc = {"network": {"connections": [
        {"net": "IB", "gdr": False, "gpu_index": 3}, {"net": "IB", "gdr": True, "gpu_index": 6},
        {"net": "Socket", "gdr": False, "gpu_index": 1}, {"net": "IB", "gdr": False}]}}
    assert staged_gpus(doc) == {3} and staged_gpus(None) == set()


def test_written_dual_port_adapter_is_one_adapter():
    two_functions = ('extends = "dgx-h100"\nname = "dual"\n[[nic]]\nname = "mlx5_0"\nbus_id = "0000:9b:00.0"\ngpu = 4\n'
                     '[[nic]]\nname = "mlx5_1"\nbus_id = "0000:9b:00.1"\ngpu = 4\n')
    topo = scan(two_functions)
    from gputopo.report.network_checks import adapter_count

    assert len(topo.nics) == 2 and adapter_count(topo.nics) == 1


def test_posted_8x4090_a_spec_needing_gdr_on_every_gpu_fails_on_the_info(tmp_path):
    """A spec that needs GPUDirect RDMA on every GPU lists nic-far in findings.fail_on: the info
    fails the gate (the p2pbw output and its topo -m of the chlc blog post)."""
    from helpers.cli import gputopo_here
    from helpers.paths import FIXTURES

    out = tmp_path / "run"
    src = FIXTURES / "p2pbw"
    ran = gputopo_here("import", "p2pbw", str(src / CHLC_TOPO.replace(".topo.txt", ".txt")), "--topo",
                       str(src / CHLC_TOPO), "--out", str(out), "--no-history")
    assert ran.returncode == 0, ran.stderr
    spec = tmp_path / "gdr.toml"
    spec.write_text('name = "gdr-everywhere"\n[findings]\nfail_on = ["nic-far"]\n')
    checked = gputopo_here("check", "--spec", str(spec), str(out), "--no-history")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "nic-far" in checked.stdout


def test_written_the_scan_rule_reads_an_imported_runs_nccl_log_for_staging():
    """The registered scan rule takes the staged GPUs from the run's NCCL log (an import with
    --topo), so a far GPU whose NET connections went without GDRDMA is a warning there."""
    from types import SimpleNamespace

    from gputopo.report.rules import RULES, Facts

    topo = _posted_topo(CHLC_TOPO)
    (rule,) = [r for r in RULES if r.name == "scan-checks"]
    doc = {"network": {"connections": [{"net": "IB", "gdr": False, "gpu_index": 0}]}}
    far = [f for f in rule.judge(Facts(topology=topo, run=SimpleNamespace(nccl_debug=doc))) if f.kind == "nic-far"]
    assert [f.severity for f in far] == ["warning"] and far[0].evidence["staged_in_job_log"] == [0]
    plain = [f for f in rule.judge(Facts(topology=topo)) if f.kind == "nic-far"]
    assert [f.severity for f in plain] == ["info"]
