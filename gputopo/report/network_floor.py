"""What the NICs of a job across hosts carry: the floor its collective's busbw is judged against.

A collective across hosts moves its data between them through each host's RDMA NICs (a
multi-node NVLink domain aside: GB200 trays are judged by their published NVLink figures,
expected_basis.reference_match, which is tried first). NCCL drives one NIC per GPU at most, so
the NICs a job used are counted as each host's Active ports at the host's top rate (a slower
management or storage port is not the job's), at most one per GPU of the host; the job's figure
is then the slowest host's ``ports x rate``. For a ring all_reduce that is where busbw tops out
(nccl-tests' performance notes: busbw is comparable to the network's bandwidth); other algorithms
(NVLS, trees on two nodes) can pass it, so it is a floor: above it is never suspicious, and a
figure under half of it (FLOOR_FRACTION) is a warning.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Set

from gputopo.model import Topology, is_value

from .headline import Headline

#: A job across hosts under this share of its NICs' floor is a warning ("well under half").
FLOOR_FRACTION = 0.5


@dataclass(frozen=True)
class NicFloor:
    """The NICs a job used per host and what they carry (GB/s, from their ports' rate in Gb/s)."""

    gbps: float
    ports: Dict[str, int]  # host -> ports counted
    rate_gbps: Dict[str, float]  # host -> the counted ports' rate, Gb/s
    source: str  # where the ports were read

    @property
    def text(self) -> str:
        per = sorted({(n, r) for n, r in ((self.ports[h], self.rate_gbps[h]) for h in self.ports)})
        hosts = (f"each of the {len(self.ports)} hosts" if len(per) == 1
                 else "the slowest of the " + str(len(self.ports)) + " hosts")
        n, r = min(per, key=lambda nr: nr[0] * nr[1])
        return (f"what the job's NICs carry: {n} x {r:g} Gb/s Active RDMA port(s) on {hosts} = "
                f"{self.gbps:g} GB/s ({self.source}; at most one NIC per GPU counted)")


def job_hosts(topo: Optional[Topology]) -> List[str]:
    """The hosts whose NICs a topology holds (a multi-node import's --nics), in order."""
    if topo is None:
        return []
    return list(dict.fromkeys(n.host for n in topo.nics if n.host is not None))


def nic_floor(topo: Optional[Topology]) -> Optional[NicFloor]:
    """The floor of a topology joining two or more hosts' NICs, or None (a host with no Active
    port of a known rate leaves it unknown: such a host is said by scan's port checks)."""
    hosts = job_hosts(topo)
    if topo is None or len(hosts) < 2:
        return None
    per_host_gpus = max(1, math.ceil(len(topo.gpus) / len(hosts))) if topo.gpus else None
    ports: Dict[str, int] = {}
    rates: Dict[str, float] = {}
    sources: Set[str] = set()
    for host in hosts:
        active = [p for n in topo.nics if n.host == host for p in n.ports
                  if p.state == "Active" and is_value(p.rate_gbps) and float(p.rate_gbps) > 0]
        if not active:
            return None
        top = max(float(p.rate_gbps) for p in active)
        count = sum(1 for p in active if float(p.rate_gbps) >= top)
        if per_host_gpus is not None:
            count = min(count, per_host_gpus)
        ports[host], rates[host] = count, top
        sources.update(p.sources.get("job_nics") or p.sources.get("state", "") for p in active)
    gbps = min(ports[h] * rates[h] / 8 for h in hosts)
    src = ", ".join(sorted(s for s in sources if s)) or "--nics"
    return NicFloor(round(gbps, 3), ports, rates, f"ports read from {src}")


def spans_hosts(h: Headline, topo: Optional[Topology]) -> bool:
    """A collective series with more GPUs than one host of the job holds (so it crossed hosts)."""
    hosts = job_hosts(topo)
    if topo is None or len(hosts) < 2 or not h.test.startswith("collective."):
        return False
    return len(h.gpus) > len(topo.gpus) / len(hosts)
