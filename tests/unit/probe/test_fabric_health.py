"""NVML's fabric health mask (nvmlGpuFabricInfo_v2/v3 ``healthMask``): the fake NVML's structures
against pynvml's real ones, the probe reading the mask, and report/ saying a degraded bandwidth or
an unhealthy route as a finding and an all-NOT_SUPPORTED mask as not known."""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from gputopo.model.fabric import GpuFabric, health_fields
from gputopo.model.topology import topology_from_json, topology_to_json
from gputopo.model.values import NotAvailable
from gputopo.probe.nvml_fabric import read_fabric
from gputopo.report.scan_view import fabric_line
from gputopo.report.topology_checks import topology_findings
from gputopo.sim import fabric as sim_fabric
from gputopo.sim.description import load_description
from gputopo.sim.fake_nvml import FakeNvml
from helpers.fake_scan import nvml_topology

P = pynvml


def _mask(**fields):
    shifts = {"degraded_bw": P.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW,
              "route_recovery": P.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_RECOVERY,
              "route_unhealthy": P.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY,
              "access_timeout_recovery": P.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ACCESS_TIMEOUT_RECOVERY,
              "incorrect_configuration": P.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_INCORRECT_CONFIGURATION}
    return sum(v << shifts[k] for k, v in fields.items())


#: Every health field reported and healthy (pynvml's _FALSE values; configuration _NONE).
HEALTHY = _mask(degraded_bw=P.NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_FALSE,
                route_recovery=P.NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_RECOVERY_FALSE,
                route_unhealthy=P.NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_FALSE,
                access_timeout_recovery=P.NVML_GPU_FABRIC_HEALTH_MASK_ACCESS_TIMEOUT_RECOVERY_FALSE,
                incorrect_configuration=P.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NONE)


def _with(mask_field, true_value, mask=HEALTHY):
    shift = getattr(P, f"NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_{mask_field}")
    width = getattr(P, f"NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_{mask_field}")
    return (mask & ~(width << shift)) | (true_value << shift)


def test_the_fake_structures_are_pynvmls():
    for name in ("c_nvmlGpuFabricInfo_t", "c_nvmlGpuFabricInfo_v2_t", "c_nvmlGpuFabricInfo_v3_t"):
        fake, real = getattr(sim_fabric, name), getattr(P, name)
        assert [(f[0], ctypes.sizeof(f[1])) for f in fake._fields_] == \
               [(f[0], ctypes.sizeof(f[1])) for f in real._fields_], name
        assert ctypes.sizeof(fake) == ctypes.sizeof(real)
    assert sim_fabric.c_nvmlGpuFabricInfoV_t().version == P.c_nvmlGpuFabricInfoV_t().version
    for k, v in vars(sim_fabric).items():
        if k.startswith("NVML_GPU_FABRIC_"):
            assert getattr(P, k) == v, k


def test_the_decoding_follows_pynvmls_shifts_and_widths():
    for field in ("DEGRADED_BW", "ROUTE_RECOVERY", "ROUTE_UNHEALTHY", "ACCESS_TIMEOUT_RECOVERY"):
        h = health_fields(_with(field, getattr(P, f"NVML_GPU_FABRIC_HEALTH_MASK_{field}_TRUE")))
        assert [k for k, v in h.items() if v == "true"] == [field.lower()]
    h = health_fields(_with("INCORRECT_CONFIGURATION",
                            P.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_INSUFFICIENT_NVLINKS))
    assert h["incorrect_configuration"] == "insufficient-nvlinks"
    assert set(health_fields(0).values()) == {"not-supported"}


def _scan(tmp_path, mask):
    return nvml_topology(tmp_path, f'extends = "dgx-h100"\nname = "fh"\n[defaults]\nfabric_health_mask = {mask}\n', "fh")


def _fabric_findings(topo):
    return [(f.severity, f.gpus, f.message) for f in topology_findings(topo) if f.kind == "nvlink-fabric"]


def test_a_degraded_bandwidth_is_a_warning_with_nvidias_meaning(tmp_path):
    topo = _scan(tmp_path, _with("DEGRADED_BW", P.NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE))
    assert topo.gpu(3).fabric.health_mask & 0x3 == 1
    found = _fabric_findings(topo)
    assert [(s, g) for s, g, _ in found] == [("warning", list(range(8)))]
    assert "Bandwidth degraded" in found[0][2]
    assert "health: bandwidth degraded" in fabric_line(topo)


@pytest.mark.parametrize("field, severity, words", [
    ("ROUTE_UNHEALTHY", "error", "Route is unhealthy"),
    ("ROUTE_RECOVERY", "warning", "Route Recovery in progress"),
    ("ACCESS_TIMEOUT_RECOVERY", "warning", "Access Timeout Recovery in progress"),
])
def test_route_conditions_are_findings(tmp_path, field, severity, words):
    topo = _scan(tmp_path, _with(field, getattr(P, f"NVML_GPU_FABRIC_HEALTH_MASK_{field}_TRUE")))
    found = _fabric_findings(topo)
    assert [(s, g) for s, g, _ in found] == [(severity, list(range(8)))] and words in found[0][2]


