"""What every benchmark Spec of :mod:`gputopo.bench.suites` builds its buffers from.

Why a module of its own: the peer-copy, DataParallel and collective specs all fill inputs with
seeded patterns, compute the exact expected outputs, and poison outputs before they are reused;
these helpers do that once. The seeds differ per role so no buffer can pass for another.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

import torch

from .patterns import Expected, expected, expected_sum, fill_pattern, fill_small
from .verification import compare, merge, poison

# Seeds of the patterns, one per role, so no buffer can pass for another.
SEED_SRC, SEED_SRC2, SEED_PARAM, SEED_BATCH, SEED_OUT = 11, 23, 37, 41, 53
SEED_RANK = (101, 211)

#: Rows of the batch DataParallel scatters (a typical per-step batch).
DP_BATCH_ROWS = 64


def _count(size_bytes: int) -> int:
    return max(1, size_bytes // 4)


def param_shapes(count: int) -> List[Tuple[int, ...]]:
    """A model-like parameter set of exactly ``count`` fp32 elements: weights of 1/2, 1/4, 1/8,
    1/16 of the total (2-D when they divide into rows of 64) and the rest as a last tensor."""
    shapes: List[Tuple[int, ...]] = []
    used = 0
    for div in (2, 4, 8, 16):
        n = count // div
        if n <= 0:
            continue
        shapes.append((n // 64, 64) if n % 64 == 0 else (n,))
        used += n
    if count - used > 0:
        shapes.append((count - used,))
    return shapes


def batch_shape(count: int) -> Tuple[int, int]:
    """(rows, columns) of the batch DataParallel scatters: 64 rows when the size allows, else
    one element per row (a batch of 1 row stays whole on the master, as DataParallel does)."""
    rows = DP_BATCH_ROWS if count % DP_BATCH_ROWS == 0 else count
    return rows, count // rows


def _patterned(ops, gpu, shapes, seed, small=False, first_offset=0) -> Optional[List[torch.Tensor]]:
    """Tensors of ``shapes`` on ``gpu`` whose elements continue one pattern across the list."""
    if not ops.is_local(gpu):
        return None
    out, off = [], first_offset
    for shp in shapes:
        t = ops.empty(gpu, shp)
        (fill_small if small else fill_pattern)(t, seed, off)
        out.append(t)
        off += t.numel()
    return out


def _patterned_here(ops, gpu, shapes, seed) -> List[torch.Tensor]:
    """:func:`_patterned` on a GPU this process drives (None there would be a caller's bug)."""
    out = _patterned(ops, gpu, shapes, seed)
    if out is None:
        raise RuntimeError(f"GPU {gpu} is not driven by this process")
    return out


def _expect(ops, gpu, n, seed, offset=0) -> Optional[Expected]:
    """The copy pattern as expected on ``gpu`` (None when ``gpu`` is another process's)."""
    return expected(n, seed, ops.device(gpu), offset) if ops.is_local(gpu) else None


def _check_list(actual: List[torch.Tensor], expected: List[Expected], poison_after: bool = False):
    return merge((*compare(a, e, poison_after), e.numel()) for a, e in zip(actual, expected))


class _Holder:
    """Outputs the timed op allocated; poisoned before they are dropped, so the allocator can
    never hand the next sample a block that already holds the right answer. ``fresh`` picks
    the newly allocated outputs out of the op's result (never the caller's own inputs, which
    DataParallel returns as the master's share)."""

    def __init__(self, fresh):
        self.value: Any = None  # what the timed op returned (tensors, a list or a dict of them)
        self.fresh = fresh

    def drop(self):
        v, self.value = self.value, None
        if v is not None:
            for t in _tensors(self.fresh(v)):
                poison(t)


def _tensors(v):
    if v is None:
        return []
    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, dict):
        v = list(v.values())
    out = []
    for x in v:
        out.extend(_tensors(x))
    return out


def _local(ops, gpus, first=None) -> Tuple[int, ...]:
    """Local GPUs of the step with ``first`` (the one whose stream starts the clock) first."""
    loc = [g for g in gpus if ops.is_local(g)]
    if first is not None and first in loc:
        loc.remove(first)
        loc.insert(0, first)
    return tuple(loc)


def _sum_expected(ops, gpu, shapes, seeds) -> List[Expected]:
    """Exact elementwise sum of the small patterns of ``seeds`` laid out over ``shapes``: views
    of one cached, read-only sum (never write to them)."""
    n = sum(_numel(shp) for shp in shapes)
    flat = expected_sum(n, tuple(seeds), ops.device(gpu))
    out, off = [], 0
    for shp in shapes:
        k = _numel(shp)
        out.append(flat[off:off + k].view(shp))
        off += k
    return out


def _numel(shape) -> int:
    k = 1
    for d in shape:
        k *= int(d)
    return k
