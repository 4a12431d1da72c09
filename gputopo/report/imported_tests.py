"""What the series of imported outputs (nvbandwidth, p2pBandwidthLatencyTest) measure, so the
headline compares each with the right rate: a peer copy with its pair's link, a bidirectional
total with twice that, a host copy with the GPU's own PCIe link, a copy through host memory with
the narrower of the two GPUs' PCIe links, and latency with nothing (it is not a bandwidth).

The names are the importers' (importers/nvbandwidth_measure.py, importers/p2pbw_import.py).
"""

from __future__ import annotations

#: Imported series that are plain peer copies in one direction: judged against the pair's link
#: rate like the bench's p2p.copy (``slow``), since nothing else is in the way.
PEER_COPY_TESTS = ("p2p.copy_read", "nvbandwidth.device_to_device_memcpy_read_ce",
                   "nvbandwidth.device_to_device_memcpy_write_ce")
#: Bidirectional series whose bytes count both directions (compared with 2 x the link rate).
BIDIRECTIONAL_IMPORTED = ("p2p.copy_bidir_read", "p2p.staged_bidir", "p2p.staged_no_peer_bidir",
                          "p2p.staged_no_peer_bidir_read")
#: Copies through pinned host memory, both GPUs' PCIe links in the way: p2pBandwidthLatencyTest's
#: P2P=Disabled matrices, and its P2P=Enabled ones on a pair without peer access (``_no_peer``:
#: the driver stages those through host memory too).
STAGED_TESTS = ("p2p.staged", "p2p.staged_bidir", "p2p.staged_no_peer", "p2p.staged_no_peer_read",
                "p2p.staged_no_peer_bidir", "p2p.staged_no_peer_bidir_read")


def is_latency(test: str) -> bool:
    """Latency series (nvbandwidth ns matrices, p2pBandwidthLatencyTest us matrices)."""
    return "latency" in test


def is_bidirectional_total(test: str) -> bool:
    return test in BIDIRECTIONAL_IMPORTED or (test.startswith("nvbandwidth.") and test.endswith("_total"))


def is_host_copy(test: str) -> bool:
    """nvbandwidth's host <-> device series (one GPU, its own PCIe link)."""
    name = test.removeprefix("nvbandwidth.")
    return test.startswith("nvbandwidth.") and name.startswith(("host_to_", "device_to_host", "all_to_host"))


def is_peer_copy(test: str) -> bool:
    return test in PEER_COPY_TESTS
