"""torch.nn.DataParallel's data flow over two GPUs, rebuilt from its documented steps on a transport.

Without CUDA, ``torch.nn.parallel.comm`` refuses CPU tensors and ``nn.DataParallel`` just calls
the module (docs/architecture.md), so on the sim and cpu fabrics the flow is reproduced step by step, with
every inter-GPU transfer going through ``transport.copy`` so that a simulated link's faults hit
the very bytes DataParallel would move. One forward/backward does, as DataParallel does:

1. **replicate**: the parameters (flattened into one buffer, as ``broadcast_coalesced`` does) and
   buffers are broadcast from device[0] to device[1]. Device[0]'s replica uses the master
   tensors themselves.
2. **scatter**: the input is split along dim 0 into contiguous ``torch.chunk`` pieces
   (batch 10 -> [5, 5], batch 9 -> [5, 4]); device[1]'s piece is copied over.
3. **parallel_apply**: each replica runs the module on its piece.
4. **gather**: the outputs are copied to device[0] and concatenated; the loss is computed there.
5. **backward**: gather's backward scatters the output gradient back to device[1]; broadcast's
   backward copies device[1]'s parameter gradients to device[0] where they are added to
   device[0]'s (``reduce_add``), so the master ``.grad`` is what DataParallel leaves there.

Paths, as a CUDA build of PyTorch takes them: scatter and gather are raw tensor copies
(``Tensor.to``/``copy_``), which are peer-to-peer DMA whenever CUDA allows peer access; the
broadcast (``broadcast_coalesced``) and the gradient reduction (``reduce_add``) go through
``torch.cuda.nccl`` when PyTorch is built with NCCL, hence over the path NCCL picks for the pair.
Both paths are parameters (``copy_path``, ``collective_path``) and are recorded with the result.

The autograd Functions below carry the transfers both ways, so ``loss.backward()`` on the
gathered output reproduces DataParallel's gradient flow, faulty transfers included.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch.func import functional_call

from .job import split_sizes
from .transport import Transport


def _flatten(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    if not tensors:
        return torch.empty(0)
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def _unflatten(flat: torch.Tensor, like: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    out, offset = [], 0
    for t in like:
        n = t.numel()
        out.append(flat[offset:offset + n].view(t.shape).clone())
        offset += n
    return out


class _Broadcast(torch.autograd.Function):
    """Forward: copy the flattened parameters src -> dst. Backward: copy dst's gradients back to
    src (autograd then adds them to src's own: reduce_add)."""

    @staticmethod
    def forward(ctx, transport, src, dst, path, *params):
        ctx.transport, ctx.src, ctx.dst, ctx.path = transport, src, dst, path
        ctx.shapes = [p.shape for p in params]
        moved = transport.copy(_flatten(params), src, dst, path=path)
        return tuple(_unflatten(moved, params))

    @staticmethod
    def backward(ctx, *grads):
        filled = [g if g is not None else torch.zeros(s) for g, s in zip(grads, ctx.shapes)]
        moved = ctx.transport.copy(_flatten(filled), ctx.dst, ctx.src, path=ctx.path)
        return (None, None, None, None) + tuple(_unflatten(moved, filled))


class _Gather(torch.autograd.Function):
    """Forward: copy dst's output to src and concatenate along dim 0 after src's own output.
    Backward: the output gradient is scattered back, dst's piece copied over (a raw copy)."""

    @staticmethod
    def forward(ctx, transport, src, dst, path, out_src, out_dst):
        ctx.transport, ctx.src, ctx.dst, ctx.path = transport, src, dst, path
        ctx.n_src = out_src.shape[0]
        moved = transport.copy(out_dst.detach().contiguous(), dst, src, path=path)
        return torch.cat([out_src.detach(), moved], dim=0)

    @staticmethod
    def backward(ctx, grad):
        g_src = grad[:ctx.n_src]
        g_dst = ctx.transport.copy(grad[ctx.n_src:].contiguous(), ctx.src, ctx.dst, path=ctx.path)
        return None, None, None, None, g_src, g_dst


class DataParallelFlow:
    """DataParallel over ``devices`` = (device0, device1) (NVML indices) for a module on device0.

    ``forward(x)`` returns the gathered output on device0; after ``loss.backward()`` the module's
    parameters hold DataParallel's gradients. ``split_sizes`` is how the last batch was split.
    ``on_replica_output(k, output)`` (optional) sees replica k's output before the gather (the
    self-test hook for NaN injection uses it).
    """

    def __init__(self, module: torch.nn.Module, devices: Tuple[int, int], transport: Transport,
                 copy_path: str = "p2p", collective_path: str = "p2p",
                 on_replica_output: Optional[Callable[[int, torch.Tensor], torch.Tensor]] = None):
        if len(devices) != 2 or devices[0] == devices[1]:
            raise ValueError(f"DataParallelFlow needs two different devices, got {devices}")
        self.module = module
        self.devices = tuple(devices)
        self.transport = transport
        self.copy_path = copy_path
        self.collective_path = collective_path
        self.on_replica_output = on_replica_output
        self.split_sizes: List[int] = []

    @property
    def paths(self) -> Dict[str, str]:
        return {"broadcast": self.collective_path, "scatter": self.copy_path,
                "gather": self.copy_path, "reduce_add": self.collective_path}

    def _replicas(self) -> List[Dict[str, torch.Tensor]]:
        """Parameter/buffer dicts for each device; device0 holds the master tensors."""
        src, dst = self.devices
        names = [n for n, _ in self.module.named_parameters()]
        params = [p for _, p in self.module.named_parameters()]
        buf_names = [n for n, _ in self.module.named_buffers()]
        bufs = [b for _, b in self.module.named_buffers()]
        master: Dict[str, torch.Tensor] = dict(zip(names, params))
        master.update(zip(buf_names, bufs))
        copies = _Broadcast.apply(self.transport, src, dst, self.collective_path, *params)
        replica = dict(zip(names, copies))
        if bufs:  # buffers are broadcast too (no gradient); float buffers only move as bytes
            moved = [self.transport.copy(b.detach().clone(), src, dst, path=self.collective_path)
                     for b in bufs]
            replica.update(zip(buf_names, moved))
        return [master, replica]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        src, dst = self.devices
        sizes = split_sizes(x.shape[0], 2)
        self.split_sizes = sizes
        if len(sizes) < 2:  # a batch of one: DataParallel runs only device0's replica
            return self._apply(0, self._replicas()[0], x)
        chunks = x.chunk(2, dim=0)
        moved = self.transport.copy(chunks[1].contiguous(), src, dst, path=self.copy_path)
        states = self._replicas()
        out0 = self._apply(0, states[0], chunks[0])
        out1 = self._apply(1, states[1], moved)
        return _Gather.apply(self.transport, src, dst, self.copy_path, out0, out1)

    __call__ = forward

    def _apply(self, k: int, state: Dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        out = functional_call(self.module, state, (x,))
        if self.on_replica_output is not None:
            out = self.on_replica_output(k, out)
        return out
