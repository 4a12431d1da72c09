"""Synthetic machines of any size, for scan-speed benchmarks (8, 64, 256 GPUs...).

The layout repeats the seed machine's pattern: GPUs in NVLink pairs (2k, 2k+1) joined by NV4 and
sharing a PCIe switch (PIX under the NVLink), each pair on its own host bridge, four (up to 8
GPUs) or eight GPUs per socket: NODE inside a socket, SYS across. Each socket gets its own PCI
domain so bus numbers never run out. Built straight from a dict (no TOML, no matrix text), so a
256-GPU machine takes well under a second.
"""

from __future__ import annotations

from typing import Any, Dict, List

from .description_build import Description, build_description


def generate_description(n_gpus: int, *, gpu_name: str = "NVIDIA RTX A6000", gpus_per_socket: int = 0,
                         iommu: str = "off") -> Description:
    """A synthetic ``n_gpus``-GPU machine (see the module docstring). ``gpus_per_socket`` 0 picks
    4 for up to 8 GPUs, else 8. Raises ValueError for fewer than 1 GPU."""
    if not isinstance(n_gpus, int) or n_gpus < 1:
        raise ValueError(f"n_gpus must be a positive integer, got {n_gpus!r}")
    per_socket = gpus_per_socket or (4 if n_gpus <= 8 else 8)
    if per_socket < 1 or per_socket > 8:
        raise ValueError("gpus_per_socket must be 1..8")
    gpus: List[Dict[str, Any]] = []
    for k in range(n_gpus):
        socket, slot = divmod(k, per_socket)
        bus = 0x20 + 0x30 * (slot // 2) + 3 + (slot % 2)
        gpus.append({
            "bus_id": f"{socket:04x}:{bus:02x}:00.0",
            "numa_node": socket,
            "cpu_affinity": f"{socket * 16}-{socket * 16 + 15}",
        })
    nv_pairs = [f"{k},{k + 1}" for k in range(0, n_gpus - 1, 2)
                if k // per_socket == (k + 1) // per_socket]
    data: Dict[str, Any] = {
        "name": f"synthetic-{n_gpus}gpu",
        "summary": f"synthetic {n_gpus} GPUs: NV4 pairs, NODE inside {per_socket}-GPU sockets, SYS across",
        "defaults": {"name": gpu_name, "pcie_gen": 4, "pcie_width": 16, "nvlink_version": 3},
        "gpu": gpus,
        "pairs": {"default": "numa", "NV4": nv_pairs} if nv_pairs else {"default": "numa"},
        "host": {"hostname": f"synthetic-{n_gpus}gpu", "iommu": iommu},
    }
    if nv_pairs:
        data["pcie_pairs"] = {"PIX": nv_pairs}
    return build_description(data, f"generated:synthetic-{n_gpus}gpu", source="generated",
                             default_name=data["name"])
