"""A single H100/H200 SXM is not broken, and NVML's GPU fabric information (issue 33, item 1).

- The usual one-GPU cloud VM of an HGX board lists its SXM module's 18 NVLinks inactive with no
  far end. The board-wired rule once overrode the only-GPU exemption: ``scan`` said ``ERROR
  nvlink-down ... 18 down`` and ``bench`` "broken". A GPU alone has no NVLink peer to lose: at
  most an info, whatever else NVML says (fabric state included).
- The built-in sims ``h100-sxm-1gpu`` and ``h200-1gpu`` give 0 warnings and 0 errors from scan,
  bench and check.
- ``nvmlDeviceGetGpuFabricInfoV`` (a versioned structure the caller builds, passed by
  reference), falling back to ``nvmlDeviceGetGpuFabricInfo`` where the bindings or the driver
  lack it; typed n/a where neither is there or the GPU is in no fabric. The same probe runs on
  the fake NVML and on the real pynvml wrappers (their library pointer monkeypatched).
- An NVSwitch GPU that NVML reports unregistered (not started, in progress, failed) is a finding.
"""

from __future__ import annotations

import ctypes
import json

import pytest

from gputopo.errors import InputFileError
from gputopo.model import Gpu, Topology
from gputopo.model.fabric import GpuFabric
from gputopo.model.topology import NvLink, topology_from_json, topology_to_json
from gputopo.model.values import Failed, NotAvailable
from gputopo.probe.nvml_codes import (NVML_ERROR_ARGUMENT_VERSION_MISMATCH, NVML_ERROR_FUNCTION_NOT_FOUND,
                                      NVML_ERROR_GPU_IS_LOST, NVML_ERROR_INVALID_ARGUMENT,
                                      NVML_ERROR_NOT_READY, NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_UNKNOWN)
from gputopo.probe.nvml_fabric import read_fabric
from gputopo.probe.nvml_reader import read_topology
from gputopo.report.topology_checks import topology_findings
from gputopo.sim.description import load_description
from gputopo.sim.fake_nvml import FakeNvml, NVMLError
from helpers.cli import gputopo, gputopo_here

ONE_SXM = ("h100-sxm-1gpu", "h200-1gpu")
ENV = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


#: The command sees every GPU of its machine, whatever this shell's CUDA_VISIBLE_DEVICES hides.
ALL_GPUS_VISIBLE = {"CUDA_VISIBLE_DEVICES": None}


