"""Check buffers bit for bit against their expected patterns, and poison outputs between samples
(runs in worker processes).

Verification compares integer views (:func:`compare`), so -0.0 vs 0.0 or a NaN payload is a
wrong element too; it returns the number of wrong elements and the first bad index.
Outputs are filled with :data:`POISON` before each timed sample, so a copy that did not happen
cannot pass by leaving the previous sample's data in place. ``compare(..., poison_after=True)``
poisons what it has just checked (on the CPU while it is still in cache), and :func:`poison`
then skips a tensor nothing has written to since.

Why a module of its own: the patterns (:mod:`gputopo.bench.patterns`) say what a buffer must
hold; this says whether it does, and it is where a sim run spends a third of its time.
"""

from __future__ import annotations

import weakref
from typing import Dict, Optional, Tuple

import torch

from .patterns import Expected, Periodic
from gputopo.workers.processes import libc

#: Value written to outputs before every timed sample; never produced by either pattern.
POISON = -1.0
#: POISON's bits as an int32 (what compare() writes into the int32 view it reads).
_POISON_BITS = int(torch.tensor([POISON]).view(torch.int32).item())


def poison(t: torch.Tensor) -> torch.Tensor:
    """Fill ``t`` with :data:`POISON`, unless :func:`compare` poisoned this very tensor after
    checking it and nothing has written to it since (its version counter, which every in-place
    write through it or any view of its storage's tensor bumps, is unchanged)."""
    entry = _poisoned.pop(id(t), None)
    if entry is not None and entry[0]() is t and t._version == entry[1]:
        return t
    return t.fill_(POISON)


#: Tensors :func:`compare` left poisoned: id -> (weak reference, version counter then).
_poisoned: Dict[int, tuple] = {}


def _mark_poisoned(t: torch.Tensor) -> None:
    if len(_poisoned) > 1024:  # outputs dropped without a poison() call after their last check
        for key in [k for k, (ref, _) in _poisoned.items() if ref() is None]:
            del _poisoned[key]
    _poisoned[id(t)] = (weakref.ref(t), t._version)


def _memcmp():
    """libc's memcmp, or None: a CPU bit-exact equality test with one read of each buffer
    (torch.equal on int32 views reads them at less than half the speed)."""
    import ctypes

    try:
        fn = libc().memcmp
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    return fn


_MEMCMP = _memcmp()


#: Elements per piece of a CPU comparison (1 MiB): a piece of an expected period stays in cache
#: while every repeat of it in the actual buffer is compared with it, and a piece that differs
#: is counted while both sides are still in cache.
_PIECE = 1 << 18


def compare(actual: torch.Tensor, expected: Expected,
            poison_after: bool = False) -> Tuple[int, Optional[int]]:
    """Bit-exact comparison of a float32 tensor with its expected result (a tensor, or a
    :class:`Periodic`): (wrong element count, first bad index). Integer views are compared, so
    -0.0 vs 0.0 or another NaN payload is a wrong element too.

    ``poison_after``: fill ``actual`` with :data:`POISON` once checked, for an output the next
    sample poisons anyway (:func:`poison` then skips it). On the CPU each piece is poisoned
    right after its comparison, while it is in cache: a separate pass over a 256 MiB output
    read every line from memory again before writing it, a tenth of a sim pair's CPU time."""
    flat = actual.reshape(-1)
    if flat.numel() != expected.numel():
        raise ValueError(f"size mismatch: {flat.numel()} elements vs {expected.numel()} expected")
    fused = (poison_after and actual.is_contiguous()  # so flat is a view of actual
             and flat.device.type == "cpu" and expected.device.type == "cpu")
    result = _compare(flat, expected, fused)
    if poison_after:
        if not fused:
            actual.fill_(POISON)
        _mark_poisoned(actual)
    return result


def _compare(flat: torch.Tensor, expected: Expected, fused: bool) -> Tuple[int, Optional[int]]:
    if flat.device.type == "cpu" and expected.device.type == "cpu":
        return _compare_cpu(flat.view(torch.int32), expected, fused)
    if isinstance(expected, Periodic):
        return merge((*compare(flat[pos:pos + e.numel()], e), e.numel())
                     for pos, e in expected.segments())
    a, e = flat.view(torch.int32), expected.reshape(-1).view(torch.int32)
    if torch.equal(a, e):
        return 0, None
    ne = a != e  # on the GPU: a mask, its count and its first set index; no index list
    wrong = int(torch.count_nonzero(ne).item())
    first = int(torch.argmax(ne.to(torch.uint8)).item())
    return wrong, first


def _compare_cpu(a: torch.Tensor, expected: Expected,
                 poison_after: bool = False) -> Tuple[int, Optional[int]]:
    """:func:`compare` on the CPU (the sim and cpu fabrics' "GPUs"), a piece at a time.

    Why pieces: the run is memory-bound, and a 256 MiB result against its 64 MiB period read
    the period from memory four times; taken a period piece at a time, with every repeat of
    it in ``a`` compared while it is in cache, the period is read once. Equal pieces cost one
    libc memcmp; a piece that differs (on a corrupting pair, every piece) is counted with numpy
    while both sides are still in cache, instead of a mask of the whole buffer written out and
    read back (torch's ``nonzero(a != e)``, 6x slower still, was a third of a sim bench's time).
    ``poison_after``: each piece of ``a`` (contiguous: the caller checks) is then poisoned.
    """
    import numpy as np

    a, n = a.contiguous(), a.numel()
    if isinstance(expected, Periodic):
        e, start = expected.period.reshape(-1).view(torch.int32), expected.offset
    else:
        e, start = expected.reshape(-1).view(torch.int32), 0
    e = e.contiguous()
    period = max(1, e.numel())
    a_np, e_np = a.numpy(), e.numpy()
    a_ptr, e_ptr = a.data_ptr(), e.data_ptr()
    wrong, first = 0, None
    repeats = (start + n - 1) // period + 1 if n else 0
    for c0 in range(0, period, _PIECE):
        c1 = min(period, c0 + _PIECE)
        for j in range(repeats):  # a[i] holds period[(start + i) % period]
            lo = c0 - start + j * period
            i0, i1 = max(lo, 0), min(lo + c1 - c0, n)
            if i0 >= i1:
                continue
            k0 = c0 + i0 - lo
            m = i1 - i0
            if _MEMCMP is None or _MEMCMP(a_ptr + 4 * i0, e_ptr + 4 * k0, 4 * m) != 0:
                mask = _scratch_mask(m)
                np.not_equal(a_np[i0:i1], e_np[k0:k0 + m], out=mask)
                w = int(np.count_nonzero(mask))
                if w:
                    wrong += w
                    f = i0 + int(mask.argmax())
                    first = f if first is None else min(first, f)
            if poison_after:
                a_np[i0:i1] = _POISON_BITS
    return wrong, first


_mask: list = []


def _scratch_mask(n: int):
    """A bool array of ``n`` elements, reused between calls (a fresh one per piece would be
    allocated, and page-faulted in, over and over)."""
    import numpy as np

    if not _mask or _mask[0].size < n:
        _mask[:] = [np.empty(n, dtype=bool)]
    return _mask[0][:n]


def merge(results) -> Tuple[int, Optional[int]]:
    """Combine (wrong, first_bad) of consecutive pieces into one, indices counted across them.

    ``results`` yields (wrong, first_bad, n_elements) per piece, in order.
    """
    wrong, first, base = 0, None, 0
    for w, f, n in results:
        if w and first is None:
            first = base + f
        wrong += w
        base += n
    return wrong, first
