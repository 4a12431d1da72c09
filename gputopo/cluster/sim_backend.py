"""A simulated cluster in one process: the round loop's backend with modeled time.

Every node is the cluster description's machine. The intra-node all_reduce is modeled once for
that machine (a ring over its GPUs in index order, each step as slow as its slowest edge, on
NCCL's route for the edge's link class: the sim fabric's link model) and shared by every node
whose faults do not change it, so 1,024 nodes cost one model, not 1,024.

Inter-node: each GPU uses its closest NIC; ``nics_per_node`` NICs at ``link.gbps`` each
carry the node's G GPUs, so a node's inter-node all_reduce busbw is
``gbps x G / (most GPUs on one NIC)`` (a NIC down moves its GPUs onto another one), capped by
the intra-node busbw. A group runs at its slowest node (times its slow-link faults), with a
deterministic +-2 % jitter per group and round. Faults ``hang`` and ``crash`` stop the run at the
first round the node takes part in, after ``timeout_s`` of modeled time: the same thing the
liveness barrier of a real job does. Time is modeled (``timing: "modeled"``), never slept.
"""

from __future__ import annotations

import math
import random
from typing import Dict, List, Sequence

from gputopo.bench.routes import nccl_route
from gputopo.model.cluster import Group, GroupResult, LostRank
from gputopo.model.collectives import collective

from .fingerprint import topology_facts
from .patterns import SETUP_S
from .rounds import RanksLost

JITTER = 0.02


def _edge_seconds(desc, i: int, j: int, nbytes: float) -> float:
    """One ring step from GPU i to GPU j on NCCL's route (as the sim fabric models it)."""
    st = desc.p2p_status(i, j)
    peer_ok = all(st.get(c, "OK") == "OK" for c in ("read", "write"))
    if nccl_route(str(desc.link_class(i, j)), peer_ok) == "p2p":
        m = desc.link_model(i, j)
        return m.latency_us * 1e-6 + nbytes / (m.gbps * 1e9)
    a, b = desc.host_link_model(i), desc.host_link_model(j)
    return (a.latency_us + b.latency_us) * 1e-6 + nbytes / (min(a.gbps, b.gbps) * 1e9)


def intra_node_busbw(desc, size_bytes: int) -> float:
    """Modeled ring all_reduce busbw (GB/s) over all GPUs of ``desc``; 0 GPUs pairs -> 0."""
    g = desc.gpu_count
    if g < 2:
        return 0.0
    step = max(_edge_seconds(desc, k, (k + 1) % g, size_bytes / g) for k in range(g))
    t = 2 * (g - 1) * step
    return size_bytes * collective("all_reduce").busbw_factor(g) / t / 1e9