def scan_doc(sim):
    proc = gputopo_here("scan", "--sim", sim, "--json", env=ALL_GPUS_VISIBLE, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def alarms(findings):
    return [(f["kind"], f["severity"], f.get("gpus")) for f in findings if f["severity"] in ("error", "warning")]


def renamed(tmp_path, model):
    """The built-in h100-pcie-1gpu with its GPU renamed: the issue's reproduction."""
    path = tmp_path / f"renamed-{model.replace(' ', '-')}.toml"
    path.write_text(f'extends = "h100-pcie-1gpu"\nname = "renamed"\n[defaults]\nname = "{model}"\n')
    return path


def read(desc, **hooks):
    lib = FakeNvml(desc, **hooks)
    lib.nvmlInit()
    try:
        return read_topology(lib, env=ENV)
    finally:
        lib.nvmlShutdown()


def desc_file(tmp_path, text, name="t"):
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return load_description(str(path))


def lone(name, links=18, active=0, remote_type=None, fabric=None):
    na = NotAvailable("NVML_ERROR_NOT_SUPPORTED")
    remote_type = na if remote_type is None else remote_type
    g = Gpu(nvml_index=0, name=name, pci_bus_id="00000000:00:05.0",
            nvlinks=[NvLink(link=k, active=k < active, remote_bus_id=na, remote_type=remote_type)
                     for k in range(links)])
    if fabric is not None:
        g.fabric = fabric
    return Topology(gpus=[g], pairs=[])


# ----------------------------------------------------------------------------- the rule


@pytest.mark.parametrize("name", ["NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA H100 SXM5 80GB",
                                  "NVIDIA B200"])
def test_rule_a_lone_sxm_gpu_with_every_link_inactive_is_info_not_nvlink_down(name):
    found = [(f.kind, f.severity) for f in topology_findings(lone(name))]
    assert found == [("nvlink-not-connected", "info")]


@pytest.mark.parametrize("fabric", [
    GpuFabric(state="not-started"), GpuFabric(state="in-progress"),
    GpuFabric(state="completed", status="NVML_ERROR_NOT_READY (27)", clique_id=0),
])
def test_rule_a_lone_gpu_is_at_most_info_whatever_else_nvml_says(fabric):
    """Links to a switch, some of them down, and a fabric short of registered: still one GPU."""
    topo = lone("NVIDIA H100 80GB HBM3", active=10, remote_type="SWITCH", fabric=fabric)
    found = topology_findings(topo)
    assert {f.severity for f in found} == {"info"}, [(f.kind, f.severity, f.message) for f in found]
    assert {f.kind for f in found} == {"nvlink-not-connected", "nvlink-fabric"}


def test_rule_two_sxm_gpus_with_links_down_still_error():
    """The board-wired rule stands where there is a peer to lose (fabric manager not running)."""
    na = NotAvailable("NVML_ERROR_NOT_SUPPORTED")
    gpus = [Gpu(nvml_index=i, name="NVIDIA H200", pci_bus_id=f"00000000:{0x10 + i:02X}:00.0",
                nvlinks=[NvLink(link=k, active=False, remote_bus_id=na, remote_type=na) for k in range(18)])
            for i in range(2)]
    found = [(f.kind, f.severity) for f in topology_findings(Topology(gpus=gpus, pairs=[]))]
    assert found == [("nvlink-down", "error")] * 2


@pytest.mark.parametrize("model", ["NVIDIA H200", "NVIDIA H100 80GB HBM3"])
def test_renamed_h100_pcie_sim_scans_without_nvlink_down(tmp_path, model):
    """The issue's reproduction: before the fix, ERROR nvlink-down ... 18 down."""
    doc = scan_doc(renamed(tmp_path, model))
    assert [g["name"] for g in doc["gpus"]] == [model]
    assert alarms(doc["problems"]) == []
    assert [f["kind"] for f in doc["problems"]] == ["nvlink-not-connected"]


# ----------------------------------------------------------------------------- the new sims


@pytest.mark.parametrize("sim", ONE_SXM)
def test_one_sxm_sims_scan_clean_and_say_the_fabric_is_na(sim):
    doc = scan_doc(sim)
    assert alarms(doc["problems"]) == []
    (g,) = doc["gpus"]
    assert g["name"] == {"h100-sxm-1gpu": "NVIDIA H100 80GB HBM3", "h200-1gpu": "NVIDIA H200"}[sim]
    assert len(g["nvlinks"]) == 18 and not any(lk["active"] for lk in g["nvlinks"])
    assert "not supported" in g["fabric"]["not_available"]
    table = gputopo_here("scan", "--sim", sim, env=ALL_GPUS_VISIBLE, timeout=300)
    assert table.returncode == 0, table.stderr
    assert "NVLink fabric: n/a (nvmlDeviceGetGpuFabricInfoV not supported" in table.stdout
    assert "ERROR" not in table.stdout and "WARNING" not in table.stdout


@pytest.mark.slow
@pytest.mark.parametrize("sim", ONE_SXM)
def test_one_sxm_sims_bench_and_check_clean(tmp_path, sim):
    """bench --quick: verdict ok, no warning or error; check --init takes it as a baseline
    without --force (it refuses one with errors) and check passes it with nothing failed."""
    proc = gputopo("bench", "--sim", sim, "--quick", "--json", "--out", tmp_path / "run", env=ALL_GPUS_VISIBLE,
                   timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["verdict"] == "ok" and alarms(doc["findings"]) == []
    assert "broken" not in proc.stderr and "nvlink-down" not in proc.stderr
    spec = tmp_path / "spec.toml"
    init = gputopo("check", "--init", "--from", tmp_path / "run", "--spec", spec, env=ALL_GPUS_VISIBLE,
                   timeout=300)
    assert init.returncode == 0, init.stderr
    check = gputopo("check", "--spec", spec, tmp_path / "run", "--json", env=ALL_GPUS_VISIBLE, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr
    verdict = json.loads(check.stdout)
    assert verdict["passed"] and verdict["counts"]["failed"] == 0 and verdict["failures"] == []
    # unrelated spec: fails on
    shipped = gputopo("check", "--spec", "nvswitch-8gpu", tmp_path / "run", env=ALL_GPUS_VISIBLE, timeout=300)
    assert "nvlink-down" not in shipped.stdout  # GPU count, never on a finding about lost NVLinks


# ----------------------------------------------------------------------------- the probe


def test_probe_reads_the_fabric_of_an_nvswitch_box():
    topo = read(load_description("dgx-h100"))
    for g in topo.gpus:
        assert isinstance(g.fabric, GpuFabric)
        assert (g.fabric.state, g.fabric.status, g.fabric.clique_id) == ("completed", "success", 0)
        assert g.fabric.ready and isinstance(g.fabric.cluster_uuid, NotAvailable)


def test_probe_falls_back_to_the_unversioned_call_in_old_bindings(tmp_path):
    desc = desc_file(tmp_path, 'nvswitch = true\n[defaults]\nname = "NVIDIA H100 80GB HBM3"\nnvlinks = 18\n'
                     'fabric_clique_id = 7\nfabric_cluster_uuid = "9c6f5af3-53bf-49b5-a436-b66766c413c3"\n'
                     '[[gpu]]\n[[gpu]]\n')
    old = read(desc, missing=["nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfoV_t"])
    new = read(desc)
    for topo in (old, new):
        f = topo.gpu(1).fabric
        assert (f.state, f.status, f.clique_id) == ("completed", "success", 7)
        assert f.cluster_uuid == "9c6f5af3-53bf-49b5-a436-b66766c413c3"


def test_probe_falls_back_when_the_driver_lacks_the_versioned_call():
    desc = load_description("dgx-h100")
    lib = FakeNvml(desc, errors={("nvmlDeviceGetGpuFabricInfoV", None): NVML_ERROR_FUNCTION_NOT_FOUND})
    lib.nvmlInit()
    f = read_fabric(lib, lib.nvmlDeviceGetHandleByIndex(0))
    assert isinstance(f, GpuFabric) and f.ready
    assert lib.calls["nvmlDeviceGetGpuFabricInfo"] == 1


@pytest.mark.parametrize("hooks, why", [
    (dict(missing=["nvmlDeviceGetGpuFabricInfoV", "nvmlDeviceGetGpuFabricInfo"]), "nvidia-ml-py too old"),
    (dict(missing=["c_nvmlGpuFabricInfoV_t", "c_nvmlGpuFabricInfo_t"]), "nvidia-ml-py too old"),
    (dict(errors={("nvmlDeviceGetGpuFabricInfoV", None): NVML_ERROR_FUNCTION_NOT_FOUND,
                  ("nvmlDeviceGetGpuFabricInfo", None): NVML_ERROR_FUNCTION_NOT_FOUND}), "driver too old"),
    (dict(unsupported=["nvmlDeviceGetGpuFabricInfoV"]), "not supported"),
])
def test_probe_says_na_with_the_reason(hooks, why):
    topo = read(load_description("dgx-h100"), **hooks)
    for g in topo.gpus:
        assert isinstance(g.fabric, NotAvailable) and why in g.fabric.reason, g.fabric
        assert g.lost is None and len(g.active_nvlinks()) == 18  # the rest is read as before


def test_probe_state_not_supported_is_na_and_other_errors_are_failed_or_lost(tmp_path):
    desc = desc_file(tmp_path, 'nvswitch = true\n[defaults]\nname = "NVIDIA H100 80GB HBM3"\nnvlinks = 18\n'
                     'fabric_state = "not-supported"\n[[gpu]]\n[[gpu]]\n[[gpu]]\n')
    topo = read(desc, errors={("nvmlDeviceGetGpuFabricInfoV", 1): NVML_ERROR_UNKNOWN,
                              ("nvmlDeviceGetGpuFabricInfoV", 2): NVML_ERROR_GPU_IS_LOST})
    assert isinstance(topo.gpu(0).fabric, NotAvailable) and "in no NVLink fabric" in topo.gpu(0).fabric.reason
    assert isinstance(topo.gpu(1).fabric, Failed) and "UNKNOWN" in topo.gpu(1).fabric.error
    assert topo.gpu(2).lost is not None and isinstance(topo.gpu(2).fabric, NotAvailable)


def test_fake_nvml_answers_as_nvml_for_the_structure_it_is_given():
    lib = FakeNvml(load_description("dgx-h100"))
    lib.nvmlInit()
    h = lib.nvmlDeviceGetHandleByIndex(0)
    info = lib.c_nvmlGpuFabricInfoV_t()
    assert info.version == lib.nvmlGpuFabricInfo_v2 == 0x02000024 and ctypes.sizeof(info) == 0x24
    assert lib.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(info)) == 0
    assert info.state == lib.NVML_GPU_FABRIC_STATE_COMPLETED and info.status == 0
    info.version = 0x01000024
    with pytest.raises(NVMLError) as ei:
        lib.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(info))
    assert ei.value.value == NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    with pytest.raises(NVMLError) as ei:  # a structure passed by value, not by reference
        lib.nvmlDeviceGetGpuFabricInfo(h, lib.c_nvmlGpuFabricInfo_t())
    assert ei.value.value == NVML_ERROR_INVALID_ARGUMENT
    one = FakeNvml(load_description("h100-sxm-1gpu"))
    one.nvmlInit()
    with pytest.raises(NVMLError) as ei:
        one.nvmlDeviceGetGpuFabricInfoV(one.nvmlDeviceGetHandleByIndex(0), ctypes.byref(one.c_nvmlGpuFabricInfoV_t()))
    assert ei.value.value == NVML_ERROR_NOT_SUPPORTED


class _RealPynvml:
    """The real pynvml wrappers with its library pointer lookup monkeypatched: each function
    named in ``fns`` fills the structure it is given by reference, as the driver's C function does."""

    def __init__(self, monkeypatch, fns, state=3, status=0, clique=4):
        import pynvml

        self.pynvml = pynvml
        self.seen = []

        def lookup(name):
            if name not in fns:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

            def c_function(device, ptr):
                info = ptr._obj  # what ctypes.byref(info) carries
                self.seen.append((name, type(info).__name__, getattr(info, "version", None)))
                info.state, info.status, info.cliqueId = state, status, clique
                info.clusterUuid[0] = 0xAB
                return pynvml.NVML_SUCCESS
            return c_function

        monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer", lookup)


def test_probe_with_the_real_pynvml_wrappers_and_structures(monkeypatch):
    real = _RealPynvml(monkeypatch, {"nvmlDeviceGetGpuFabricInfoV"})
    f = read_fabric(real.pynvml, object())
    assert real.seen == [("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfo_v2_t", real.pynvml.nvmlGpuFabricInfo_v2)]
    assert (f.state, f.status, f.clique_id) == ("completed", "success", 4)
    assert f.cluster_uuid.startswith("ab000000-")


def test_probe_with_the_real_pynvml_on_a_driver_without_the_versioned_call(monkeypatch):
    real = _RealPynvml(monkeypatch, {"nvmlDeviceGetGpuFabricInfo"}, status=NVML_ERROR_NOT_READY)
    f = read_fabric(real.pynvml, object())
    assert [s[0] for s in real.seen] == ["nvmlDeviceGetGpuFabricInfo"]
    assert f.failed and f.status == "NVML_ERROR_NOT_READY (27)"


def test_probe_with_real_pynvml_older_than_the_versioned_call(monkeypatch):
    real = _RealPynvml(monkeypatch, {"nvmlDeviceGetGpuFabricInfo", "nvmlDeviceGetGpuFabricInfoV"}, state=1)
    monkeypatch.delattr(real.pynvml, "nvmlDeviceGetGpuFabricInfoV")
    monkeypatch.delattr(real.pynvml, "c_nvmlGpuFabricInfoV_t")
    f = read_fabric(real.pynvml, object())
    assert [s[0] for s in real.seen] == ["nvmlDeviceGetGpuFabricInfo"]
    assert f.state == "not-started" and isinstance(f.status, NotAvailable)
    monkeypatch.delattr(real.pynvml, "nvmlDeviceGetGpuFabricInfo")
    f = read_fabric(real.pynvml, object())
    assert isinstance(f, NotAvailable) and "nvidia-ml-py too old" in f.reason


def test_fabric_survives_the_json_round_trip_and_old_documents_read_as_na():
    topo = read(load_description("dgx-h100"))
    doc = topology_to_json(topo)
    assert doc["gpus"][0]["fabric"]["state"] == "completed"
    back = topology_from_json(json.loads(json.dumps(doc)))
    assert back.gpus[0].fabric == topo.gpus[0].fabric
    for g in doc["gpus"]:
        del g["fabric"]
    old = topology_from_json(doc)
    assert isinstance(old.gpus[0].fabric, NotAvailable) and "not in this document" in old.gpus[0].fabric.reason


# ----------------------------------------------------------------------------- findings and the scan


def _fabric_findings(tmp_path, text, name="t"):
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    doc = scan_doc(path)
    return [f for f in doc["problems"] if f["kind"] == "nvlink-fabric"], doc


@pytest.mark.parametrize("extra, severity, words", [
    ('fabric_state = "not-started"', "error", "has not started"),
    ('fabric_state = "in-progress"', "warning", "still in progress"),
    ('fabric_state = "completed"\nfabric_status = "NOT_READY"', "error", "failed (NVML_ERROR_NOT_READY (27))"),
])
def test_nvswitch_gpus_not_registered_with_the_fabric_are_a_finding(tmp_path, extra, severity, words):
    found, doc = _fabric_findings(tmp_path, f'extends = "dgx-h100"\nname = "fm"\n[defaults]\n{extra}\n')
    assert [(f["severity"], f["gpus"]) for f in found] == [(severity, list(range(8)))]
    assert words in found[0]["message"] and "fabricmanager" in found[0]["remedies"][0]


def test_dgx_h100_fabric_completed_shows_in_the_scan_and_fails_nothing():
    doc = scan_doc("dgx-h100")
    assert doc["problems"] == []
    assert {json.dumps(g["fabric"], sort_keys=True) for g in doc["gpus"]} == {json.dumps(
        {"clique_id": 0, "cluster_uuid": {"not_available": "GPU fabric: NVML gives no cluster UUID (all zero)"},
         "state": "completed", "status": "success", "health_mask": 0}, sort_keys=True)}
    table = gputopo_here("scan", "--sim", "dgx-h100", env=ALL_GPUS_VISIBLE, timeout=300)
    assert "NVLink fabric: completed, success, clique 0" in table.stdout


def test_a_fabric_state_without_an_nvswitch_is_only_said(tmp_path):
    """Two A100 PCIe cards (no switch, not board-wired) reporting a fabric state: nothing judged."""
    found, doc = _fabric_findings(tmp_path, '[pairs]\n"0,1" = "NV12"\n[defaults]\nname = "NVIDIA A100 80GB PCIe"\n'
                                  'fabric_state = "not-started"\n[[gpu]]\n[[gpu]]\n')
    assert [f["severity"] for f in found] == ["info"] and alarms(doc["problems"]) == []


@pytest.mark.parametrize("text, key, words", [
    ('fabric_state = "registered"', "fabric_state", "expected \"unsupported\" or one of"),
    ('fabric_state = "completed"\nfabric_status = "MELTED"', "fabric_status", "NVML error name"),
    ('fabric_clique_id = 3', "fabric_clique_id", "needs a fabric_state other than"),
    ('fabric_state = "completed"\nfabric_cluster_uuid = "nope"', "fabric_cluster_uuid", "expected a UUID"),
])
def test_bad_fabric_keys_are_named(tmp_path, text, key, words):
    with pytest.raises(InputFileError) as ei:
        desc_file(tmp_path, f'[defaults]\nname = "NVIDIA H100 80GB HBM3"\n{text}\n[[gpu]]\n')
    assert key in str(ei.value) and words in str(ei.value)


# ----------------------------------------------------------------------------- a GPU alone, its fabric health (issue 43, item 4)

FABRIC_VM = "h100-sxm-shared-vm"


def test_the_shared_nvswitch_vm_sim_scans_clean_and_says_its_mask():
    """Registration completed and health mask 0x501 (bandwidth degraded, insufficient NVLinks) on
    the only GPU: before, a WARNING and an ERROR; now one info line with what NVML reported."""
    doc = scan_doc(FABRIC_VM)
    assert alarms(doc["problems"]) == []
    (g,) = doc["gpus"]
    assert g["fabric"]["state"] == "completed" and g["fabric"]["health_mask"] == 0x501
    (fab,) = [f for f in doc["problems"] if f["kind"] == "nvlink-fabric"]
    assert fab["severity"] == "info" and "0x501" in fab["message"] and "insufficient-nvlinks" in fab["message"]


@pytest.mark.slow
def test_the_shared_nvswitch_vm_sim_benches_ok(tmp_path):
    proc = gputopo("bench", "--sim", FABRIC_VM, "--quick", "--json", "--out", tmp_path / "run", env=ALL_GPUS_VISIBLE,
                   timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["verdict"] == "ok" and alarms(doc["findings"]) == []
    assert "broken" not in proc.stderr
