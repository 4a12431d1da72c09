"""What a simulated GPU model looks like on the PCI bus and how fast it copies on-device.

Looked up by a substring of the NVML name (``"NVIDIA A100-SXM4-80GB"``); a description whose
GPU name matches none must say ``model = "generic"`` (or a model's name) to get the generic entry. ``d2d_gbps`` is the on-device copy rate
(bytes copied per second, ~85 % of half the memory bandwidth: a copy reads and writes each byte).
"""

from __future__ import annotations

from typing import NamedTuple, Optional


class GpuModel(NamedTuple):
    pci_device_id: int
    lspci_name: str  # lspci's device name, after "NVIDIA Corporation "
    pci_class: int  # 0x0300 VGA compatible controller, 0x0302 3D controller
    memory_gbps: float
    mig_capable: bool
    nvlink_version: Optional[int]  # the NVLink generation the model has, None without NVLink
    #: NVLink ports NVML lists for the model (NVML_FI_DEV_NVLINK_LINK_COUNT), bridged or not
    nvlink_ports: int = 0

    @property
    def d2d_gbps(self) -> float:
        return round(self.memory_gbps * 0.85 / 2, 1)

    @property
    def lspci_class(self) -> str:
        return "VGA compatible controller" if self.pci_class == 0x0300 else "3D controller"


# Most specific first: the first key found in the name wins. NVLink ports: the chip's links as
# NVML lists them on every board, bridged or not (an A100 PCIe lists 12, all inactive without a
# bridge; an H100 PCIe/NVL lists GH100's 18, of which its bridges use 12: DCGM issue #198 shows
# 18 links on an H100 NVL, Azure's NCv5 notes 6 of 18 inactive by design).
_MODELS = (
    ("A100-SXM4-80GB", GpuModel(0x20B2, "GA100 [A100 SXM4 80GB]", 0x0302, 2039, True, 3, 12)),
    ("A100-SXM4-40GB", GpuModel(0x20B0, "GA100 [A100 SXM4 40GB]", 0x0302, 1555, True, 3, 12)),
    ("A100 80GB PCIE", GpuModel(0x20B5, "GA100 [A100 PCIe 80GB]", 0x0302, 1935, True, 3, 12)),
    ("A100-PCIE-40GB", GpuModel(0x20F1, "GA100 [A100 PCIe 40GB]", 0x0302, 1555, True, 3, 12)),
    ("H100 80GB HBM3", GpuModel(0x2330, "GH100 [H100 SXM5 80GB]", 0x0302, 3350, True, 4, 18)),
    ("H100 PCIE", GpuModel(0x2331, "GH100 [H100 PCIe]", 0x0302, 2000, True, 4, 18)),
    ("H200", GpuModel(0x2335, "GH100 [H200 SXM 141GB]", 0x0302, 4800, True, 4, 18)),
    ("B200", GpuModel(0x2901, "GB100 [B200]", 0x0302, 8000, True, 5, 18)),
    ("RTX A6000", GpuModel(0x2230, "GA102GL [RTX A6000]", 0x0300, 768, False, 3, 4)),
    ("A40", GpuModel(0x2235, "GA102GL [A40]", 0x0302, 696, False, 3, 4)),
    ("RTX 3090", GpuModel(0x2204, "GA102 [GeForce RTX 3090]", 0x0300, 936, False, 3, 4)),
    ("L40S", GpuModel(0x26B9, "AD102GL [L40S]", 0x0302, 864, False, None)),
    ("V100-SXM2", GpuModel(0x1DB5, "GV100GL [Tesla V100 SXM2 32GB]", 0x0302, 900, False, 2, 6)),
    ("V100-PCIE", GpuModel(0x1DB6, "GV100GL [Tesla V100 PCIe 32GB]", 0x0302, 900, False, None)),
    ("P100", GpuModel(0x15F8, "GP100GL [Tesla P100 PCIe 16GB]", 0x0302, 732, False, None)),
)

GENERIC = GpuModel(0x2000, "Device 2000", 0x0302, 900, False, None)


#: The model names a GPU name is matched against (a name containing one is that model).
MODEL_KEYS = tuple(key for key, _ in _MODELS)


def find_model(name: str) -> Optional[GpuModel]:
    """The model entry for an NVML GPU name, or None when no model matches it."""
    upper = name.upper()
    for key, model in _MODELS:
        if key.upper() in upper:
            return model
    return None


def gpu_model(name: str) -> GpuModel:
    """The model entry for an NVML GPU name (or a model name, or "generic"); the generic one
    when no model matches (a description refuses such a name unless it says model = "generic")."""
    return find_model(name) or GENERIC
