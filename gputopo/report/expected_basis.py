"""What one measured series is judged against, and how far below it may fall.

Two bases, in this order (issue: "judged against the closest reference where one exists, and
against theoretical x a typical efficiency otherwise"):

- ``reference``: a published figure of a healthy machine with the same GPU model, link class,
  test and GPU count (references.py); below REFERENCE_FRACTION of it is slow. This is also how a
  slow-by-design path (PCIe across the sockets of an Intel host) is "expected for this class on
  this platform" instead of a fault.
- ``theoretical``: the link's theoretical rate (expected.py); plain peer copies below
  SLOW_EFFICIENCY of it are slow. Other series have no theoretical basis (an all_reduce's busbw
  depends on the algorithm), so without a reference they are judged only against their peers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from gputopo.model import Topology, is_value

from .headline import LINK_RATE_FABRICS, Headline
from .imported_tests import is_host_copy, is_peer_copy
from .references import REFERENCE_FRACTION, Reference, closest_reference

#: A pure link transfer below this fraction of the theoretical rate is `slow` (warning).
#: Good hardware reaches 0.8-0.9 (docs/report.md), so 0.5 leaves room for overheads, not for faults.
SLOW_EFFICIENCY = 0.5
#: Series judged against the theoretical rate: plain peer copies, nothing else in the way.
SLOW_SERIES = ("p2p.copy", "p2p.copy_bidir")


@dataclass(frozen=True)
class Judged:
    """A series' figure against its basis: ``fraction`` = measured / ``expected_gbps``."""

    basis: str  # "reference" | "theoretical"
    expected_gbps: float
    fraction: float
    threshold: float
    text: str  # "the 376 GB/s published for 8x H100 SXM (...)" / "the link's theoretical 100 GB/s"
    reference: Optional[Reference] = None


def gpu_names(topo: Optional[Topology], gpus) -> List[str]:
    """The NVML names of ``gpus`` (empty when any is unknown: a mixed or unknown set matches
    only rows for any model)."""
    if topo is None:
        return []
    names = []
    for g in gpus:
        try:
            name = topo.gpu(g).name
        except KeyError:
            return []
        if not is_value(name) or not name:
            return []
        names.append(str(name))
    return names


def platform_of(topo: Optional[Topology]) -> Optional[str]:
    vendor = topo.host.cpu_vendor if topo is not None and topo.host is not None else None
    return str(vendor) if is_value(vendor) and vendor else None


def reference_test(test: str) -> str:
    """The bench series an imported one measures the same way as (the table's test names):
    nvbandwidth's and p2pBandwidthLatencyTest's one-way peer copies are ``p2p.copy``, their
    host copies ``self.h2d`` / ``self.d2h``."""
    if is_peer_copy(test):
        return "p2p.copy"
    if test == "p2p.copy_bidir_read":
        return "p2p.copy_bidir"
    if is_host_copy(test):
        name = test.removeprefix("nvbandwidth.")
        return "self.h2d" if name.startswith("host_to_device") else "self.d2h" if name.startswith(
            "device_to_host") else test
    return test


def reference_for(h: Headline, topo: Optional[Topology]) -> Optional[Reference]:
    """The published figure a headline is compared with, if one matches its metric too."""
    test = reference_test(h.test)
    link_class = "host" if test.startswith("self.") else h.link_class
    ref = closest_reference(test, len(h.gpus), link_class, gpu_names(topo, h.gpus), platform_of(topo))
    return ref if ref is not None and ref.metric == h.metric else None


def judge_rate(h: Headline, topo: Optional[Topology]) -> Optional[Judged]:
    """The basis a headline is judged on, or None when it has none (then it is not judged slow:
    nothing is concluded from a figure with nothing to compare it with)."""
    if h.fabric not in LINK_RATE_FABRICS:
        return None
    ref = reference_for(h, topo)
    if ref is not None:
        return Judged("reference", ref.gbps, h.gbps / ref.gbps, REFERENCE_FRACTION,
                      f"the {ref.gbps:g} GB/s {ref.metric} published for {ref.machine} "
                      f"({ref.tool}; {ref.source})", ref)
    if (h.series in SLOW_SERIES or is_peer_copy(h.series)) and len(h.gpus) == 2 and h.efficiency is not None and h.expected.gbps:
        return Judged("theoretical", h.expected.gbps, h.efficiency, SLOW_EFFICIENCY,
                      f"the link's theoretical {h.expected.gbps:g} GB/s ({h.expected.basis})")
    return None
