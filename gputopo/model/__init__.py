"""Plain records and their JSON form. Imports nothing from the rest of gputopo."""

from .finding import Finding, worst_first
from .linkclass import LinkClass
from .measurement import Measurement
from .topology import (AcsBridge, Gpu, HostInfo, Nic, NvLink, P2P_CAPS, P2P_STATUS_NAMES, Pair,
                       PcieLink, Topology, topology_from_json, topology_to_json)
from .values import Failed, NotAvailable, is_value

__all__ = [
    "AcsBridge", "Failed", "Finding", "Gpu", "HostInfo", "LinkClass", "Measurement",
    "Nic", "NotAvailable", "NvLink", "P2P_CAPS", "P2P_STATUS_NAMES", "Pair", "PcieLink", "Topology",
    "is_value", "topology_from_json", "topology_to_json", "worst_first",
]
