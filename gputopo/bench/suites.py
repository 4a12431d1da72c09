"""Every benchmark, written once as a Spec over a fabric's Ops (see spec.py and fabrics/base.py).

Each builder takes the Ops of this worker process and a plan Case, and returns a Spec whose
``prepare`` allocates the local buffers, fills inputs with a known pattern and computes the
exact expected result; ``run`` is the operation users run (``tensor.to(other_gpu)``,
DataParallel's primitives, a collective), ``verify`` compares this process's outputs bit for bit.

By family: the copies of one buffer (``p2p.*``, ``self.*``), DataParallel's primitives between
a master GPU and another (``dp.*``), and the collectives (``collective.*``), sized, run and
verified as their entry in the collective table (model/collectives.py) says, as nccl-tests
sizes them: all_reduce and broadcast move ``size`` bytes per rank, all_gather's ``size`` is the
gathered output, reduce_scatter's the input; algbw = size / time. They share the seeded
buffers, expected results and output poisoning at the top of this module.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, NamedTuple, Optional, Set, Tuple

import torch

from gputopo.model.collectives import collective

from .patterns import Expected, expected, expected_sum, fill_pattern, fill_small
from .plan import Case, busbw_factor
from .spec import Prepared, Spec
from .verification import compare, merge, poison

__all__ = ["DP_BATCH_ROWS", "SEED_BATCH", "SEED_OUT", "SEED_PARAM", "SEED_RANK", "SEED_SRC",
           "SEED_SRC2", "batch_shape", "build_spec", "param_shapes"]


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


# ----------------------------------------------------------------------------- buffers
# The peer-copy, DataParallel and collective specs all fill inputs with seeded patterns, compute
# the exact expected outputs, and poison outputs before they are reused; these helpers do that
# once.

# Seeds of the patterns, one per role, so no buffer can pass for another.
SEED_SRC, SEED_SRC2, SEED_PARAM, SEED_BATCH, SEED_OUT = 11, 23, 37, 41, 53
#: One seed per rank: a pair's two, then more for an all_reduce over a whole set (`gputopo gate
#: --measure copy+allreduce`); small patterns (0..1023) of up to 16 ranks sum exactly in fp32.
SEED_RANK = (101, 211, 307, 401, 503, 601, 701, 809, 907, 1009, 1103, 1201, 1301, 1409, 1511, 1601)

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


# ----------------------------------------------------------------------------- copies
# GPU-to-GPU peer copies (one way, both ways, staged through the host), their small-message
# latency, and a GPU's own h2d/d2h/d2d copies: `tensor.to(other_gpu)` is what users run; the
# source holds a known pattern and the destination is checked bit for bit.

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
            if dst is not None and exp is not None:  # (exp is, where dst is: both on a local GPU)
                parts.append((*compare(dst, exp, poison_after=True), n))
            if dst2 is not None and exp2 is not None:
                parts.append((*compare(dst2, exp2, poison_after=True), n))
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


def _self(ops, case: Case) -> Spec:
    (g,) = case.gpus
    n = _count(case.size_bytes)

    def prepare() -> Prepared:
        if case.test == "self.h2d":
            src = fill_pattern(ops.host_empty(n), SEED_SRC)
            dst = ops.empty(g, n)
            run = lambda: ops.h2d(dst, src, g)  # noqa: E731
        elif case.test == "self.d2h":
            src = _patterned_here(ops, g, [(n,)], SEED_SRC)[0]
            dst = ops.host_empty(n)
            run = lambda: ops.d2h(dst, src, g)  # noqa: E731
        else:
            src = _patterned_here(ops, g, [(n,)], SEED_SRC)[0]
            dst = ops.empty(g, n)
            run = lambda: ops.d2d(dst, src, g)  # noqa: E731
        exp = expected(n, SEED_SRC, dst.device)
        return Prepared(lambda: poison(dst), run, lambda: compare(dst, exp, poison_after=True))

    return Spec(case.test, case.gpus, case.direction, case.size_bytes, 4 * n, 1.0, prepare,
                devices=(g,), extra=ops.extra(case.test, case.src, case.dst))


# ----------------------------------------------------------------------------- DataParallel
# DataParallel's primitives between a master GPU and another: broadcast_coalesced of the
# parameters, scatter of the batch, gather of the outputs, reduce_add_coalesced of the gradients,
# the transfers `nn.DataParallel` makes each step; the other GPU's (or the master's) share is
# checked bit for bit.

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
                # each received parameter against its slice of the pattern (no concatenated copy)
                pieces, off = [], 0
                for t in held.value[o]:
                    k = t.numel()
                    pieces.append((*compare(t, exp[off:off + k], poison_after=True), k))
                    off += k
                if off != exp.numel():
                    raise ValueError(f"size mismatch: {off} elements vs {exp.numel()} expected")
                return merge(pieces)

        elif test == "dp.scatter":
            batch = _patterned(ops, m, [(rows, cols)], SEED_BATCH)
            a, b = dict(pieces).get(o, (0, 0))
            exp = _expect(ops, o, (b - a) * cols, SEED_BATCH, a * cols) if b > a else None

            def run():
                held.value = ops.dp_scatter(batch[0] if batch else None, (rows, cols), m, gpus)

            def verify():
                return (compare(held.value[o], exp, poison_after=True) if exp is not None
                        else (0, None))

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
                return (compare(held.value, exp, poison_after=True) if exp is not None
                        else (0, None))

        else:  # dp.reduce_add (DataParallel's backward: reduce_add_coalesced onto the master)
            grads = {}
            for g in gpus:
                t = _patterned(ops, g, shapes, SEED_RANK[gpus.index(g)], small=True)
                if t is not None:
                    grads[g] = t
            exp_grads = _sum_expected(ops, m, shapes, SEED_RANK[:len(gpus)]) if ops.is_local(m) else None

            def run():
                held.value = ops.dp_reduce_add_coalesced(grads, shapes, m, gpus)

            def verify():
                return (_check_list(held.value, exp_grads, poison_after=True)
                        if exp_grads is not None else (0, None))

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


# ----------------------------------------------------------------------------- collectives
# A collective over the step's GPUs, as its entry in the collective table says: its buffers
# sized by ``sizing``, run by its fabric ``operation``, every local rank's output checked bit
# for bit against ``result``. DDP's gradient all_reduce and the other collectives are what
# multi-GPU training runs.


class _Buffers(NamedTuple):
    """A collective's local buffers: the outputs and what each must hold, the timed run, and
    what refill does before each sample: the per-GPU seeds in-place buffers are filled from
    again, and the outputs poisoned (compare() poisons them again once checked)."""

    outs: Dict[int, torch.Tensor]
    exp: Dict[int, Expected]
    run: Callable[[], None]
    refill_seeds: Dict[int, int]
    poisoned: Set[int]


def _sum_on_every_rank(ops, op, case: Case, local: List[int], n: int, send: int,
                       recv: int) -> _Buffers:
    """"sum" (all_reduce): in place, every rank's buffer its own small pattern before each
    sample (written again from the cached pattern: a copy of each rank's input kept aside was
    a third of this test's memory), the elementwise sum after."""
    gpus = list(case.gpus)
    bufs = {g: ops.empty(g, n) for g in local}
    exp = {g: _sum_expected(ops, g, [(n,)], SEED_RANK[:len(gpus)])[0] for g in local}
    return _Buffers(bufs, exp, lambda: op(bufs), {g: SEED_RANK[gpus.index(g)] for g in local}, set())


def _all_inputs(ops, op, case: Case, local: List[int], n: int, send: int, recv: int) -> _Buffers:
    """"all-inputs" (all_gather): rank r's input is piece r of one pattern, every output the
    whole pattern."""
    gpus = list(case.gpus)
    ins = {g: fill_pattern(ops.empty(g, send), SEED_SRC, gpus.index(g) * send) for g in local}
    outs = {g: ops.empty(g, recv) for g in local}
    exp = {g: expected(recv, SEED_SRC, ops.device(g)) for g in local}
    return _Buffers(outs, exp, lambda: op(outs, ins), {}, set(local))


def _sum_chunk(ops, op, case: Case, local: List[int], n: int, send: int, recv: int) -> _Buffers:
    """"sum-chunk" (reduce_scatter): every rank's input its own small pattern, rank r's output
    chunk r of their elementwise sum."""
    gpus = list(case.gpus)
    ins = {g: fill_small(ops.empty(g, send), SEED_RANK[gpus.index(g)]) for g in local}
    outs = {g: ops.empty(g, recv) for g in local}
    exp = {}
    for g in local:
        r = gpus.index(g)
        full = _sum_expected(ops, g, [(send,)], SEED_RANK[:len(gpus)])[0]
        exp[g] = full[r * recv:(r + 1) * recv]  # a view of the cached sum: read only
    return _Buffers(outs, exp, lambda: op(outs, ins), {}, set(local))


def _root_input(ops, op, case: Case, local: List[int], n: int, send: int, recv: int) -> _Buffers:
    """"root-input" (broadcast from ``case.src``): the root's buffer holds the pattern, every
    rank's the same after; the root keeps its source, the others are poisoned."""
    root = case.src
    outs = {}
    for g in local:
        t = ops.empty(g, n)
        if g == root:
            fill_pattern(t, SEED_SRC)
        outs[g] = t
    exp = {g: expected(n, SEED_SRC, ops.device(g)) for g in local}
    return _Buffers(outs, exp, lambda: op(outs, root), {}, {g for g in local if g != root})


#: The results (model/collectives.py's RESULTS) the suite can set up and check, with the
#: calling convention of the fabric operation: ``op(bufs)`` / ``op(bufs, root)`` in place,
#: ``op(outs, ins)`` out of place.
_RESULTS = {"sum": _sum_on_every_rank, "all-inputs": _all_inputs, "sum-chunk": _sum_chunk,
            "root-input": _root_input}


def _collective(ops, case: Case) -> Spec:
    coll = collective(case.test)
    if coll.operation is None or coll.result not in _RESULTS:
        raise ValueError(f"the bench does not run {case.test}")
    op = getattr(ops, coll.operation)
    world = len(case.gpus)
    local = [g for g in case.gpus if ops.is_local(g)]
    n, send, recv = coll.counts(_count(case.size_bytes), world)
    setup = _RESULTS[coll.result]

    def prepare() -> Prepared:
        b = setup(ops, op, case, local, n, send, recv)

        def refill():
            for g, seed in b.refill_seeds.items():
                fill_small(b.outs[g], seed)
            for g in b.poisoned:
                poison(b.outs[g])

        def verify():
            return merge((*compare(b.outs[g], b.exp[g], poison_after=g in b.poisoned),
                          b.outs[g].numel()) for g in local)

        return Prepared(refill, b.run, verify)

    return Spec(case.test, case.gpus, case.direction, case.size_bytes, 4 * n,
                busbw_factor(case.test, world), prepare, devices=tuple(local),
                extra=dict(ops.extra(case.test, case.src, case.dst), ranks=world,
                           **({"reduce_op": ops.all_reduce_op()} if coll.operation == "all_reduce" else {})))
