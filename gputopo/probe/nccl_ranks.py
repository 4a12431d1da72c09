"""Which host each NCCL rank ran on, from what the log itself says: the rank -> host map.

A channel line is printed by ONE process (its ``host:pid:tid [cudaDev]`` prefix), and that process
is the sender of the connection, except on ``[receive]`` lines, where it is the receiver. So the
line's host belongs to only one of the two ranks; the peer's host must come from elsewhere:
every ``Init START/COMPLETE`` line (``comm 0x.. rank R nranks N cudaDev D [nvmlDev V] busId B``)
and every channel line the peer printed itself. Two machines may carry the same host name
(containers, cloned images): ranks of one name that drive the same GPU at once cannot be one
machine, so such a name is split into ``name#1``, ``name#2``... in rank order (told apart by
pid and rank, never merged).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RankSeen:
    """One rank as the log shows it: the process that printed for it, and its GPU."""

    host: str
    pid: int
    cuda_dev: int | None = None
    nvml_dev: int | None = None
    bus_id: str | None = None


@dataclass
class RankMap:
    """rank -> RankSeen (the world communicator's: the largest ``nranks`` seen), and each rank's
    machine label (the host name, or ``name#k`` when one name covers several machines)."""

    ranks: dict[int, RankSeen] = field(default_factory=dict)
    _init_size: dict[int, int] = field(default_factory=dict)  # rank -> nranks of the Init line kept
    labels: dict[int, str] = field(default_factory=dict)

    def from_init(self, rank: int, nranks: int, seen: RankSeen) -> None:
        """An Init line: kept when its communicator is at least as large as the one kept before."""
        if nranks >= self._init_size.get(rank, 0):
            self._init_size[rank] = nranks
            self.ranks[rank] = seen

    def from_channel(self, rank: int, seen: RankSeen) -> None:
        """A channel line printed by ``rank``'s own process: fills what Init lines did not say."""
        if rank not in self.ranks:
            self.ranks[rank] = seen
        elif self.ranks[rank].cuda_dev is None:
            self.ranks[rank].cuda_dev = seen.cuda_dev

    def assign_machines(self) -> None:
        """Split a host name that two machines share: a rank joins the first machine of its name
        not already holding a rank on the same GPU (same bus id or NVML index: NCCL refuses one GPU
        twice in a communicator)."""
        machines: dict[str, list[set]] = {}
        for rank in sorted(self.ranks):
            seen = self.ranks[rank]
            gpu = _gpu_key(seen)
            slots = machines.setdefault(seen.host, [])
            for k, gpus in enumerate(slots):
                if gpu is None or gpu not in gpus:
                    if gpu is not None:
                        gpus.add(gpu)
                    self.labels[rank] = f"{seen.host}#{k + 1}"
                    break
            else:
                slots.append({gpu} if gpu is not None else set())
                self.labels[rank] = f"{seen.host}#{len(slots)}"
        for rank in list(self.labels):
            host = self.ranks[rank].host
            if len(machines.get(host, [])) == 1:
                self.labels[rank] = host

    def label_for(self, seen: RankSeen) -> str:
        """The machine label of a process: that of the world rank printed by the same process on
        the same GPU, else its host name."""
        for rank, world in self.ranks.items():
            if (world.host, world.pid) == (seen.host, seen.pid) and \
                    (_gpu_key(seen) is None or _gpu_key(world) in (None, _gpu_key(seen))):
                return self.labels.get(rank, seen.host)
        return seen.host

    def host_of(self, rank: int) -> str | None:
        return self.labels.get(rank)

    def seen(self, rank: int) -> RankSeen | None:
        return self.ranks.get(rank)

    @property
    def machines(self) -> list[str]:
        return sorted(set(self.labels.values()))


def _gpu_key(seen: RankSeen) -> tuple[str, object] | None:
    if seen.bus_id:
        return ("bus", seen.bus_id)
    if seen.nvml_dev is not None:
        return ("nvml", seen.nvml_dev)
    return None  # a CUDA device number is not a GPU: CUDA_VISIBLE_DEVICES makes every rank's 0
