"""Fill buffers with known patterns and verify them bit for bit (runs in worker processes).

Two patterns, both float32 values that are exact small integers, so they survive any copy and
any fp32 sum of a few of them exactly:

- :func:`fill_pattern` -- distinct-looking values (``(k*A + seed) mod 2**24``, a permutation of
  the 24-bit residues for odd A): every element differs from its neighbours, so a shifted,
  stale or partly written buffer is caught. For copies.
- :func:`fill_small` -- values in 0..1023, so sums over ranks stay exact in fp32 (nccl-tests
  chooses its inputs the same way). For reduce_add and collectives.

Checking buffers against them, and poisoning outputs between samples, is
:mod:`gputopo.bench.verification`'s.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Dict, Tuple, Union

import torch

from .memory_check import HOST_CACHE_BYTES

_A = 1103515245  # odd: k -> k*A mod 2**24 is a permutation
_MASK24 = 0xFFFFFF
#: Elements generated per chunk (bounds :func:`_raw`'s int32 table to 16 MiB).
_CHUNK = 4 << 20


#: Row length of :func:`_raw`'s table.
_ROW = 4096


def _raw(n: int, seed: int, offset: int, device) -> torch.Tensor:
    """int32 tensor of (k * A + seed) mod 2**24 for k in [offset, offset + n).

    Computed as a table, k = q * _ROW + r: (r * A + seed) mod 2**24 for one row plus
    (q * _ROW * A) mod 2**24 for each row, masked to 24 bits. Both terms are below 2**24, so
    their int32 sum cannot overflow and the mask gives exactly the definition, in two int32
    passes over the elements instead of five int64 ones (an int64 arange, multiply, add, mask
    and narrowing: generating the patterns was a tenth of a sim pair's CPU time)."""
    q0, q1 = offset // _ROW, -(-(offset + n) // _ROW)
    row = ((torch.arange(_ROW, dtype=torch.int64, device=device) * _A + seed)
           & _MASK24).to(torch.int32)
    starts = ((torch.arange(q0, q1, dtype=torch.int64, device=device) * (_ROW * _A))
              & _MASK24).to(torch.int32)
    table = torch.add(row[None, :], starts[:, None]).view(-1)
    table.bitwise_and_(_MASK24)
    first = offset - q0 * _ROW
    return table[first:first + n]


#: Generated patterns kept for reuse (the same inputs and expected results recur for every
#: size, direction and test): at most this many bytes per GPU, and per worker process in host
#: memory (the sim and cpu fabrics' "GPUs"; HOST_CACHE_BYTES, in memory_check.py: the parent
#: checks sizes against memory without importing torch). A 256 MiB step needs three 64 MiB
#: periods (copy values, small values, the ranks' sum: every seed's pattern is a rotation of
#: its kind's period, see :func:`_base`) and the shorter patterns of the step's other sizes.
_CACHE_BYTES = 256 << 20
_cache: "OrderedDict[tuple, torch.Tensor]" = OrderedDict()
_cache_bytes: Dict[str, int] = {}


#: The patterns repeat after this many elements (k -> k*A mod 2**24 has period 2**24).
_PERIOD = 1 << 24
#: Up to this many elements a pattern is generated (and cached) at its own length; longer ones
#: are copied out of their cached period (64 MiB), since generating one element costs an
#: int64 multiply-add pass and four times the bytes, copying it one read and one write (a
#: 256 MiB pattern was a quarter of a default-preset sim bench's CPU time).
_DIRECT_MAX = 4 << 20


def _generate(n: int, seed: int, offset: int, small: bool, device) -> torch.Tensor:
    """Elements [offset, offset + n) of the pattern, computed (n <= _PERIOD)."""
    out = torch.empty(n, dtype=torch.float32, device=device)
    for start in range(0, n, _CHUNK):
        m = min(_CHUNK, n - start)
        r = _raw(m, seed, offset + start, device)
        if small:
            r.bitwise_right_shift_(14)  # 10 high bits of the 24: 0..1023 (r is scratch)
        out[start:start + m].copy_(r)  # int -> float32 is exact below 2**24
    return out


def _period(seed: int, small: bool, device) -> torch.Tensor:
    """One whole period of the pattern (elements 0 .. 2**24 - 1), cached."""
    return _cached((_PERIOD, seed, 0, small, str(device)),
                   lambda: _generate(_PERIOD, seed, 0, small, device))


#: A's inverse modulo 2**24: k * A + seed = (k + seed * _A_INV) * A (mod 2**24).
_A_INV = pow(_A, -1, _MASK24 + 1)


def _base(seed: int, small: bool) -> Tuple[int, int]:
    """(seed of the period that ``seed``'s pattern is read from, index in it of the pattern's
    element 0).

    Why: (k * A + seed) mod 2**24 = ((k + seed * A^-1) * A) mod 2**24, so every seed's pattern
    is seed 0's rotated by seed * A^-1 elements (and the small values, its 10 high bits, too):
    one cached 64 MiB period of each kind serves every role's seed, where a period per seed
    (five copy roles, two ranks) was 448 MiB more for each sim worker to generate, page-fault
    in and keep. The values are the same by the definition: only where they are read from
    changes. With a period shortened below 2**24 (tests) a seed is not a rotation of another,
    and gets a period of its own."""
    if _PERIOD != _MASK24 + 1:
        return seed, 0
    return 0, (seed * _A_INV) & _MASK24


def _cached(key: tuple, make) -> torch.Tensor:
    hit = _cache.get(key)
    if hit is not None:
        _cache.move_to_end(key)
        return hit
    t = make()
    _remember(key, t)
    return t


def _segments(period: torch.Tensor, offset: int, n: int):
    """(position, view of ``period``) pieces that, laid end to end, are elements
    [offset, offset + n) of the sequence repeating ``period``."""
    pos, k = 0, offset % _PERIOD
    while pos < n:
        m = min(_PERIOD - k, n - pos)
        yield pos, period[k:k + m]
        pos, k = pos + m, 0


def _write_periodic(dst: torch.Tensor, period: torch.Tensor, offset: int) -> torch.Tensor:
    """Write elements [offset, offset + n) of a periodic sequence into 1-D ``dst``: rotated
    copies of ``period`` (one read and one write per element)."""
    for pos, piece in _segments(period, offset, dst.numel()):
        dst[pos:pos + piece.numel()].copy_(piece)
    return dst


def _periodic(n: int, period: torch.Tensor, offset: int) -> Expected:
    """Elements [offset, offset + n) of a periodic sequence: a view of ``period`` when they lie
    within one period, else a :class:`Periodic` (never written out)."""
    k = offset % _PERIOD
    if k + n <= _PERIOD:
        return period[k:k + n]
    return Periodic(period, k, n)


class Periodic:
    """Elements [offset, offset + n) of a sequence that repeats ``period``, not written out:
    what an expected result longer than one period is. Read-only, like the cached period.

    Why not a tensor: a 256 MiB expected result is four copies of its 64 MiB period, and
    writing it out cost every 256 MiB measurement a pass over a block of memory of its own
    (fresh pages for each role's result, faulted in and zeroed by the kernel), while
    :func:`compare` can read it a period at a time (:meth:`segments`). Supports what the suites
    do with an expected result: ``numel()``, ``[a:b]`` slices (a view of the period when they
    fit in one) and ``view(shape)``.
    """

    def __init__(self, period: torch.Tensor, offset: int, n: int, shape=None):
        self.period, self.offset, self.n = period, offset % _PERIOD, int(n)
        self.shape = tuple(shape) if shape is not None else (self.n,)

    @property
    def device(self) -> torch.device:
        return self.period.device

    def numel(self) -> int:
        return self.n

    def __getitem__(self, sl: slice):
        start, stop, step = sl.indices(self.n)
        if step != 1:
            raise ValueError("a periodic expected result is sliced with step 1 only")
        return _periodic(max(0, stop - start), self.period, self.offset + start)

    def view(self, *shape) -> "Periodic":
        dims = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        if math.prod(int(d) for d in dims) != self.n:
            raise ValueError(f"shape {dims} does not hold {self.n} elements")
        return Periodic(self.period, self.offset, self.n, dims)

    def segments(self):
        """(position, view of the period) pieces that, laid end to end, are the sequence."""
        return _segments(self.period, self.offset, self.n)

    def materialize(self) -> torch.Tensor:
        """The sequence written out (for tests, and callers that need a tensor)."""
        out = torch.empty(self.n, dtype=self.period.dtype, device=self.period.device)
        return _write_periodic(out, self.period, self.offset).view(self.shape)


#: What an expected result is: a tensor, or a long pattern left periodic.
Expected = Union[torch.Tensor, Periodic]


def _pattern(n: int, seed: int, offset: int, small: bool, device) -> Expected:
    """The pattern as a 1-D float32 tensor on ``device``, or a :class:`Periodic` when it spans
    a period's end (read-only either way: it may be cached). Out of its kind's cached period
    when ``n`` is large or that period is cached already (a slice of it costs nothing), else
    generated at its own length and cached."""
    k = offset % _PERIOD
    base_seed, shift = _base(seed, small)
    if (n <= _DIRECT_MAX and k + n <= _PERIOD
            and (_PERIOD, base_seed, 0, small, str(device)) not in _cache):
        return _cached((n, seed, k, small, str(device)),
                       lambda: _generate(n, seed, k, small, device))
    return _periodic(n, _period(base_seed, small, device), k + shift)


def _remember(key: tuple, t: torch.Tensor) -> None:
    """Keep ``t`` under ``key``, dropping the device's oldest entries beyond _CACHE_BYTES."""
    nbytes = 4 * t.numel()
    dev = key[4]
    _cache[key] = t
    _cache_bytes[dev] = _cache_bytes.get(dev, 0) + nbytes
    while _cache_bytes[dev] > (HOST_CACHE_BYTES if dev == "cpu" else _CACHE_BYTES):
        for k in _cache:  # oldest entry of this device
            if k[4] == dev:
                old = _cache.pop(k)
                _cache_bytes[dev] -= 4 * old.numel()
                break


def _fill(t: torch.Tensor, seed: int, offset: int, small: bool) -> torch.Tensor:
    flat = t.view(-1)
    src = _pattern(t.numel(), seed, offset, small, t.device)
    if isinstance(src, Periodic):  # straight from the period, without a temporary of n elements
        _write_periodic(flat, src.period, src.offset)
    else:
        flat.copy_(src)
    return t


def fill_pattern(t: torch.Tensor, seed: int, offset: int = 0) -> torch.Tensor:
    """Fill contiguous float32 ``t`` with the copy pattern; element k gets index ``offset + k``."""
    return _fill(t, seed, offset, small=False)


def fill_small(t: torch.Tensor, seed: int, offset: int = 0) -> torch.Tensor:
    """Fill contiguous float32 ``t`` with small integers 0..1023 (exact in fp32 sums)."""
    return _fill(t, seed, offset, small=True)


def expected(n: int, seed: int, device, offset: int = 0, small: bool = False) -> Expected:
    """The pattern itself, read-only (shared from the cache: never write to it): a 1-D tensor,
    or a :class:`Periodic` when it spans more than one period."""
    return _pattern(n, seed, offset, small, device)


def expected_sum(n: int, seeds: Tuple[int, ...], device) -> Expected:
    """Elementwise sum of the small patterns of ``seeds`` over ``n`` elements (exact in fp32):
    what a reduction of ranks filled with :func:`fill_small` must give. Read-only, cached like
    the patterns (an all_reduce's and a reduce_add's expected result recur for every pair);
    periodic like them, so a long one is a :class:`Periodic` of its summed period."""
    def total(m: int) -> torch.Tensor:
        out = torch.empty(m, dtype=torch.float32, device=device)
        _fill(out, seeds[0], 0, True)
        for s in seeds[1:]:
            part = _pattern(m, s, 0, True, device)
            if isinstance(part, Periodic):
                for pos, piece in part.segments():
                    out[pos:pos + piece.numel()] += piece
            else:
                out += part
        return out

    if n <= _DIRECT_MAX:
        return _cached((n, ("sum",) + tuple(seeds), 0, True, str(device)), lambda: total(n))
    period = _cached((_PERIOD, ("sum",) + tuple(seeds), 0, True, str(device)),
                     lambda: total(_PERIOD))
    return _periodic(n, period, 0)
