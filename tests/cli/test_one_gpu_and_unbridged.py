"""No false alarm on healthy PCIe GPUs, and what one GPU gets (issue 16, items 2, 5, 6), run as a
user runs gputopo: ``python -m gputopo`` on the simulated machines.

- An NVLink-capable card with no bridge lists every NVLink port inactive with no far end (as the
  real driver does); that is ``nvlink-not-connected`` (info), never ``nvlink-down``.
- A GPU whose links were meant to be up (an NVSwitch system, here degraded-nvlink) still errors.
- One GPU: bench measures it alone and says so; numerics says in one line why it cannot run.
- IOMMU/ACS on one GPU say what is true for it, not "0 GPU pair(s) reach each other over PCIe".
"""

from __future__ import annotations

import json

import pytest

from gputopo.probe.nvml_codes import NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_SUPPORTED
from gputopo.sim.description import load_description
from gputopo.sim.fake_nvml import NVML_FI_DEV_NVLINK_LINK_COUNT, FakeNvml, NVMLError
from helpers.cli import gputopo, gputopo_here

ONE = "h100-pcie-1gpu"
BRIDGED = "a100-pcie-4gpu-bridged"


#: The command sees every GPU of its machine, whatever this shell's CUDA_VISIBLE_DEVICES hides.
ALL_GPUS_VISIBLE = {"CUDA_VISIBLE_DEVICES": None}


