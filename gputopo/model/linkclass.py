"""Link classes between two GPUs, as `nvidia-smi topo -m` names them.

Order, best first: NV# (more links better), PIX, PXB, PHB, NODE, SYS. NVML's topology levels map
to the PCIe classes (docs/scan.md); NV# comes from counting active NVLinks, not from that call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: PCIe classes in order of increasing distance.
PCIE_KINDS = ("PIX", "PXB", "PHB", "NODE", "SYS")
KINDS = ("X", "NV") + PCIE_KINDS

#: nvmlGpuTopologyLevel_t value -> class. INTERNAL (0) is two GPUs on one board.
NVML_LEVEL_TO_KIND = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}

#: What each class means, as nvidia-smi's legend says it.
LEGEND = {
    "X": "Self",
    "SYS": "Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",
    "NODE": "Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node",
    "PHB": "Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
    "PXB": "Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
    "PIX": "Connection traversing at most a single PCIe bridge",
    "NV#": "Connection traversing a bonded set of # NVLinks",
}

_NV_RE = re.compile(r"^NV(\d+)$")
#: The most NVLinks one GPU has (NVML_NVLINK_MAX_LINKS of NVML 12); NV# above it is no real link.
MAX_NVLINKS = 36


@dataclass(frozen=True, order=False)
class LinkClass:
    """A link class: ``kind`` in KINDS and, for NVLink, the number of bonded links."""

    kind: str
    nvlinks: int = 0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown link class kind {self.kind!r}")
        if (self.kind == "NV") != (self.nvlinks > 0):
            raise ValueError("NV needs a positive link count; other classes none")

    @classmethod
    def parse(cls, text: str) -> "LinkClass":
        """Parse 'NV4', 'PIX', 'SOC' (old drivers' name for SYS), 'X'. Raises ValueError."""
        t = text.strip().upper()
        if t == "SOC":
            t = "SYS"
        m = _NV_RE.match(t)
        if m:
            if int(m.group(1)) > MAX_NVLINKS:
                raise ValueError(f"unknown link class {text.strip()!r}: a GPU has at most "
                                 f"{MAX_NVLINKS} NVLinks")
            return cls("NV", int(m.group(1)))
        if t in KINDS and t != "NV":
            return cls(t)
        raise ValueError(f"unknown link class {text.strip()!r}")

    @classmethod
    def from_nvml_level(cls, level: int) -> "LinkClass":
        try:
            return cls(NVML_LEVEL_TO_KIND[int(level)])
        except KeyError:
            raise ValueError(f"unknown NVML topology level {level!r}") from None

    @property
    def is_nvlink(self) -> bool:
        return self.kind == "NV"

    @property
    def rank(self) -> tuple:
        """Sort key, best link first (NV18 before NV4 before PIX ... before SYS)."""
        return (KINDS.index(self.kind), -self.nvlinks)

    def __str__(self) -> str:
        return f"NV{self.nvlinks}" if self.kind == "NV" else self.kind

    def __lt__(self, other: "LinkClass") -> bool:
        return self.rank < other.rank