def test_an_incorrect_configuration_is_an_error(tmp_path):
    topo = _scan(tmp_path, _with("INCORRECT_CONFIGURATION",
                                 P.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NO_PARTITION))
    assert [(s, "no-partition" in m) for s, _g, m in _fabric_findings(topo)] == [("error", True)]


def test_a_healthy_mask_is_ok_and_an_unsupported_one_not_known(tmp_path):
    topo = _scan(tmp_path, HEALTHY)
    assert _fabric_findings(topo) == [] and "health ok" in fabric_line(topo)
    topo = _scan(tmp_path, 0)  # every field NOT_SUPPORTED: no health, never "ok"
    assert _fabric_findings(topo) == []
    assert "health not known (NVML reports its health fields as not supported)" in fabric_line(topo)
    assert "health ok" not in fabric_line(topo)


def test_the_unversioned_structure_has_no_mask_and_says_so():
    lib = FakeNvml(load_description("dgx-h100"), missing=["nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfoV_t"])
    lib.nvmlInit()
    f = read_fabric(lib, lib.nvmlDeviceGetHandleByIndex(0))
    assert isinstance(f, GpuFabric) and isinstance(f.health_mask, NotAvailable)
    assert "no health mask" in f.health_mask.reason and "health not known" in f.text()


def test_the_real_pynvml_structure_is_read(monkeypatch):
    def lookup(name):
        def c_function(device, ptr):
            info = ptr._obj
            info.state, info.status, info.healthMask = 3, 0, P.NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_TRUE << 4
            return P.NVML_SUCCESS
        return c_function
    monkeypatch.setattr(P, "_nvmlGetFunctionPointer", lookup)
    f = read_fabric(P, object())
    assert f.health_mask == 0x10 and f.health["route_unhealthy"] == "true"


def test_the_mask_survives_the_json_round_trip(tmp_path):
    topo = _scan(tmp_path, HEALTHY)
    back = topology_from_json(topology_to_json(topo))
    assert back.gpu(0).fabric.health_mask == HEALTHY


# ----------------------------------------------------------------------------- a GPU alone (issue 43, item 4)

#: What a GPU passed alone into a VM from a shared NVSwitch system can report: registration
#: completed, bandwidth degraded (bits 0-1 = 1) and configuration insufficient-nvlinks (bits 8-11 = 5).
SHARED_VM_MASK = 0x501


def test_a_gpu_alone_is_never_broken_by_its_fabric_health_mask(tmp_path):
    """Before: WARNING (bandwidth degraded) and ERROR (insufficient NVLinks), bench "broken"."""
    topo = nvml_topology(tmp_path, 'extends = "h100-sxm-1gpu"\nname = "vm"\n[defaults]\nfabric_state = "completed"\n'
                      f'fabric_health_mask = {SHARED_VM_MASK}\n')
    assert topo.gpu(0).fabric.health_mask == SHARED_VM_MASK
    found = [f for f in topology_findings(topo) if f.kind == "nvlink-fabric"]
    assert [(f.severity, f.gpus) for f in found] == [("info", [0])]
    msg = found[0].message
    assert "bandwidth degraded" in msg and "insufficient-nvlinks" in msg and "0x501" in msg
    assert "no peer traffic uses NVLink" in msg
    assert found[0].evidence["health_masks"] == {"0": SHARED_VM_MASK} and found[0].evidence["gpus"] == [0]
    assert {f.severity for f in topology_findings(topo)} == {"info"}


def test_a_gpu_alone_with_a_healthy_mask_says_nothing_more(tmp_path):
    topo = nvml_topology(tmp_path, 'extends = "h100-sxm-1gpu"\nname = "vm"\n[defaults]\nfabric_state = "completed"\n'
                      f'fabric_health_mask = {HEALTHY}\n')
    assert [f for f in topology_findings(topo) if f.kind == "nvlink-fabric"] == []


@pytest.mark.parametrize("state", ["not-started", "in-progress"])
def test_the_mask_is_read_only_for_a_completed_registration(tmp_path, state):
    """Eight NVSwitch GPUs whose registration has not completed: the registration finding, and
    nothing from a mask NVML has not filled in for them."""
    topo = nvml_topology(tmp_path, f'extends = "dgx-h100"\nname = "fh"\n[defaults]\nfabric_state = "{state}"\n'
                      f'fabric_health_mask = {SHARED_VM_MASK}\n')
    found = _fabric_findings(topo)
    assert len(found) == 1 and "registration" in found[0][2], found
    assert "Bandwidth degraded" not in found[0][2] and "INCORRECT_CONFIGURATION" not in found[0][2]