def scan_problems(sim):
    proc = gputopo_here("scan", "--sim", sim, "--json", env=ALL_GPUS_VISIBLE, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["problems"]


def bench_json(sim, out, *args):
    proc = gputopo("bench", "--sim", sim, "--quick", "--json", "--out", out, *args, env=ALL_GPUS_VISIBLE,
                   timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc


def alarms(findings):
    return [(f["kind"], f["severity"], f.get("gpus")) for f in findings if f["severity"] in ("error", "warning")]


@pytest.mark.slow
def test_synthetic_3gpu_p2p_has_no_nvlink_down(tmp_path):
    """GPU 2 simply has no bridge partner: info that it has no NVLink connected, no error."""
    doc, _ = bench_json("synthetic-3gpu", tmp_path / "run", "--tests", "p2p")
    assert alarms(doc["findings"]) == []
    assert doc["verdict"] == "ok"
    info = [f for f in doc["findings"] if f["kind"] == "nvlink-not-connected"]
    assert [f["gpus"] for f in info] == [[2]] and info[0]["severity"] == "info"


@pytest.mark.parametrize("sim", [ONE, BRIDGED])
def test_healthy_pcie_machines_scan_clean(sim):
    assert alarms(scan_problems(sim)) == []


@pytest.mark.slow
def test_bridged_a100_pcie_bench_clean(tmp_path):
    doc, _ = bench_json(BRIDGED, tmp_path / "run", "--tests", "p2p,dp,collectives")
    assert alarms(doc["findings"]) == [] and doc["verdict"] == "ok"
    classes = {tuple(p["gpus"]): p["link_class"] for p in doc["pairs"]}
    assert classes[(0, 1)] == classes[(2, 3)] == "NV12" and classes[(1, 2)] == "SYS"


def test_degraded_nvlink_still_errors():
    down = [f for f in scan_problems("degraded-nvlink") if f["kind"] == "nvlink-down"]
    assert [(f["severity"], f["gpus"]) for f in down] == [("error", [5])]
    assert down[0]["evidence"]["down"] == list(range(12))


@pytest.mark.slow
def test_one_gpu_bench_measures_it_alone(tmp_path):
    doc, proc = bench_json(ONE, tmp_path / "run")
    notes = [ln for ln in proc.stderr.splitlines() if "one GPU" in ln and "measured alone" in ln]
    assert len(notes) == 1, proc.stderr
    assert doc["pairs"] == [] and [s["gpu"] for s in doc["self"]] == [0]
    assert doc["self"][0]["wrong"] == 0 and doc["self"][0]["h2d_gbps"] > 0
    assert alarms(doc["findings"]) == []
    assert any("numerics not run" in ln for ln in proc.stderr.splitlines())
    # a finished one-GPU run resumes:
    again = gputopo("bench", "--resume", tmp_path / "run", "--json", env=ALL_GPUS_VISIBLE, timeout=300)
    assert again.returncode == 0, again.stderr  # as any finished run, with nothing left to do
    assert "nothing to do" in again.stderr and again.stdout == ""


@pytest.mark.slow
def test_one_gpu_bench_terminal_has_no_class_table(tmp_path):
    proc = gputopo("bench", "--sim", ONE, "--quick", "--out", tmp_path / "run", env=ALL_GPUS_VISIBLE,
                   timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "GPUs alone" in proc.stdout and "not-measured │" not in proc.stdout


@pytest.mark.slow
def test_self_alone_prints_no_table_of_unmeasured_classes(tmp_path):
    proc = gputopo("bench", "--sim", "pcie-4gpu", "--self", "--quick", "--out", tmp_path / "run",
                   env=ALL_GPUS_VISIBLE, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "GPUs alone" in proc.stdout
    assert "Link classes" in proc.stdout and "no GPU pair was measured" in proc.stdout
    assert "median GB/s" not in proc.stdout and "not-measured │" not in proc.stdout  # the class table's


def test_one_gpu_numerics_says_why_in_one_line(tmp_path):
    proc = gputopo_here("numerics", "--sim", ONE, "--out", tmp_path / "run", env=ALL_GPUS_VISIBLE,
                        timeout=300)
    assert proc.returncode == 3
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert "two GPUs" in lines[0] and "DataParallel" in lines[0] and "DDP" in lines[0]
    assert not (tmp_path / "run").exists()


def test_iommu_and_acs_on_one_gpu_say_what_is_true(tmp_path):
    desc = tmp_path / "one-iommu.toml"
    desc.write_text(f'extends = "{ONE}"\nname = "one-iommu"\n[host]\niommu = "translated"\n'
                    'iommu_group_type = "DMA"\nacs_redirect = true\n')
    found = {f["kind"]: f for f in scan_problems(str(desc))}
    for kind in ("iommu", "acs"):
        f = found[kind]
        assert f["severity"] == "info", f
        assert "0 GPU pair" not in f["message"] and "one GPU" in f["message"]
        assert "host<->GPU" in f["message"]
    assert alarms(list(found.values())) == []


def test_iommu_still_warns_where_pcie_pairs_exist():
    found = [f for f in scan_problems("seed-8gpu") if f["kind"] == "iommu"]
    assert found and found[0]["severity"] == "warning" and "GPU pair(s) reach each other" in found[0]["message"]


def test_fake_nvml_answers_for_an_unbridged_card_as_the_driver_does():
    """Every port up to the model's link count (NVML_FI_DEV_NVLINK_LINK_COUNT), inactive, no
    remote end; past the last port INVALID_ARGUMENT."""
    lib = FakeNvml(load_description(ONE))
    lib.nvmlInit()
    h = lib.nvmlDeviceGetHandleByIndex(0)
    field = lib.nvmlDeviceGetFieldValues(h, [NVML_FI_DEV_NVLINK_LINK_COUNT])[0]
    assert field.nvmlReturn == 0 and field.value.uiVal == 18
    assert [lib.nvmlDeviceGetNvLinkState(h, k) for k in range(18)] == [0] * 18
    for k in (0, 17):
        with pytest.raises(NVMLError) as ei:
            lib.nvmlDeviceGetNvLinkRemotePciInfo(h, k)
        assert ei.value.value == NVML_ERROR_NOT_SUPPORTED
    with pytest.raises(NVMLError) as ei:
        lib.nvmlDeviceGetNvLinkState(h, 18)
    assert ei.value.value == NVML_ERROR_INVALID_ARGUMENT


def test_fake_nvml_lists_the_ports_of_a_card_without_a_partner():
    """synthetic-3gpu's GPU 2 (an RTX A6000 with no bridge partner) lists its 4 ports, inactive."""
    lib = FakeNvml(load_description("synthetic-3gpu"))
    lib.nvmlInit()
    h = lib.nvmlDeviceGetHandleByIndex(2)
    assert lib.nvmlDeviceGetFieldValues(h, [NVML_FI_DEV_NVLINK_LINK_COUNT])[0].value.uiVal == 4
    assert [lib.nvmlDeviceGetNvLinkState(h, k) for k in range(4)] == [0] * 4
    h0 = lib.nvmlDeviceGetHandleByIndex(0)
    assert [lib.nvmlDeviceGetNvLinkState(h0, k) for k in range(4)] == [1] * 4


def test_iommu_on_an_all_nvlink_machine_says_only_a_fallback_is_at_risk(tmp_path):
    desc = tmp_path / "two-bridged.toml"
    desc.write_text('name = "two"\n[pairs]\n"0,1" = "NV12"\n[defaults]\nname = "NVIDIA A100 80GB PCIe"\n'
                    '[[gpu]]\n[[gpu]]\n[host]\niommu = "translated"\n')
    found = [f for f in scan_problems(str(desc)) if f["kind"] == "iommu"]
    assert len(found) == 1 and found[0]["severity"] == "info"
    assert "0 GPU pair" not in found[0]["message"] and "falls back to PCIe" in found[0]["message"]


def _gpus_with_links(name, active_per_gpu, ports):
    from gputopo.model import Gpu
    from gputopo.model.topology import NvLink
    from gputopo.model.values import NotAvailable

    na = NotAvailable("NVML_ERROR_NOT_SUPPORTED")
    return [Gpu(nvml_index=i, name=name, pci_bus_id=f"00000000:{0x10 + i:02X}:00.0",
                nvlinks=[NvLink(link=k, active=k < a, remote_bus_id=na, remote_type=na) for k in range(ports)])
            for i, a in enumerate(active_per_gpu)]


def test_rule_sxm_modules_with_links_down_and_no_far_end_are_errors():
    """Fabric manager not running on an HGX board: every link inactive, NVML names no far end.
    SXM links are wired by the baseboard, so that is nvlink-down, not 'no NVLink connected'."""
    from gputopo.model import Topology
    from gputopo.report.topology_checks import topology_findings

    topo = Topology(gpus=_gpus_with_links("NVIDIA H100 80GB HBM3", [0, 0], 18), pairs=[])
    found = [(f.kind, f.severity) for f in topology_findings(topo) if f.kind.startswith("nvlink")]
    assert found == [("nvlink-down", "error")] * 2


def test_rule_pcie_cards_short_of_their_peers_warn_and_unbridged_ones_are_info():
    """Same model: bridged cards with 12 active, one with 8 (a bridge half seated), one with none."""
    from gputopo.model import Topology
    from gputopo.report.topology_checks import topology_findings

    topo = Topology(gpus=_gpus_with_links("NVIDIA A100 80GB PCIe", [12, 12, 8, 0], 12), pairs=[])
    found = {(f.gpus or [-1])[0]: (f.kind, f.severity) for f in topology_findings(topo)
             if f.kind.startswith("nvlink")}
    assert found == {2: ("nvlink-down", "warning"), 3: ("nvlink-not-connected", "info")}


def test_fake_nvml_version_of_an_untrained_port_is_invalid_and_the_probe_says_so():
    lib = FakeNvml(load_description(ONE))
    lib.nvmlInit()
    assert lib.nvmlDeviceGetNvLinkVersion(lib.nvmlDeviceGetHandleByIndex(0), 0) == 0  # VERSION_INVALID
    proc = gputopo_here("scan", "--sim", ONE, "--json", env=ALL_GPUS_VISIBLE, timeout=300)
    link = json.loads(proc.stdout)["gpus"][0]["nvlinks"][0]
    assert link["active"] is False and "invalid (0)" in link["version"]["not_available"]
