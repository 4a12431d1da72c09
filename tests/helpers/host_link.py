"""Which link a GPU's host copies cross, and the band their GB/s must fall in, from what NVML and
torch report: NVLink-C2C to a Grace CPU (GH200, GB200: hundreds of GB/s) or the GPU's PCIe link.

tests/unit/bench/test_bench_gpu.py (run by `make gpu-check`) bands host <-> device copies by this:
a band of the PCIe rate would call a healthy Grace machine broken (GB200 host copies reach
193-201 GB/s, reference_rates.csv gb200-host-h2d / -d2h, about 3x a PCIe Gen5 x16 link).

NVML's calls are those of nvidia-ml-py (pynvml): ``nvmlDeviceGetC2cModeInfoV(handle)`` (its
``isC2cEnabled``; NOT_SUPPORTED on a GPU without C2C) and ``nvmlDeviceGetFieldValues(handle,
[(field, scope), ...])`` with NVML_FI_DEV_C2C_LINK_COUNT, NVML_FI_DEV_C2C_LINK_GET_STATUS and
NVML_FI_DEV_C2C_LINK_GET_MAX_BW ("C2C Link Speed in MBps for active links", nvml.h; summed over
the active links as NCCL's topology code does). Where NVML cannot say (an older driver or
binding), the GPU's name decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

#: Plausible share of the link's rate for a healthy GPU: above LOW (a healthy link reaches
#: 60-90 %; idle PCIe may train down a generation, docs/scan.md) and at most HIGH (no link beats
#: its rate).
LOW, HIGH = 0.15, 1.10
#: NVLink-C2C per direction where NVML gives no link rate: 900 GB/s in total, both directions
#: (NVIDIA GH200 Grace Hopper Superchip and GB200 NVL72 datasheets), 450 each way.
C2C_GBPS_PER_DIRECTION = 450.0
#: GPUs that reach their CPU over NVLink-C2C, by the name NVML / torch print.
C2C_NAMES = ("GH200", "GB200", "GB300")


@dataclass(frozen=True)
class HostLink:
    """The link host copies cross: ``kind`` "c2c" or "pcie", its GB/s per direction (None when
    unknown: nothing to band against) and where that figure came from."""

    kind: str
    gbps: Optional[float]
    basis: str

    def band(self) -> Optional[tuple]:
        """(lowest, highest) plausible GB/s of a healthy host copy, or None."""
        return (LOW * self.gbps, HIGH * self.gbps) if self.gbps else None


def c2c_enabled(nvml: Any, handle: Any) -> Optional[bool]:
    """NVML's answer: True or False, or None where the call is missing or fails otherwise."""
    call = getattr(nvml, "nvmlDeviceGetC2cModeInfoV", None)
    if call is None:
        return None
    try:
        info = call(handle)
    except nvml.NVMLError as exc:
        return False if exc.value == nvml.NVML_ERROR_NOT_SUPPORTED else None
    return bool(info.isC2cEnabled)


def c2c_gbps(nvml: Any, handle: Any) -> Optional[float]:
    """GB/s of the active C2C links together (MB/s per link from NVML, / 1000), or None."""
    try:
        (count,) = nvml.nvmlDeviceGetFieldValues(handle, [nvml.NVML_FI_DEV_C2C_LINK_COUNT])
        if count.nvmlReturn != nvml.NVML_SUCCESS or int(count.value.uiVal) <= 0:
            return None
        n = int(count.value.uiVal)
        fields = []
        for link in range(n):
            fields += [(nvml.NVML_FI_DEV_C2C_LINK_GET_STATUS, link), (nvml.NVML_FI_DEV_C2C_LINK_GET_MAX_BW, link)]
        values = nvml.nvmlDeviceGetFieldValues(handle, fields)
    except (nvml.NVMLError, AttributeError):
        return None
    total = 0
    for k in range(n):
        status, bw = values[2 * k], values[2 * k + 1]
        if (status.nvmlReturn == nvml.NVML_SUCCESS and int(status.value.uiVal) == 1
                and bw.nvmlReturn == nvml.NVML_SUCCESS):
            total += int(bw.value.uiVal)
    return total / 1000 if total > 0 else None


def host_link(nvml: Any, handle: Any, names: str, pcie_gbps: Optional[float], pcie_basis: str) -> HostLink:
    """The link GPU ``handle``'s host copies cross. ``names``: what NVML and torch call the GPU
    (asked only where NVML cannot say whether it has C2C); ``pcie_gbps``: its PCIe link's rate."""
    enabled = c2c_enabled(nvml, handle)
    if enabled is None:
        enabled = any(k in names.upper() for k in C2C_NAMES)
    if not enabled:
        return HostLink("pcie", pcie_gbps, pcie_basis)
    gbps = c2c_gbps(nvml, handle)
    if gbps:
        return HostLink("c2c", gbps, f"NVLink-C2C to the CPU: {gbps:g} GB/s over its active links (NVML)")
    return HostLink("c2c", C2C_GBPS_PER_DIRECTION,
                    f"NVLink-C2C to the CPU: {C2C_GBPS_PER_DIRECTION:g} GB/s per direction (NVIDIA datasheets)")
