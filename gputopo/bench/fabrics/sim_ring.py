"""NCCL's ring collectives written over a fabric's transfers, for the sim fabric.

Why a module of its own: the sim moves every collective's bytes with the same ``transfers``
(faults applied to what arrives, modeled time per ring step) that the peer copies use, and
these are the ring algorithms NCCL runs for two or more ranks: reduce-scatter (n - 1 steps of
send-to-next and add), all-gather (n - 1 steps of forwarding), all-reduce (the two in turn) and
a chained broadcast. Transfers issued in one ring step go together (the step takes the longest
of their times).
"""

from __future__ import annotations

from typing import Dict, List

import torch

from .base import Ops


class RingCollectives(Ops):
    """all_reduce, all_gather, reduce_scatter and broadcast as rings of ``self.transfers``."""

    def _ring_reduce_scatter(self, chunks: Dict[int, List[torch.Tensor]], route: str,
                             outs=None) -> None:
        """Ring reduce-scatter: afterwards rank r holds the sum of chunk r, in ``chunks`` (in
        place: all_reduce) or in ``outs`` (reduce_scatter, out of place as NCCL's: ``chunks``,
        the inputs, are only read; a rank's last chunk received is its own, summed into outs).
        Out of place, a rank receives straight into the buffer that becomes its partial sum (its
        output at the last step) and adds its own chunk there (two operands: the same bits as
        own + received): a transfer that never happens leaves the poisoned output, never a
        scratch block that may still hold the right sum from the sample before."""
        gs = self.step_gpus
        n = len(gs)
        acc = chunks if outs is None else {g: list(chunks[g]) for g in gs}
        for s in range(n - 1):
            items, adds = [], []
            for r, g in enumerate(gs):
                c = (r - s - 1) % n
                nxt = gs[(r + 1) % n]
                last = outs is not None and s == n - 2
                into = outs[nxt] if last else self.local_empty(nxt, chunks[nxt][c].numel())
                items.append((into, acc[g][c], nxt, g))
                adds.append((nxt, c, into))
            self.transfers(items, route)
            for g, c, into in adds:
                if outs is None:
                    acc[g][c].add_(into)
                else:
                    acc[g][c] = into.add_(acc[g][c])

    def _ring_all_gather(self, chunks: Dict[int, List[torch.Tensor]], route: str) -> None:
        """Ring all-gather in place: rank r starts with chunk r complete."""
        gs = self.step_gpus
        n = len(gs)
        for s in range(n - 1):
            items = []
            for r, g in enumerate(gs):
                c = (r - s) % n
                nxt = gs[(r + 1) % n]
                items.append((chunks[nxt][c], chunks[g][c], nxt, g))
            self.transfers(items, route)

    def all_reduce(self, bufs) -> None:
        n = len(self.step_gpus)
        chunks = {g: list(torch.tensor_split(bufs[g], n)) for g in self.step_gpus}
        route = self.collective_route()
        self._ring_reduce_scatter(chunks, route)
        self._ring_all_gather(chunks, route)

    def all_gather(self, outs, ins) -> None:
        n = len(self.step_gpus)
        chunks = {g: list(torch.tensor_split(outs[g], n)) for g in self.step_gpus}
        for r, g in enumerate(self.step_gpus):
            chunks[g][r].copy_(ins[g])
        self._ring_all_gather(chunks, self.collective_route())

    def reduce_scatter(self, outs, ins) -> None:
        n = len(self.step_gpus)
        chunks = {g: list(torch.tensor_split(ins[g].reshape(-1), n)) for g in self.step_gpus}
        if n == 1:  # nothing to reduce with: the input is the output
            outs[self.step_gpus[0]].copy_(chunks[self.step_gpus[0]][0])
        self._ring_reduce_scatter(chunks, self.collective_route(), outs=outs)

    def broadcast(self, bufs, root: int) -> None:
        gs = list(self.step_gpus)
        k = gs.index(root)
        chain = gs[k:] + gs[:k]  # root -> next -> ... (NCCL's chain, one hop per rank)
        route = self.collective_route()
        for a, b in zip(chain, chain[1:]):
            self.transfers([(bufs[b], bufs[a], b, a)], route)
