"""Specs of the copies of one buffer: GPU-to-GPU peer copies (one way, both ways, staged
through the host), their small-message latency, and a GPU's own h2d/d2h/d2d copies.

Why: ``tensor.to(other_gpu)`` is what users run; each Spec fills the source with a known
pattern and checks the destination bit for bit (see :mod:`gputopo.bench.suites`).
"""

from __future__ import annotations

from .patterns import expected, fill_pattern
from .verification import compare, merge, poison
from .plan import Case
from .spec import Prepared, Spec
from .suite_buffers import SEED_SRC, SEED_SRC2, _count, _expect, _local, _patterned, _patterned_here


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
