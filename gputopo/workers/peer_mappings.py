"""How many peer mappings each GPU holds, over every worker process alive at once, so that no
device is ever asked for a ninth (the bench runner's and the numerics' worker pools use this).

What CUDA limits: "On non-NVSwitch enabled systems, each device can support a system-wide
maximum of eight peer connections" (CUDA C++ Programming Guide, Peer-to-Peer Memory Access).
A ninth fails with cudaErrorTooManyPeers ("peer mapping resources exhausted"), and that failure
is not the link's: on a PCIe box of 10 or more GPUs it crashed healthy pairs. Who makes them:

- torch's copy between two GPUs (``dst.copy_(src)``, ``tensor.to``, DataParallel's scatter and
  gather) enables peer access from the source's context to the destination (at::cuda::
  get_p2p_access), remembers per process that it did, and never disables it; every error but
  "already enabled" is fatal. DataParallel's broadcast and reduce_add go through NCCL in the
  same process, which enables peer access between the two devices as well.
- NCCL between two processes (the bench's collectives, the numerics' DDP) maps the peer's
  buffers into each rank's context (CUDA IPC or cuMem), with peer access enabled as needed.
  Whether the driver gives that back when the process group is destroyed is not documented,
  so it is counted as held until the process exits.

How it is counted here (``count``): a worker process that has run anything on GPUs a and b
holds one mapping on a and one on b, whatever the direction and however many calls made it;
the same pair held by two processes counts twice on each device. Why so: the limit is
system-wide, across processes and libraries (NCCL's maintainers, NVIDIA/nccl issue 51); 8
processes of one GPU each, every one mapping all the others (7 peers each) failed there while 5
did not, which this count predicts (6 + 6 = 12 > 8; 4 + 4 = 8) and a count of distinct peers
does not; and one process enabling both directions between all 8 GPUs of a PCIe box, as
p2pBandwidthLatencyTest does, works, so both directions of a pair in one process are one.
Counting a mapping that is not made (a pair without peer access, a mapping NCCL did give
back) only costs a worker start; missing one costs a crash on a healthy pair.

The CUDA guide exempts NVSwitch systems, so the limit is skipped for a GPU whose peers are all
reached through NVSwitch (``nvswitch_gpus``: every NVLink NVML reports up on it and on each other
GPU of the machine has an NVSwitch at its far end, and where NVML reports a fabric registration,
each has completed successfully, in one clique). It is kept for every other GPU: a PCIe machine, a
GPU whose NVLinks are down (its peers are reached over PCIe), and every GPU of a machine that has
one (a peer of theirs is not reached through NVSwitch), a GPU whose links NVML could not read.
Which GPUs it applied to goes into run.json (``peer_limit_record``).
A worker's torch remembers that it enabled a peer, so disabling peer access under it is not
safe: the only way to give mappings back is to end the process. When a step would take a device
past the limit, idle workers that hold mappings on it are ended first (``room_for``); the next
step's worker is a fresh process.

Pure Python, no torch.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Set, Tuple

from gputopo.model.fabric import GpuFabric
from gputopo.model.values import is_value

#: Peer connections one device may hold at once, system-wide (the CUDA guide's "eight").
PEER_LIMIT = 8

Pair = Tuple[int, int]


def _pair(a: int, b: int) -> Pair:
    return (a, b) if a < b else (b, a)


#: run.json's key for what ``peer_limit_record`` says (a bench run on the cuda fabric; null elsewhere).
PEER_LIMIT_KEY = "peer_limit"


def _switched(g) -> bool:
    """Whether GPU ``g`` reaches its peers through NVSwitch as NVML reports it: not lost, its
    NVLinks all read, at least one up, every one up with an NVSwitch at its far end, and its
    fabric registration (where NVML reports one) completed successfully."""
    if g.lost is not None or not g.nvlinks or any(not isinstance(lk.active, bool) for lk in g.nvlinks):
        return False
    up = g.active_nvlinks()
    if not up or any(str(lk.remote_type) != "SWITCH" for lk in up):
        return False
    f = g.fabric
    return not isinstance(f, GpuFabric) or f.ready


def _clique(g) -> Optional[Tuple[Any, Any]]:
    f = g.fabric
    if isinstance(f, GpuFabric) and is_value(f.clique_id):
        return (f.cluster_uuid if is_value(f.cluster_uuid) else None, f.clique_id)
    return None


def nvswitch_gpus(topology) -> List[int]:
    """NVML indices of the GPUs whose peers are all reached through NVSwitch: the GPU and every
    other GPU of the machine reach their peers through NVSwitch (``_switched``), and where NVML
    names their fabric cliques, the same one (GPUs of two cliques reach each other over PCIe).
    CUDA's limit of 8 is stated for non-NVSwitch systems only. A GPU alone has no peer: it is
    not counted as one (nothing maps a peer on it)."""
    gpus = [g for g in topology.gpus if g.lost is None]
    if len(gpus) < 2:
        return []
    out = []
    for g in gpus:
        if not _switched(g):
            continue
        mine = _clique(g)
        if all(_switched(h) and (mine is None or _clique(h) is None or _clique(h) == mine)
               for h in gpus if h is not g):
            out.append(g.nvml_index)
    return out


def peer_limit_record(topology, limit: int = PEER_LIMIT) -> Dict[str, Any]:
    """What run.json says of the limit: per GPU (NVML index), whether it was applied."""
    exempt = set(nvswitch_gpus(topology))
    return {"limit": int(limit),
            "applied_to": [g.nvml_index for g in topology.gpus if g.nvml_index not in exempt],
            "skipped_for": sorted(exempt),
            "why_skipped": ("every NVLink NVML reports up on these GPUs and on each of their peers has "
                            "an NVSwitch at its far end; CUDA states the limit of 8 peer connections "
                            "per device for non-NVSwitch systems only") if exempt else None}


class PeerLedger:
    """The pairs each live worker (by key) holds a mapping for, and the counts they add up to.
    ``exempt``: devices CUDA's limit does not apply to (``nvswitch_gpus``), never counted over."""

    def __init__(self, limit: int = PEER_LIMIT, exempt: Iterable[int] = ()):
        self.limit = int(limit)
        self.exempt = frozenset(int(d) for d in exempt)
        self.held: Dict[str, Set[Pair]] = {}

    def hold(self, key: str, a: int, b: int) -> None:
        """Worker ``key`` has run (or is about to run) something on GPUs ``a`` and ``b``."""
        if a != b:
            self.held.setdefault(key, set()).add(_pair(a, b))

    def drop(self, key: str) -> None:
        """Worker ``key`` has ended: its mappings are gone with its process."""
        self.held.pop(key, None)

    def count(self, device: int, extra: Optional[Mapping[str, Iterable[Pair]]] = None,
              without: Iterable[str] = ()) -> int:
        """Mappings ``device`` holds over the live workers, with those ``without`` ended and
        ``extra`` (key -> pairs) added (an ended key of ``extra``: a fresh process that holds
        only its ``extra``)."""
        gone = set(without)
        extra = extra or {}
        total = 0
        for key in set(self.held) | set(extra):
            pairs = set() if key in gone else set(self.held.get(key, ()))
            pairs.update(_pair(*p) for p in extra.get(key, ()))
            total += sum(1 for p in pairs if device in p)
        return total

    def over(self, extra: Mapping[str, Iterable[Pair]], without: Iterable[str] = ()) -> List[int]:
        """The devices that would hold more than ``limit`` mappings with ``extra`` added."""
        gone = list(without)
        devices = sorted({d for pairs in extra.values() for p in pairs for d in p} - self.exempt)
        return [d for d in devices if self.count(d, extra, gone) > self.limit]

    def room_for(self, extra: Mapping[str, Iterable[Pair]], idle: Iterable[str],
                 next_use: Mapping[str, int]) -> Optional[List[str]]:
        """The idle workers to end so that ``extra`` (key -> pairs its worker is about to map)
        fits: [] when it fits already, None when ending every idle worker would not do (a busy
        worker holds the mappings: wait for it). Of the idle workers holding mappings on a
        device over the limit, those no step needs any more go first, then the one holding
        the most mappings on the devices over the limit (the fewest ended), then of those the
        one needed last (``next_use``: key -> how many steps come before its next one; a
        worker ended now is started again then). A key of
        ``extra`` may be ended too: it maps its pair in a fresh process."""
        extra = {k: [_pair(*p) for p in v] for k, v in extra.items()}
        ended: List[str] = []
        candidates = [k for k in idle if self.held.get(k)]
        while True:
            over = self.over(extra, ended)
            if not over:
                return ended
            left = [k for k in candidates if k not in ended
                     and any(d in p for p in self.held.get(k, ()) for d in over)]
            if not left:
                return None
            never = 1 << 30
            left.sort(key=lambda k: (k in next_use,
                                     -sum(1 for p in self.held[k] for d in over if d in p),
                                     -next_use.get(k, never), k))
            ended.append(left[0])


def step_pairs(gpus: Tuple[int, ...], keys: List[str]) -> Dict[str, List[Pair]]:
    """The pair each worker of a step maps: every worker of a two-GPU step (the one process of a
    peer copy or DataParallel step, and each rank of an NCCL step); none for one GPU."""
    if len(gpus) != 2 or gpus[0] == gpus[1]:
        return {}
    return {k: [_pair(gpus[0], gpus[1])] for k in keys}
