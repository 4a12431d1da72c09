"""Specs of the collectives (all_reduce, all_gather, reduce_scatter, broadcast) over a group of
GPUs, sized as nccl-tests sizes them.

Why: DDP's gradient all_reduce and the other collectives are what multi-GPU training runs; each
Spec checks every local rank's output bit for bit (see :mod:`gputopo.bench.suites`).
"""

from __future__ import annotations

from .patterns import expected, fill_pattern, fill_small
from .verification import compare, merge, poison
from .plan import Case, busbw_factor
from .spec import Prepared, Spec
from .suite_buffers import SEED_RANK, SEED_SRC, _count, _sum_expected


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
            bufs = {g: ops.empty(g, n) for g in local}
            exp = {g: _sum_expected(ops, g, [(n,)], SEED_RANK[:world])[0] for g in local}

            run = lambda: ops.all_reduce(bufs)  # noqa: E731
            outs = bufs
            # in place: the inputs are written again from their cached pattern instead (a copy
            # of each rank's input kept aside was a third of this test's memory)
            refill_seeds, poisoned = {g: SEED_RANK[gpus.index(g)] for g in local}, set()
        elif test == "collective.all_gather":
            ins = {g: fill_pattern(ops.empty(g, per), SEED_SRC, gpus.index(g) * per) for g in local}
            outs = {g: ops.empty(g, n) for g in local}
            exp = {g: expected(n, SEED_SRC, ops.device(g)) for g in local}
            run = lambda: ops.all_gather(outs, ins)  # noqa: E731
            refill_seeds, poisoned = {}, set(local)
        elif test == "collective.reduce_scatter":
            ins = {g: fill_small(ops.empty(g, n), SEED_RANK[gpus.index(g)]) for g in local}
            outs = {g: ops.empty(g, per) for g in local}
            exp = {}
            for g in local:
                r = gpus.index(g)
                full = _sum_expected(ops, g, [(n,)], SEED_RANK[:world])[0]
                exp[g] = full[r * per:(r + 1) * per]  # a view of the cached sum: read only
            run = lambda: ops.reduce_scatter(outs, ins)  # noqa: E731
            refill_seeds, poisoned = {}, set(local)
        else:  # broadcast from case.src
            root = case.src
            outs = {}
            for g in local:
                t = ops.empty(g, n)
                if g == root:
                    fill_pattern(t, SEED_SRC)
                outs[g] = t
            exp = {g: expected(n, SEED_SRC, ops.device(g)) for g in local}
            run = lambda: ops.broadcast(outs, root)  # noqa: E731
            refill_seeds, poisoned = {}, {g for g in local if g != root}  # the root keeps its source

        # before every sample: the outputs poisoned (compare() poisons them once checked, and
        # poison() then skips them), all_reduce's in-place buffers filled with their inputs
        def refill():
            for g, seed in refill_seeds.items():
                fill_small(outs[g], seed)
            for g in poisoned:
                poison(outs[g])

        def verify():
            return merge((*compare(outs[g], exp[g], poison_after=g in poisoned), outs[g].numel())
                         for g in local)

        return Prepared(refill, run, verify)

    return Spec(test, case.gpus, case.direction, case.size_bytes, 4 * n,
                busbw_factor(test, world), prepare, devices=tuple(local),
                extra=dict(ops.extra(test, case.src, case.dst), ranks=world))
