"""Theoretical unidirectional link bandwidth in GB/s (1e9 B/s), the rates docs/report.md judges against.

Good hardware reaches roughly 80-90 % of these figures.
"""

from __future__ import annotations

from typing import Optional

#: NVLink version -> GB/s per link per direction.
NVLINK_GBPS_PER_LINK = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}
#: PCIe generation -> GB/s per direction for x16.
PCIE_X16_GBPS = {1: 4.0, 2: 8.0, 3: 15.75, 4: 31.5, 5: 63.0, 6: 121.0}


def nvlink_gbps(version: int, links: int) -> Optional[float]:
    """Unidirectional GB/s of ``links`` bonded NVLinks of ``version``; None if unknown version."""
    per = NVLINK_GBPS_PER_LINK.get(int(version))
    return per * links if per is not None else None


def pcie_gbps(gen: int, width: int) -> Optional[float]:
    """Unidirectional GB/s of a PCIe link of generation ``gen`` and ``width`` lanes."""
    x16 = PCIE_X16_GBPS.get(int(gen))
    return x16 * width / 16 if x16 is not None else None