class SimBackend:
    """The backend of :func:`gputopo.cluster.rounds.run_rounds` for a ClusterDescription."""

    def __init__(self, cluster, *, size_bytes: int, samples: int, timeout_s: float, seed: int = 0):
        self.cluster = cluster
        self.size_bytes, self.samples, self.timeout_s, self.seed = size_bytes, samples, timeout_s, seed
        self.node_names = [cluster.node_name(k) for k in range(cluster.nodes)]
        self.gpus_per_node = cluster.node.gpu_count
        self.elapsed_s = 0.0  # modeled seconds of the whole run
        self._intra_gbps = intra_node_busbw(cluster.node, size_bytes)
        self.intra_models = 1  # how many modeled intra-node runs were needed

    # ------------------------------------------------------------------ facts
    def ranks(self, k: int) -> List[int]:
        return list(range(k * self.gpus_per_node, (k + 1) * self.gpus_per_node))

    def fingerprints(self) -> List[Dict]:
        from gputopo.sim.scan import scan_description

        base = dict(topology_facts(scan_description(self.cluster.node)),
                    torch="simulated", cuda="simulated", nccl="simulated",
                    nics=[f"ib{n}" for n in range(self.cluster.nics_per_node)])
        out = []
        for k in range(self.cluster.nodes):
            fp = dict(base)
            for f in self.cluster.node_faults(k):
                if f.what == "driver":
                    fp["driver"] = f.version
                elif f.what == "link_down":
                    fp["nics"] = [n for n in fp["nics"] if n != f"ib{f.nic}"]
            out.append(fp)
        return out

    # ------------------------------------------------------------------ model
    def _node_gbps(self, k: int) -> float:
        c = self.cluster
        down = {f.nic for f in c.node_faults(k) if f.what == "link_down"}
        up = max(1, c.nics_per_node - len(down))
        per_nic = math.ceil(self.gpus_per_node / up)
        gbps = c.link_gbps * self.gpus_per_node / per_nic
        if self._intra_gbps:
            gbps = min(gbps, self._intra_gbps)
        for f in c.node_faults(k):  # a slow node slows whatever bounds it
            if f.what == "slow":
                gbps *= f.factor
        return gbps

    def _one_gpu_gbps(self, k: int) -> float:
        """One GPU of node k (GPU 0) on its closest NIC: that NIC's rate (another's if it is down,
        shared then with that NIC's GPUs), times a slow node's factor."""
        c = self.cluster
        down = {f.nic for f in c.node_faults(k) if f.what == "link_down"}
        gbps = c.link_gbps / (2 if 0 in down and c.nics_per_node > 1 else 1)
        for f in c.node_faults(k):
            if f.what == "slow":
                gbps *= f.factor
        return gbps

    def _jitter(self, round_index: int, group: Sequence[int]) -> float:
        rng = random.Random(hash((self.seed, round_index, tuple(group))) & 0xFFFFFFFF)
        return 1.0 + rng.uniform(-JITTER, JITTER)

    def _result(self, group: Group, gbps: float, ranks: int, round_index: int) -> GroupResult:
        if round_index:  # inter-node rounds jitter; the one intra-node model is shared as is
            gbps *= self._jitter(round_index, group)
        factor = collective("all_reduce").busbw_factor(ranks)
        lat = self.cluster.link_latency_us * 1e-6 * 2 * (ranks - 1)
        t = lat + self.size_bytes * factor / (gbps * 1e9)
        return GroupResult(nodes=group, size_bytes=self.size_bytes, timing="modeled", time_s=t,
                           busbw_gbps=self.size_bytes * factor / t / 1e9, gpus=ranks)

    def _lost(self, groups: List[Group], phase: str) -> None:
        lost = []
        for g in groups:
            for k in g:
                for f in self.cluster.node_faults(k):
                    if f.what in ("hang", "crash"):
                        lost += [LostRank(r, self.node_names[k], f.what,
                                          f"simulated {f.what} ({f.where})") for r in self.ranks(k)]
        if lost:
            self.elapsed_s += self.timeout_s
            raise RanksLost(lost, phase)

    # ------------------------------------------------------------------ rounds
    def measure_intra(self) -> List[GroupResult]:
        g = self.gpus_per_node
        res = []
        for k in range(self.cluster.nodes):
            if g < 2:
                res.append(GroupResult(nodes=(k,), size_bytes=self.size_bytes, timing="modeled",
                                       gpus=g, na="one GPU per node: no intra-node all_reduce"))
            else:
                res.append(self._result((k,), self._intra_gbps, g, 0))
        times = [r.time_s for r in res if r.time_s]
        self.elapsed_s += SETUP_S + (self.samples + 1) * (max(times) if times else 0.0)
        return res

    def measure_round(self, index: int, groups: List[Group]) -> List[GroupResult]:
        self._lost(groups, f"round {index}")
        res = []
        one_gpu_times: List[float] = []  # seconds of each group's one-GPU-per-node all_reduce
        for grp in groups:
            gbps = min(self._node_gbps(k) for k in grp)
            for a in grp:
                for b in grp:
                    if a < b:
                        for f in self.cluster.link_faults(a, b):
                            gbps *= f.factor
            r = self._result(grp, gbps, len(grp) * self.gpus_per_node, index)
            one = min(self._one_gpu_gbps(k) for k in grp) * (gbps / min(self._node_gbps(k) for k in grp))
            r.one_gpu_busbw_gbps = one_gbps = one * self._jitter(-index, grp)
            factor = collective("all_reduce").busbw_factor(len(r.nodes))
            one_gpu_times.append(self.size_bytes * factor / (one_gbps * 1e9))
            res.append(r)
        one_gpu_s = max(one_gpu_times)
        self.elapsed_s += 2 * SETUP_S + (self.samples + 1) * (max(r.time_s or 0.0 for r in res) + one_gpu_s)
        return res
