"""What a fabric offers the benchmarks, and DataParallel's flow built on plain transfers.

A fabric's :class:`Ops` live in one worker process and drive that process's *local* GPUs
(``local_gpus``): both GPUs of a pair (cuda peer copies and DataParallel, sim) or one GPU per
process (cpu, cuda collectives), one rank each. Benchmarks hold their buffers as
``{gpu: tensor}`` of local GPUs only and call these operations; an operation involving a GPU of
another process sends or receives its half. So one benchmark runs unchanged on every fabric.

DataParallel's primitives (``torch.nn.parallel.comm``) only exist with CUDA (docs/architecture.md). The
cpu and sim fabrics reproduce DataParallel's documented steps here on top of ``transfers``:
broadcast_coalesced = flatten parameters into buckets of at most 10 MiB, copy each bucket to
the other devices, unflatten; scatter = split dim 0 into ``torch.chunk`` pieces, copy each to
its device (the master's own piece is a view, no copy); gather = copy every piece into one
tensor on the master; reduce_add_coalesced = flatten gradients per device, copy them to the
master, add. The cuda fabric calls the real functions instead.

Routes follow what torch does on a build with NCCL: ``comm.broadcast_coalesced`` and
``comm.reduce_add`` hand their buffers to ``torch.cuda.nccl`` (so they take NCCL's route: peer
DMA on NVLink and PCIe up to PXB, host memory beyond), while ``scatter`` and ``gather`` are raw
peer copies (``Tensor.copy_`` between devices) on any pair CUDA calls peer-capable. That is why
a broken PCIe P2P path reaches DataParallel's inputs and outputs even where NCCL is safe.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import torch

from .host_blocks import HOST_BLOCKS

#: DataParallel's bucket size for broadcast_coalesced / reduce_add_coalesced (10 MiB).
DP_BUFFER_BYTES = 10 * 1024 * 1024

Transfer = Tuple[Optional[torch.Tensor], Optional[torch.Tensor], int, int]  # dst, src, dst_gpu, src_gpu


def local_buffer(t: Optional[torch.Tensor], gpu: int) -> torch.Tensor:
    """``t``, a buffer on ``gpu``, which this process drives: Ops.empty (and the benchmarks'
    buffers) are None only for another process's GPU, so None here is a caller's bug, raised
    rather than passed on."""
    if t is None:
        raise RuntimeError(f"no buffer on GPU {gpu}, which this process drives")
    return t


def chunk_rows(rows: int, parts: int) -> List[Tuple[int, int]]:
    """(start, stop) rows of ``torch.chunk(rows, parts)``: pieces of ceil(rows/parts)."""
    step = -(-rows // parts)
    return [(a, min(a + step, rows)) for a in range(0, rows, step)]


def buckets(shapes: Sequence[Tuple[int, ...]], limit_bytes: int = DP_BUFFER_BYTES) -> List[List[int]]:
    """Indices of consecutive tensors grouped into buckets of at most ``limit_bytes`` (fp32).

    Like torch's ``_take_tensors``: a tensor larger than the limit gets a bucket of its own.
    """
    out: List[List[int]] = []
    cur: List[int] = []
    cur_bytes = 0
    for k, shp in enumerate(shapes):
        nbytes = 4 * _numel(shp)
        if cur and cur_bytes + nbytes > limit_bytes:
            out.append(cur)
            cur, cur_bytes = [], 0
        cur.append(k)
        cur_bytes += nbytes
    if cur:
        out.append(cur)
    return out


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


class Ops:
    """Base of the fabric operations. Subclasses set ``fabric``/``timing`` and implement the
    transfer, clock and collective methods; DataParallel's flow is implemented here once."""

    fabric = "?"
    timing = "wall"
    #: Whether this fabric's "GPU memory" is host memory (sim, cpu): its buffers then come from
    #: the worker's caching allocator (host_blocks.py).
    memory_on_host = False
    #: Whether untimed warm-up runs change anything (not for modeled time).
    needs_warmup = True

    def __init__(self, local_gpus: Sequence[int], step_gpus: Sequence[int]):
        self.local_gpus = tuple(local_gpus)
        self.step_gpus = tuple(step_gpus)

    # ------------------------------------------------------------------ buffers
    def is_local(self, gpu: int) -> bool:
        return gpu in self.local_gpus

    def rank_of(self, gpu: int) -> int:
        """Rank of the process driving ``gpu`` (collective rank = position in the step)."""
        return self.step_gpus.index(gpu)

    def device(self, gpu: int) -> torch.device:
        raise NotImplementedError

    def empty(self, gpu: int, shape) -> Optional[torch.Tensor]:
        """A float32 buffer on ``gpu``, or None when ``gpu`` belongs to another process."""
        if not self.is_local(gpu):
            return None
        if isinstance(shape, int):
            shape = (shape,)
        if self.memory_on_host:
            return HOST_BLOCKS.empty(tuple(shape))
        return torch.empty(tuple(shape), dtype=torch.float32, device=self.device(gpu))

    def host_empty(self, shape) -> torch.Tensor:
        """A host buffer (pinned where that exists) for staged copies and --self tests."""
        if isinstance(shape, int):
            shape = (shape,)
        if self.memory_on_host:
            return HOST_BLOCKS.empty(tuple(shape))
        return torch.empty(tuple(shape), dtype=torch.float32)

    def local_empty(self, gpu: int, shape) -> torch.Tensor:
        """:meth:`empty` on a GPU this process drives (None there would be a caller's bug)."""
        return local_buffer(self.empty(gpu, shape), gpu)

    def _flat(self, gpu: int, parts: Sequence[torch.Tensor], n: int) -> torch.Tensor:
        """DataParallel's flatten of a bucket (``n`` elements in all) on ``gpu``, as
        ``at::flatten_dense_tensors`` does it: a bucket of one tensor is that tensor viewed flat
        (no copy, so no on-device time either), several are concatenated into a new buffer."""
        if len(parts) == 1 and parts[0].is_contiguous():
            return parts[0].view(-1)
        self.local_cost(gpu, 4 * n)
        return torch.cat([p.reshape(-1) for p in parts], out=self.local_empty(gpu, n))

    # ------------------------------------------------------------------ transfers
    def peer_route(self, a: int, b: int) -> str:
        """"p2p" when a copy between the GPUs is direct peer DMA, "host" when it is staged."""
        return "p2p"

    def peer_access(self, a: int, b: int) -> Optional[bool]:
        return None

    def transfers(self, items: Sequence[Transfer], route: str = "p2p") -> None:
        """Copy every ``src`` (on src_gpu) into ``dst`` (on dst_gpu), all at once."""
        raise NotImplementedError

    def local_cost(self, gpu: int, nbytes: int) -> None:
        """Account an on-device copy of ``nbytes`` in a modeled clock (no-op for real clocks)."""

    def make_stage(self, count: int, src_gpu: int, dst_gpu: int):
        """Host buffers for :meth:`staged` (allocated outside the timed region)."""
        return self.host_empty(count)

    def staged(self, dst, src, dst_gpu: int, src_gpu: int, stage) -> None:
        """GPU -> host memory -> GPU: what a copy is when peer access is off."""
        raise NotImplementedError

    def h2d(self, dst, host_src, gpu: int) -> None:
        dst.copy_(host_src)

    def d2h(self, host_dst, src, gpu: int) -> None:
        host_dst.copy_(src)

    def d2d(self, dst, src, gpu: int) -> None:
        dst.copy_(src)

    # ------------------------------------------------------------------ DataParallel
    def dp_broadcast_coalesced(self, params: Dict[int, List[torch.Tensor]], shapes, master: int,
                               gpus: Sequence[int]) -> Dict[int, List[torch.Tensor]]:
        """Replicate ``params`` (on ``master``) to every GPU of ``gpus``: {gpu: tensors}."""
        out: Dict[int, List[torch.Tensor]] = {g: [] for g in gpus if self.is_local(g)}
        others = [g for g in gpus if g != master]
        route = self.collective_route()  # torch.cuda.nccl.broadcast under comm.broadcast_coalesced
        for idx in buckets(shapes):
            n = sum(_numel(shapes[k]) for k in idx)
            flat = None
            if self.is_local(master):
                flat = self._flat(master, [params[master][k] for k in idx], n)
            recv = {g: self.empty(g, n) for g in others}
            self.transfers([(recv[g], flat, g, master) for g in others], route)
            for g in others:
                got = recv[g]
                if got is not None:
                    out[g].extend(_unflatten(got, [shapes[k] for k in idx]))
                    self.local_cost(g, 4 * n)
        if self.is_local(master):
            out[master] = list(params[master])
        return out

    def dp_scatter(self, batch: Optional[torch.Tensor], shape, master: int,
                   gpus: Sequence[int]) -> Dict[int, torch.Tensor]:
        """Split ``batch`` (on ``master``) along dim 0 into one piece per GPU."""
        pieces = chunk_rows(shape[0], len(gpus))
        out: Dict[int, torch.Tensor] = {}
        items = []
        for g, (a, b) in zip(gpus, pieces):
            if g == master:
                if self.is_local(g):
                    out[g] = local_buffer(batch, master)[a:b]  # the master keeps a view of its piece
                continue
            dst = self.empty(g, (b - a,) + tuple(shape[1:]))
            src = local_buffer(batch, master)[a:b] if self.is_local(master) else None
            items.append((dst, src, g, master))
            if dst is not None:
                out[g] = dst
        others = [g for g in gpus if g != master]
        self.transfers(items, self.peer_route(master, others[0]) if others else "p2p")
        return out

    def dp_gather(self, pieces: Dict[int, torch.Tensor], shape, master: int,
                  gpus: Sequence[int]) -> Optional[torch.Tensor]:
        """Concatenate every GPU's piece along dim 0 into a new tensor on ``master``."""
        out = self.empty(master, shape)
        items = []
        for g, (a, b) in zip(gpus, chunk_rows(shape[0], len(gpus))):
            dst = out[a:b] if out is not None else None
            if g == master:
                if dst is not None:  # (when out is)
                    dst.copy_(pieces[g])
                    self.local_cost(master, 4 * dst.numel())
                continue
            items.append((dst, pieces.get(g), master, g))
        others = [g for g in gpus if g != master]
        self.transfers(items, self.peer_route(others[0], master) if others else "p2p")
        return out

    def dp_reduce_add_coalesced(self, grads: Dict[int, List[torch.Tensor]], shapes, master: int,
                                gpus: Sequence[int]) -> Optional[List[torch.Tensor]]:
        """Sum every GPU's gradients onto ``master`` (bucketed): the tensors on master or None."""
        result: List[torch.Tensor] = []
        others = [g for g in gpus if g != master]
        route = self.collective_route()  # torch.cuda.nccl.reduce under comm.reduce_add
        for idx in buckets(shapes):
            n = sum(_numel(shapes[k]) for k in idx)
            flat = {}
            for g in gpus:
                if self.is_local(g):
                    flat[g] = self._flat(g, [grads[g][k] for k in idx], n)
            recv = {g: self.empty(master, n) for g in others}
            self.transfers([(recv[g], flat.get(g), master, g) for g in others], route)
            if self.is_local(master):
                # The sum is a new tensor, as comm.reduce_add makes: the first other GPU's
                # buffer, received straight into it (the master's own added there: two operands,
                # the same bits as master + received), so a transfer that never happens leaves a
                # block whose last user poisoned it, never one still holding last sample's sum.
                total: Optional[torch.Tensor] = None
                for g in others:
                    got = local_buffer(recv[g], master)
                    if total is None:
                        total = got.add_(flat[master])
                    else:
                        total.add_(got)
                    self.local_cost(master, 4 * n)
                if total is None:  # no other GPU: the master's own gradients
                    total = flat[master]
                result.extend(_unflatten(total, [shapes[k] for k in idx]))
        return result if self.is_local(master) else None

    # ------------------------------------------------------------------ collectives
    # Each is the ``operation`` of an entry of the collective table (model/collectives.py), which
    # bench/suites.py calls as its ``result`` says: in place ``op(bufs)`` / ``op(bufs, root)``,
    # out of place ``op(outs, ins)``. ``bufs`` / ``outs`` / ``ins`` map each local GPU to its
    # tensor; rank = position in the step.
    def all_reduce(self, bufs: Dict[int, torch.Tensor]) -> None:
        raise NotImplementedError

    def all_reduce_op(self) -> str:
        """The reduction :meth:`all_reduce` asks for ("sum"; "avg" where a sum would run no
        kernel: one NCCL rank, fabrics/cpu.py DistMixin). Recorded as ``reduce_op``."""
        return "sum"

    def all_gather(self, outs: Dict[int, torch.Tensor], ins: Dict[int, torch.Tensor]) -> None:
        raise NotImplementedError

    def reduce_scatter(self, outs: Dict[int, torch.Tensor], ins: Dict[int, torch.Tensor]) -> None:
        raise NotImplementedError

    def broadcast(self, bufs: Dict[int, torch.Tensor], root: int) -> None:
        raise NotImplementedError

    def collective_route(self) -> str:
        return "p2p"

    # ------------------------------------------------------------------ clock
    def sync(self, gpus: Sequence[int]) -> None:
        """Wait until queued work on ``gpus`` is done (no-op on synchronous fabrics)."""

    def timed(self, run, gpus: Sequence[int], *, repeat: int, seed: int, sample: int) -> float:
        """Seconds per run of ``run`` (mean over ``repeat`` back-to-back runs)."""
        raise NotImplementedError

    def combine(self, seconds: float, wrong: int, first_bad: Optional[int]):
        """Combine one sample over the ranks of the step: (max time, summed wrong, first bad)."""
        return seconds, wrong, first_bad

    def extra(self, test: str, src: Optional[int], dst: Optional[int]) -> dict:
        """Facts recorded with every measurement of ``test`` (route, peer access...)."""
        return {}

    #: How :meth:`timed` takes its time, recorded with every measurement (``timing_method``).
    timing_method = ""

    def timing_facts(self) -> dict:
        """How the samples just taken were timed (recorded in the measurement's extra), and the
        start of a fresh count for the next measurement."""
        return {"timing_method": self.timing_method} if self.timing_method else {}

    def close(self) -> None:
        pass


#: DataParallel primitives PyTorch runs through torch.cuda.nccl (broadcast, reduce) when it is
#: built with NCCL, not through raw peer copies: their measurements are labelled path "nccl".
NCCL_DP_TESTS = ("dp.broadcast_coalesced", "dp.reduce_add")


def _unflatten(flat: torch.Tensor, shapes) -> List[torch.Tensor]:
    out, pos = [], 0
    for shp in shapes:
        n = _numel(shp)
        out.append(flat[pos:pos + n].view(tuple(shp)))
        pos += n
    return out
