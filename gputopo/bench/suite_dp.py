"""Specs of DataParallel's primitives between a master GPU and another one: broadcast_coalesced
of the parameters, scatter of the batch, gather of the outputs, reduce_add_coalesced of the
gradients.

Why: these are the transfers ``nn.DataParallel`` makes each step; each Spec checks the other
GPU's (or the master's) share bit for bit (see :mod:`gputopo.bench.suites`).
"""

from __future__ import annotations

from .verification import compare, merge
from .plan import Case, busbw_factor
from .spec import Prepared, Spec
from .suite_buffers import (SEED_BATCH, SEED_OUT, SEED_PARAM, SEED_RANK, _check_list, _count,
                            _expect, _Holder, _local, _patterned, _sum_expected, batch_shape,
                            param_shapes)


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
            exp_grads = _sum_expected(ops, m, shapes, SEED_RANK) if ops.is_local(m) else None

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
