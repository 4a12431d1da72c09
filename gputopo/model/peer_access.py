"""What a GPU's model name and a tool's waiver tell about peer-to-peer access: facts the
importers record and the report's rules (report/peer_access.py, report/topology_checks.py) read.
"""

from __future__ import annotations

from typing import Any

from .values import is_value

#: The testcases nvbandwidth runs only where some GPU pair of the machine can access a peer
#: (``Testcase::filterHasAccessiblePeerPairs()``, testcase.h v0.2 to v0.8: ``cuDeviceCanAccessPeer``
#: over every ordered pair); it waives them otherwise, and always on one GPU. Every other
#: testcase it can waive is a ``multinode_`` one (one process, or no multicast).
PEER_FILTERED_TESTCASES = frozenset({
    "device_to_device_memcpy_read_ce", "device_to_device_memcpy_write_ce",
    "device_to_device_bidirectional_memcpy_read_ce", "device_to_device_bidirectional_memcpy_write_ce",
    "all_to_one_write_ce", "all_to_one_read_ce", "one_to_all_write_ce", "one_to_all_read_ce",
    "device_to_device_memcpy_read_sm", "device_to_device_memcpy_write_sm", "device_to_device_latency_sm",
    "device_to_device_bidirectional_memcpy_read_sm", "device_to_device_bidirectional_memcpy_write_sm",
    "all_to_one_write_sm", "all_to_one_read_sm", "one_to_all_write_sm", "one_to_all_read_sm"})
#: How a waiver is recorded where the output does not name its testcase (v0.5+ text prints a bare
#: ``Waived:`` line in place of ``Running X.``).
UNNAMED_WAIVER = "(a testcase: v0.5+ text prints no name)"


def peer_to_peer_off_by_design(name: Any) -> bool:
    """Whether the GPU model has no peer-to-peer over PCIe by its maker's design: NVIDIA's
    GeForce cards (the name says "GeForce": RTX 4090, 4080, 5090, 3090, 2080 Ti ...). TITAN and
    professional cards (RTX A6000, RTX 6000 Ada, L40S) are not counted."""
    return is_value(name) and "GEFORCE" in str(name).upper()


def board_wired(name: Any) -> bool:
    """Whether a GPU's NVLinks are wired by its baseboard (SXM modules: HGX/DGX, every link to a
    switch or a peer), so an inactive link was meant to be up even when NVML names no far end
    (e.g. every link down because the fabric manager is not running). PCIe and NVL cards, and
    GH200 (its links unused outside an NVLink-switch rack), are wired only by bridges."""
    u = str(name).upper() if is_value(name) else ""
    if not u or "PCIE" in u or "NVL" in u or "GH200" in u:
        return False
    return any(k in u for k in ("SXM", "HBM3", "H200", "B100", "B200", "B300"))
