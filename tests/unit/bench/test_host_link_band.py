"""The band test_bench_gpu.py (`make gpu-check`) holds host copies to follows the link they cross:
NVLink-C2C on a Grace machine (GH200/GB200, hundreds of GB/s), the PCIe link elsewhere. Chosen
here without a GPU: pynvml's own functions are replaced with fakes of their real signatures that
return pynvml's real structures."""

from __future__ import annotations

import pynvml
import pytest

from helpers.host_link import C2C_GBPS_PER_DIRECTION, HIGH, LOW, host_link

PCIE_GEN5 = 63.0


def field(ret: int, ui: int = 0) -> pynvml.c_nvmlFieldValue_t:
    v = pynvml.c_nvmlFieldValue_t()
    v.nvmlReturn, v.value.uiVal = ret, ui
    return v


@pytest.fixture
def grace(monkeypatch):
    """A GH200: C2C enabled, 10 active links of 45,000 MB/s (NVML's per-link figure)."""
    def get_c2c(handle):
        info = pynvml.c_nvmlC2cModeInfo_v1_t()
        info.isC2cEnabled = 1
        return info

    def get_fields(handle, fieldIds):
        out = []
        for f in fieldIds:
            fid = f[0] if isinstance(f, tuple) else f
            value = {pynvml.NVML_FI_DEV_C2C_LINK_COUNT: 10, pynvml.NVML_FI_DEV_C2C_LINK_GET_STATUS: 1,
                     pynvml.NVML_FI_DEV_C2C_LINK_GET_MAX_BW: 45000}[fid]
            out.append(field(pynvml.NVML_SUCCESS, value))
        return out

    monkeypatch.setattr(pynvml, "nvmlDeviceGetC2cModeInfoV", get_c2c)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetFieldValues", get_fields)


def not_supported(handle):
    raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)


def test_a_grace_gpu_is_banded_by_its_c2c_links(grace):
    link = host_link(pynvml, object(), "NVIDIA GH200 480GB", PCIE_GEN5, "PCIe Gen5 x16")
    assert link.kind == "c2c" and link.gbps == pytest.approx(450.0) and "NVML" in link.basis
    lo, hi = link.band()
    assert lo <= 193.0 <= hi and lo <= 420.0 <= hi  # GB200's published d2h, a GH200's h2d
    assert not 420.0 <= HIGH * PCIE_GEN5  # the PCIe band would have called it broken


def test_a_pcie_gpu_keeps_the_pcie_band(monkeypatch):
    monkeypatch.setattr(pynvml, "nvmlDeviceGetC2cModeInfoV", not_supported)
    link = host_link(pynvml, object(), "NVIDIA H100 80GB HBM3", PCIE_GEN5, "PCIe Gen5 x16")
    assert (link.kind, link.gbps, link.basis) == ("pcie", PCIE_GEN5, "PCIe Gen5 x16")
    assert link.band() == (LOW * PCIE_GEN5, HIGH * PCIE_GEN5)
    # NOT_SUPPORTED is NVML's "no C2C": even a name that looks like a superchip stays PCIe
    assert host_link(pynvml, object(), "NVIDIA GH200", PCIE_GEN5, "x").kind == "pcie"


def test_without_nvmls_answer_the_name_decides(monkeypatch):
    def missing(handle):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)  # an older driver

    monkeypatch.setattr(pynvml, "nvmlDeviceGetC2cModeInfoV", missing)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetFieldValues", lambda handle, fieldIds: [
        field(pynvml.NVML_ERROR_NOT_SUPPORTED) for _ in fieldIds])
    gb200 = host_link(pynvml, object(), "NVIDIA GB200 NVIDIA GB200", PCIE_GEN5, "x")
    assert gb200.kind == "c2c" and gb200.gbps == C2C_GBPS_PER_DIRECTION and "datasheet" in gb200.basis
    assert host_link(pynvml, object(), "NVIDIA A100-SXM4-80GB", 31.5, "y").kind == "pcie"


def test_unknown_pcie_rate_gives_no_band(monkeypatch):
    monkeypatch.setattr(pynvml, "nvmlDeviceGetC2cModeInfoV", not_supported)
    assert host_link(pynvml, object(), "NVIDIA L4", None, "unknown").band() is None
