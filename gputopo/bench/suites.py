"""Every benchmark, written once as a Spec over a fabric's Ops (see spec.py and fabrics/base.py).

Each builder takes the Ops of this worker process and a plan Case, and returns a Spec whose
``prepare`` allocates the local buffers, fills inputs with a known pattern and computes the
exact expected result; ``run`` is the operation users run (``tensor.to(other_gpu)``,
DataParallel's primitives, a collective), ``verify`` compares this process's outputs bit for bit.

Sizes follow nccl-tests: all_reduce and broadcast move ``size`` bytes per rank, all_gather's
``size`` is the gathered output, reduce_scatter's the input; algbw = size / time.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import torch

from .patterns import compare, expected, fill_pattern, fill_small, merge, poison
from .plan import Case, busbw_factor
from .spec import Prepared, Spec

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
    shapes, used = [], 0
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


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


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


def _expect(ops, gpu, n, seed, offset=0) -> Optional[torch.Tensor]:
    """The copy pattern as expected on ``gpu`` (None when ``gpu`` is another process's)."""
    return expected(n, seed, ops.device(gpu), offset) if ops.is_local(gpu) else None


def _check_list(actual: List[torch.Tensor], expected: List[torch.Tensor]):
    return merge((*compare(a, e), e.numel()) for a, e in zip(actual, expected))


class _Holder:
    """Outputs the timed op allocated; poisoned before they are dropped, so the allocator can
    never hand the next sample a block that already holds the right answer. ``fresh`` picks
    the newly allocated outputs out of the op's result (never the caller's own inputs, which
    DataParallel returns as the master's share)."""

    def __init__(self, fresh):
        self.value = None
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


# ============================================================================ peer copies


def _copy(ops, case: Case) -> Spec:
    a, b, n = case.src, case.dst, _count(case.size_bytes)
    route = ops.peer_route(a, b)
    bidir = case.test == "p2p.copy_bidir"
    staged = case.test == "p2p.staged"

    def prepare() -> Prepared:
        src = _patterned(ops, a, [(n,)], SEED_SRC)
        dst = ops.empty(b, n)
        exp = _expect(ops, b, n, SEED_SRC)
        src2 = dst2 = exp2 = None
        if bidir:
            src2 = _patterned(ops, b, [(n,)], SEED_SRC2)
            dst2 = ops.empty(a, n)
            exp2 = _expect(ops, a, n, SEED_SRC2)
        stage = ops.make_stage(n, a, b) if staged else None
        s1 = src[0] if src else None
        s2 = src2[0] if src2 else None

        def refill():
            for t in (dst, dst2):
                if t is not None:
                    poison(t)

        if bidir:
            def run():
                ops.transfers([(dst, s1, b, a), (dst2, s2, a, b)], route)
        elif staged:
            def run():
                ops.staged(dst, s1, b, a, stage)
        else:
            def run():
                ops.transfers([(dst, s1, b, a)], route)

        def verify():
            parts = []
            if dst is not None:
                parts.append((*compare(dst, exp), n))
            if dst2 is not None:
                parts.append((*compare(dst2, exp2), n))
            return merge(parts)

        return Prepared(refill, run, verify)

    extra = ops.extra(case.test, a, b)
    if staged:
        extra = dict(extra, path="host")
    return Spec(case.test, case.gpus, case.direction, case.size_bytes,
                bytes_per_iter=(2 if bidir else 1) * 4 * n, busbw_factor=1.0, prepare=prepare,
                devices=_local(ops, case.gpus, first=a), extra=extra)


def _latency(ops, case: Case, repeat: int) -> Spec:
    spec = _copy(ops, Case("p2p.copy", case.gpus, case.direction, case.size_bytes, case.src,
                           case.dst))
    spec.test = "p2p.latency"
    spec.repeat = repeat
    return spec


def _local(ops, gpus, first=None) -> Tuple[int, ...]:
    """Local GPUs of the step with ``first`` (the one whose stream starts the clock) first."""
    loc = [g for g in gpus if ops.is_local(g)]
    if first is not None and first in loc:
        loc.remove(first)
        loc.insert(0, first)
    return tuple(loc)


# ============================================================================ self


def _self(ops, case: Case) -> Spec:
    (g,) = case.gpus
    n = _count(case.size_bytes)

    def prepare() -> Prepared:
        if case.test == "self.h2d":
            src = fill_pattern(ops.host_empty(n), SEED_SRC)
            dst = ops.empty(g, n)
            run = lambda: ops.h2d(dst, src, g)  # noqa: E731
        elif case.test == "self.d2h":
            src = _patterned(ops, g, [(n,)], SEED_SRC)[0]
            dst = ops.host_empty(n)
            run = lambda: ops.d2h(dst, src, g)  # noqa: E731
        else:
            src = _patterned(ops, g, [(n,)], SEED_SRC)[0]
            dst = ops.empty(g, n)
            run = lambda: ops.d2d(dst, src, g)  # noqa: E731
        exp = expected(n, SEED_SRC, dst.device)
        return Prepared(lambda: poison(dst), run, lambda: compare(dst, exp))

    return Spec(case.test, case.gpus, case.direction, case.size_bytes, 4 * n, 1.0, prepare,
                devices=(g,), extra=ops.extra(case.test, case.src, case.dst))


# ============================================================================ DataParallel


def _dp(ops, case: Case) -> Spec:
    m, o, n = case.src, case.dst, _count(case.size_bytes)
    gpus = [m, o]  # DataParallel(device_ids=[m, o]): m is the master (output) device
    test = case.test
    shapes = param_shapes(n)
    rows, cols = batch_shape(n)
    pieces = list(zip(gpus, _chunks(rows, len(gpus))))

    def prepare() -> Prepared:
        if test in ("dp.broadcast_coalesced", "dp.scatter"):
            held = _Holder(lambda v: v.get(o))  # the master's share is its own input
        else:
            held = _Holder(lambda v: v)
        if test == "dp.broadcast_coalesced":
            params = {m: _patterned(ops, m, shapes, SEED_PARAM)} if ops.is_local(m) else {}
            exp = _expect(ops, o, n, SEED_PARAM)

            def run():
                held.value = ops.dp_broadcast_coalesced(params, shapes, m, gpus)

            def verify():
                if exp is None:
                    return (0, None)
                return compare(torch.cat([t.reshape(-1) for t in held.value[o]]), exp)

        elif test == "dp.scatter":
            batch = _patterned(ops, m, [(rows, cols)], SEED_BATCH)
            a, b = dict(pieces).get(o, (0, 0))
            exp = _expect(ops, o, (b - a) * cols, SEED_BATCH, a * cols) if b > a else None

            def run():
                held.value = ops.dp_scatter(batch[0] if batch else None, (rows, cols), m, gpus)

            def verify():
                return compare(held.value[o], exp) if exp is not None else (0, None)

        elif test == "dp.gather":
            outs = {}
            for g, (a, b) in pieces:
                t = _patterned(ops, g, [(b - a, cols)], SEED_OUT, first_offset=a * cols)
                if t is not None:
                    outs[g] = t[0]
            exp = _expect(ops, m, n, SEED_OUT)

            def run():
                held.value = ops.dp_gather(outs, (rows, cols), m, gpus)

            def verify():
                return compare(held.value, exp) if exp is not None else (0, None)

        else:  # dp.reduce_add (DataParallel's backward: reduce_add_coalesced onto the master)
            grads = {}
            for g in gpus:
                t = _patterned(ops, g, shapes, SEED_RANK[gpus.index(g)], small=True)
                if t is not None:
                    grads[g] = t
            exp = _sum_expected(ops, m, shapes, SEED_RANK) if ops.is_local(m) else None

            def run():
                held.value = ops.dp_reduce_add_coalesced(grads, shapes, m, gpus)

            def verify():
                return _check_list(held.value, exp) if exp is not None else (0, None)

        return Prepared(refill=held.drop, run=run, verify=verify, release=held.drop)

    factor = busbw_factor(test)
    return Spec(test, case.gpus, case.direction, case.size_bytes, 4 * n, factor, prepare,
                devices=_local(ops, case.gpus, first=m),
                extra=dict(ops.extra(test, m, o), master=m, **_dp_shape_extra(test, shapes, rows, cols)))


def _dp_shape_extra(test, shapes, rows, cols) -> dict:
    if test in ("dp.scatter", "dp.gather"):
        return {"shape": [rows, cols]}
    return {"tensors": len(shapes)}


def _chunks(rows: int, parts: int):
    from .fabrics.base import chunk_rows

    return chunk_rows(rows, parts)


def _sum_expected(ops, gpu, shapes, seeds) -> List[torch.Tensor]:
    """Exact elementwise sum of the small patterns of ``seeds`` laid out over ``shapes``."""
    out, off = [], 0
    for shp in shapes:
        total = torch.zeros(shp, dtype=torch.float32, device=ops.device(gpu))
        tmp = torch.empty(shp, dtype=torch.float32, device=ops.device(gpu))
        for s in seeds:
            total += fill_small(tmp, s, off)
        out.append(total)
        off += total.numel()
    return out


# ============================================================================ collectives


def _collective(ops, case: Case) -> Spec:
    test = case.test
    gpus = list(case.gpus)
    size = case.size_bytes
    n = _count(size)
    world = len(gpus)
    local = [g for g in gpus if ops.is_local(g)]
    if test in ("collective.all_gather", "collective.reduce_scatter"):
        per = max(1, n // world)
        n = per * world
    else:
        per = n

    def prepare() -> Prepared:
        if test == "collective.all_reduce":
            pristine = {g: fill_small(ops.empty(g, n), SEED_RANK[gpus.index(g)]) for g in local}
            bufs = {g: ops.empty(g, n) for g in local}
            exp = {g: _sum_expected(ops, g, [(n,)], SEED_RANK[:world])[0] for g in local}

            def refill():  # all_reduce works in place: restore the inputs
                for g in local:
                    bufs[g].copy_(pristine[g])

            run = lambda: ops.all_reduce(bufs)  # noqa: E731
            outs = bufs
        elif test == "collective.all_gather":
            ins = {g: fill_pattern(ops.empty(g, per), SEED_SRC, gpus.index(g) * per) for g in local}
            outs = {g: ops.empty(g, n) for g in local}
            exp = {g: expected(n, SEED_SRC, ops.device(g)) for g in local}
            refill = lambda: [poison(t) for t in outs.values()]  # noqa: E731
            run = lambda: ops.all_gather(outs, ins)  # noqa: E731
        elif test == "collective.reduce_scatter":
            ins = {g: fill_small(ops.empty(g, n), SEED_RANK[gpus.index(g)]) for g in local}
            outs = {g: ops.empty(g, per) for g in local}
            exp = {}
            for g in local:
                r = gpus.index(g)
                full = _sum_expected(ops, g, [(n,)], SEED_RANK[:world])[0]
                exp[g] = full[r * per:(r + 1) * per].clone()
            refill = lambda: [poison(t) for t in outs.values()]  # noqa: E731
            run = lambda: ops.reduce_scatter(outs, ins)  # noqa: E731
        else:  # broadcast from case.src
            root = case.src
            outs = {}
            for g in local:
                t = ops.empty(g, n)
                if g == root:
                    fill_pattern(t, SEED_SRC)
                outs[g] = t
            exp = {g: expected(n, SEED_SRC, ops.device(g)) for g in local}

            def refill():
                for g in local:
                    if g != root:
                        poison(outs[g])

            run = lambda: ops.broadcast(outs, root)  # noqa: E731

        def verify():
            return merge((*compare(outs[g], exp[g]), outs[g].numel()) for g in local)

        return Prepared(refill, run, verify)

    return Spec(test, case.gpus, case.direction, case.size_bytes, 4 * n,
                busbw_factor(test, world), prepare, devices=tuple(local),
                extra=dict(ops.extra(test, case.src, case.dst), ranks=world))


# ============================================================================ registry


def build_spec(ops, case: Case, *, latency_repeat: int) -> Spec:
    """The Spec that measures ``case`` on this process's Ops."""
    t = case.test
    if t in ("p2p.copy", "p2p.copy_bidir", "p2p.staged"):
        return _copy(ops, case)
    if t == "p2p.latency":
        return _latency(ops, case, latency_repeat)
    if t.startswith("self."):
        return _self(ops, case)
    if t.startswith("dp."):
        return _dp(ops, case)
    if t.startswith("collective."):
        return _collective(ops, case)
    raise ValueError(f"unknown test {t!r}")

