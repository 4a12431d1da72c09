"""A caching allocator for the host tensors that stand in for GPU memory (sim and cpu fabrics).

Why: a worker allocates the same large buffers over and over (every measurement's source,
destination and expected copy, every sample's DataParallel outputs and ring chunks). Left to
glibc, a freed 256 MiB block was split by the small allocations that followed, the next
256 MiB request grew the heap into fresh pages, and the kernel faulted in and zeroed every
4 KiB page again: 3.2 million page faults in one default-preset pair, a sixth of its CPU
time. PyTorch's CUDA caching allocator keeps freed GPU blocks for reuse; this does the same
for the CPU tensors that play GPU memory here, for blocks of ``MIN_BYTES`` and more (smaller
ones malloc reuses well: pooling them measured no faster).

A block is free again when no tensor uses its storage any more (the storage's use count,
kept by PyTorch for every tensor and view of it, is down to the pool's own reference), so a
block can never be handed out while a view of it is alive. A reused block holds what its last
user left, exactly as a block malloc (or the CUDA allocator) hands back does: outputs are
poisoned before every sample and before they are dropped (spec.py, suites.py's _Holder), so
no stale output can pass for right. A request takes the smallest idle block that holds it,
up to ``FIT`` times its size, so the blocks of a 256 MiB measurement serve the 32 and 128 MiB
buffers after it. Idle blocks are kept up to ``BLOCKS_PER_SIZE`` times the largest block asked
for, the memory the size check already reserves per worker (memory_check.BUFFERS_PER_GPU x 2
GPUs); beyond it the least recently used idle ones go.
Without the private use-count function (another torch), every request is a plain torch.empty.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Optional, Tuple

import torch

from ..memory_check import BUFFERS_PER_GPU

#: Requests below this many bytes are plain allocations (malloc reuses small blocks well).
MIN_BYTES = 32 << 20
#: A request may take an idle block up to this many times its size (a 32 MiB DataParallel
#: share the block of a 256 MiB copy): with exact sizes only, a worker's pool held its 64 and
#: 256 MiB blocks idle while the 32 and 128 MiB shares of the same sizes got blocks of their
#: own (1.9 GB pooled for 1 GB ever busy at once; twice the system time faulting them in).
FIT = 8
#: Idle blocks kept: at most this many times the largest block requested so far.
BLOCKS_PER_SIZE = 2 * BUFFERS_PER_GPU
_use_count = getattr(torch._C, "_storage_Use_Count", None)


class HostBlocks:
    """Float32 CPU tensors carved from reusable storages, one storage per tensor (its first
    bytes: a block may be larger than the tensor)."""

    def __init__(self) -> None:
        # every block, busy or idle, least recently handed out first: id -> (bytes, storage)
        self._blocks: "OrderedDict[int, Tuple[int, torch.UntypedStorage]]" = OrderedDict()
        self._largest = 0
        self.reused = 0  # counts, for the tests
        self.allocated = 0

    @property
    def pooled_bytes(self) -> int:
        return sum(n for n, _ in self._blocks.values())

    def empty(self, shape: Tuple[int, ...]) -> torch.Tensor:
        """An uninitialised float32 tensor of ``shape`` (contiguous), like torch.empty."""
        nbytes = 4 * math.prod(int(d) for d in shape)
        if _use_count is None or nbytes < MIN_BYTES:
            return torch.empty(shape, dtype=torch.float32)
        self._largest = max(self._largest, nbytes)
        storage = self._idle(nbytes)
        if storage is None:
            self._trim(nbytes)
            storage = torch.UntypedStorage(nbytes)
            self._blocks[id(storage)] = (nbytes, storage)
            self.allocated += 1
        else:
            self.reused += 1
            self._blocks.move_to_end(id(storage))
        flat = torch.empty(0, dtype=torch.float32).set_(storage, 0, (nbytes // 4,), (1,))
        return flat.view(tuple(shape))

    @staticmethod
    def _free(storage: torch.UntypedStorage) -> bool:
        return _use_count is not None and _use_count(storage._cdata) == 1

    def _idle(self, nbytes: int) -> Optional[torch.UntypedStorage]:
        """The smallest idle block that holds ``nbytes`` and is at most ``FIT`` times as large."""
        fits = [(n, s) for n, s in self._blocks.values()
                if nbytes <= n <= FIT * nbytes and self._free(s)]
        return min(fits, key=lambda ns: ns[0])[1] if fits else None

    def _trim(self, incoming: int) -> None:
        """Drop least recently used idle blocks while the pool would exceed its bound."""
        bound = BLOCKS_PER_SIZE * self._largest
        total = self.pooled_bytes + incoming
        for key, (nbytes, s) in list(self._blocks.items()):
            if total <= bound:
                break
            if self._free(s):
                del self._blocks[key]
                total -= nbytes


#: The pool of this worker process (a worker serves one fabric for its whole life).
HOST_BLOCKS = HostBlocks()
