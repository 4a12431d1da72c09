"""The cpu fabric: each "GPU" is a worker process; bytes really cross processes over gloo.

For machines without GPUs and for CI: honest CPU numbers, timed by the wall clock
(``time.perf_counter``, ``timing: "wall"``). A peer copy is a gloo send/recv between the two
processes, a staged copy adds a host staging copy on each side, collectives are gloo's.
Each sample starts after a barrier, every rank times its part, and the sample is the slowest
rank's time (nccl-tests reports the max over ranks); wrong-element counts are summed over ranks.
"""

from __future__ import annotations

import time
from typing import Any, Optional, Sequence

import torch

from .base import Ops


def _first_available(mod, *names):
    for n in names:
        fn = getattr(mod, n, None)
        if fn is not None:
            return fn
    raise NotImplementedError(f"torch.distributed has none of {names}")


class DistMixin(Ops):
    """Rank-level collectives and the cross-rank sample combine, over torch.distributed."""

    world = 1
    #: torch.distributed's ReduceOp all_reduce uses (all_reduce_op), once known.
    _reduce_op: Any = None

    def _dist(self):
        import torch.distributed as dist

        return dist

    def _sync_device(self):
        return torch.device("cpu")

    def barrier(self) -> None:
        if self.world > 1:
            t = torch.zeros(1, device=self._sync_device())
            self._dist().all_reduce(t)
            self.sync(self.local_gpus)

    def _sample_note(self) -> float:
        """A number this rank adds to the sample's gathered row (the cuda fabric: the GPU whose
        stream hold ended early, plus one; 0 for nothing to note)."""
        return 0.0

    def _noted(self, notes) -> None:
        """Every rank's note of the sample just combined (the same list on every rank)."""

    def combine(self, seconds: float, wrong: int, first_bad: Optional[int]):
        if self.world <= 1:
            self._noted([self._sample_note()])
            return seconds, wrong, first_bad
        dist = self._dist()
        mine = torch.tensor([seconds, float(wrong), float(-1 if first_bad is None else first_bad),
                             self._sample_note()],
                            dtype=torch.float64, device=self._sync_device())
        allv = [torch.empty_like(mine) for _ in range(self.world)]
        dist.all_gather(allv, mine)
        rows = [v.tolist() for v in allv]
        self._noted([r[3] for r in rows])
        t = max(r[0] for r in rows)
        w = int(sum(r[1] for r in rows))
        firsts = [int(r[2]) for r in rows if r[1] > 0 and r[2] >= 0]
        return t, w, (min(firsts) if firsts else None)

    def all_reduce_op(self) -> str:
        """"avg" for a process group of one NCCL rank, else "sum". NCCL's one-rank path
        (src/enqueue.cc taskAppend -> ncclLaunchOneRank, src/device/onerank.cu) launches no
        kernel unless the op is a pre-multiplied sum: an in-place sum does nothing and an
        out-of-place one is a memcpy, so the buffer is trivially right and the time is no
        collective's. ncclAvg on float32 is a pre-multiplied sum by 1/nRanks (hostToDevRedOp),
        which it runs its oneRankReduce kernel for; by 1.0, so the result is the input bit for
        bit (torch's ProcessGroupNCCL passes ReduceOp.AVG as ncclAvg). Gloo is asked for a sum:
        it has no AVG in general (ProcessGroupGloo: "Cannot use ReduceOp.AVG with Gloo")."""
        if self.world != 1:
            return "sum"
        dist = self._dist()
        try:
            nccl = dist.is_initialized() and str(dist.get_backend()) == "nccl"
        except (RuntimeError, ValueError):
            nccl = False
        return "avg" if nccl else "sum"

    def all_reduce(self, bufs) -> None:
        dist = self._dist()
        op = self._reduce_op  # decided at the first call (a warm-up), not in every timed one
        if op is None:
            op = self._reduce_op = dist.ReduceOp.AVG if self.all_reduce_op() == "avg" else dist.ReduceOp.SUM
        for t in bufs.values():
            dist.all_reduce(t, op=op)

    def all_gather(self, outs, ins) -> None:
        fn = _first_available(self._dist(), "all_gather_single", "all_gather_into_tensor",
                              "_all_gather_base")
        for g in outs:
            fn(outs[g], ins[g])

    def reduce_scatter(self, outs, ins) -> None:
        fn = _first_available(self._dist(), "reduce_scatter_single", "reduce_scatter_tensor",
                              "_reduce_scatter_base")
        for g in outs:
            fn(outs[g], ins[g])

    def broadcast(self, bufs, root: int) -> None:
        for t in bufs.values():
            self._dist().broadcast(t, src=self.rank_of(root))


class CpuOps(DistMixin, Ops):
    fabric = "cpu"
    timing = "wall"
    memory_on_host = True

    @classmethod
    def for_step(cls, local_gpus, step_gpus, world, state) -> "CpuOps":
        """One step's ops in a worker (fabric.py's Fabric.ops)."""
        return cls(local_gpus, step_gpus, world)

    def __init__(self, local_gpus: Sequence[int], step_gpus: Sequence[int], world: int):
        Ops.__init__(self, local_gpus, step_gpus)
        self.world = world

    def device(self, gpu: int) -> torch.device:
        return torch.device("cpu")

    def transfers(self, items, route: str = "p2p") -> None:
        reqs = []
        for tag, (dst, src, dst_gpu, src_gpu) in enumerate(items):
            here_src, here_dst = self.is_local(src_gpu), self.is_local(dst_gpu)
            if here_src and here_dst:
                dst.copy_(src)
            elif here_src:
                reqs.append(self._dist().isend(src, dst=self.rank_of(dst_gpu), tag=tag))
            elif here_dst:
                reqs.append(self._dist().irecv(dst, src=self.rank_of(src_gpu), tag=tag))
        for r in reqs:
            r.wait()

    def staged(self, dst, src, dst_gpu: int, src_gpu: int, stage) -> None:
        # Through host memory: a staging copy on the sending side, the move, a copy on arrival.
        if self.is_local(src_gpu):
            stage.copy_(src)
        self.transfers([(stage if self.is_local(dst_gpu) else None,
                         stage if self.is_local(src_gpu) else None, dst_gpu, src_gpu)])
        if self.is_local(dst_gpu):
            dst.copy_(stage)

    timing_method = "wall: time.perf_counter around the runs, after a barrier of the ranks"

    def timed(self, run, gpus, *, repeat: int, seed: int, sample: int) -> float:
        self.barrier()
        t0 = time.perf_counter()
        for _ in range(repeat):
            run()
        return (time.perf_counter() - t0) / repeat

    def extra(self, test: str, src, dst) -> dict:
        if test.startswith("self."):
            return {"path": "memcpy"}
        if test == "p2p.staged":
            return {"path": "host", "transport": "gloo"}
        return {"path": "p2p", "transport": "gloo"}
