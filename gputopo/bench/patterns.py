"""Fill buffers with known patterns and verify them bit for bit (runs in worker processes).

Two patterns, both float32 values that are exact small integers, so they survive any copy and
any fp32 sum of a few of them exactly:

- :func:`fill_pattern` -- distinct-looking values (``(k*A + seed) mod 2**24``, a permutation of
  the 24-bit residues for odd A): every element differs from its neighbours, so a shifted,
  stale or partly written buffer is caught. For copies.
- :func:`fill_small` -- values in 0..1023, so sums over ranks stay exact in fp32 (nccl-tests
  chooses its inputs the same way). For reduce_add and collectives.

Verification compares integer views (:func:`compare`), so -0.0 vs 0.0 or a NaN payload is a
wrong element too; it returns the number of wrong elements and the first bad index.
Outputs are filled with :data:`POISON` before each timed sample, so a copy that did not happen
cannot pass by leaving the previous sample's data in place.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Dict, Optional, Tuple

import torch

_A = 1103515245  # odd: k -> k*A mod 2**24 is a permutation
_MASK24 = 0xFFFFFF
#: Value written to outputs before every timed sample; never produced by either pattern.
POISON = -1.0
#: Elements generated per chunk (bounds the int64 scratch buffer to 32 MiB).
_CHUNK = 4 << 20


def _raw(n: int, seed: int, offset: int, device) -> torch.Tensor:
    """int32 tensor of ((k + offset) * A + seed) mod 2**24 for k in [0, n)."""
    idx = torch.arange(offset, offset + n, dtype=torch.int64, device=device)
    return ((idx * _A + seed) & _MASK24).to(torch.int32)


#: Generated patterns kept for reuse (the same inputs and expected results recur for every
#: size, direction and test): at most this many bytes per device, tensors up to _CACHE_ONE.
_CACHE_BYTES = 256 << 20
_CACHE_ONE = 64 << 20
_cache: "OrderedDict[tuple, torch.Tensor]" = OrderedDict()
_cache_bytes: Dict[str, int] = {}


#: The patterns repeat after this many elements (k -> k*A mod 2**24 has period 2**24).
_PERIOD = 1 << 24


def _generate(n: int, seed: int, offset: int, small: bool, device) -> torch.Tensor:
    out = torch.empty(n, dtype=torch.float32, device=device)
    for start in range(0, min(n, _PERIOD), _CHUNK):
        m = min(_CHUNK, n - start)
        r = _raw(m, seed, offset + start, device)
        if small:
            r = r >> 14  # 10 high bits of the 24: 0..1023
        out[start:start + m].copy_(r)  # int -> float32 is exact below 2**24
    for start in range(_PERIOD, n, _PERIOD):  # beyond one period: copies of the first (a 256 MiB
        m = min(_PERIOD, n - start)           # pattern costs one period's arithmetic, not four)
        out[start:start + m].copy_(out[:m])
    return out


def _pattern(n: int, seed: int, offset: int, small: bool, device) -> torch.Tensor:
    """The pattern as a 1-D float32 tensor on ``device``; cached when small enough."""
    nbytes = 4 * n
    if nbytes > _CACHE_ONE:
        return _generate(n, seed, offset, small, device)
    key = (n, seed, offset, small, str(device))
    hit = _cache.get(key)
    if hit is not None:
        _cache.move_to_end(key)
        return hit
    t = _generate(n, seed, offset, small, device)
    _remember(key, t)
    return t


def _remember(key: tuple, t: torch.Tensor) -> None:
    """Keep ``t`` under ``key``, dropping the device's oldest entries beyond _CACHE_BYTES."""
    nbytes = 4 * t.numel()
    dev = key[4]
    _cache[key] = t
    _cache_bytes[dev] = _cache_bytes.get(dev, 0) + nbytes
    while _cache_bytes[dev] > _CACHE_BYTES:
        for k in _cache:  # oldest entry of this device
            if k[4] == dev:
                old = _cache.pop(k)
                _cache_bytes[dev] -= 4 * old.numel()
                break


def _fill(t: torch.Tensor, seed: int, offset: int, small: bool) -> torch.Tensor:
    t.view(-1).copy_(_pattern(t.numel(), seed, offset, small, t.device))
    return t


def fill_pattern(t: torch.Tensor, seed: int, offset: int = 0) -> torch.Tensor:
    """Fill contiguous float32 ``t`` with the copy pattern; element k gets index ``offset + k``."""
    return _fill(t, seed, offset, small=False)


def fill_small(t: torch.Tensor, seed: int, offset: int = 0) -> torch.Tensor:
    """Fill contiguous float32 ``t`` with small integers 0..1023 (exact in fp32 sums)."""
    return _fill(t, seed, offset, small=True)


def expected(n: int, seed: int, device, offset: int = 0, small: bool = False) -> torch.Tensor:
    """The pattern itself as a read-only 1-D tensor (shared from the cache: never write to it)."""
    return _pattern(n, seed, offset, small, device)


def poison(t: torch.Tensor) -> torch.Tensor:
    return t.fill_(POISON)


def expected_sum(n: int, seeds: Tuple[int, ...], device) -> torch.Tensor:
    """Elementwise sum of the small patterns of ``seeds`` over ``n`` elements (exact in fp32):
    what a reduction of ranks filled with :func:`fill_small` must give. Read-only, cached like
    the patterns (an all_reduce's and a reduce_add's expected result recur for every pair)."""
    key = (n, ("sum",) + tuple(seeds), 0, True, str(device))
    hit = _cache.get(key)
    if hit is not None:
        _cache.move_to_end(key)
        return hit
    total = _pattern(n, seeds[0], 0, True, device).clone()
    for s in seeds[1:]:
        total += _pattern(n, s, 0, True, device)
    if 4 * n <= _CACHE_ONE:
        _remember(key, total)
    return total


def _memcmp():
    """libc's memcmp, or None: a CPU bit-exact equality test with one read of each buffer
    (torch.equal on int32 views reads them at less than half the speed)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        fn = libc.memcmp
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    return fn


_MEMCMP = _memcmp()


def _same_bytes(a: torch.Tensor, e: torch.Tensor) -> bool:
    """Bit-exact equality of two int32 tensors of equal length."""
    if (_MEMCMP is not None and a.device.type == "cpu" and e.device.type == "cpu"
            and a.is_contiguous() and e.is_contiguous()):
        return a.numel() == 0 or _MEMCMP(a.data_ptr(), e.data_ptr(), 4 * a.numel()) == 0
    return torch.equal(a, e)


def compare(actual: torch.Tensor, expected: torch.Tensor) -> Tuple[int, Optional[int]]:
    """Bit-exact comparison of two float32 tensors: (wrong element count, first bad index)."""
    a = actual.reshape(-1).view(torch.int32)
    e = expected.reshape(-1).view(torch.int32)
    if a.numel() != e.numel():
        raise ValueError(f"size mismatch: {a.numel()} elements vs {e.numel()} expected")
    if _same_bytes(a, e):
        return 0, None
    bad = torch.nonzero(a != e).view(-1)  # ascending indices, one pass
    wrong = int(bad.numel())
    first = int(bad[0].item())
    return wrong, first


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
