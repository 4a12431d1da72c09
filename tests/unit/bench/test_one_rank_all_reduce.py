"""Issue 43 item 9: a one-rank NCCL all_reduce that verifies a no-op.

NCCL's one-rank path (src/enqueue.cc taskAppend -> ncclLaunchOneRank, src/device/onerank.cu)
launches a kernel only for a pre-multiplied sum: an in-place sum does nothing (and an
out-of-place one is a memcpy), so the buffer is trivially right and the time is no collective's.
ncclAvg on float32 is a pre-multiplied sum by 1/nRanks (hostToDevRedOp), which it launches
oneRankReduce for; by 1.0 on one rank, so the result is the input bit for bit.

The fake torch.distributed below does what NCCL's one-rank path does for each op and counts the
kernels it launches; the bench's real collective path (suites.build_spec, spec.measure) runs on
it. On gloo (the cpu fabric, and every world of 2+) the bench still asks for a sum.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from gputopo.bench.fabrics.cpu import CpuOps
from gputopo.bench.plan import Case
from gputopo.bench.spec import measure
from gputopo.bench.suites import build_spec

SUM, AVG = "SUM", "AVG"


class FakeOneRankDist:
    """torch.distributed as a process group of ``world`` ranks on ``backend`` sees it, with
    NCCL's one-rank behaviour: a sum in place launches nothing, AVG on float32 runs the
    pre-multiplied-sum kernel (x * (1/1))."""

    ReduceOp = SimpleNamespace(SUM=SUM, AVG=AVG)

    def __init__(self, backend: str):
        self.backend = backend
        self.kernels = 0
        self.ops = []

    def is_initialized(self) -> bool:
        return True

    def get_backend(self) -> str:
        return self.backend

    def all_reduce(self, t, op=SUM):
        self.ops.append(op)
        if op == AVG:
            assert t.dtype == torch.float32
            t.mul_(1.0)  # oneRankReduce<FuncPreMulSum<float>>, scalar 1/nRanks = 1.0
            self.kernels += 1
        # SUM in place on one rank: ncclLaunchOneRank returns without launching anything


def _ops(backend: str, world: int = 1) -> CpuOps:
    ops = CpuOps([0], list(range(world)), world)
    fake = FakeOneRankDist(backend)
    ops._dist = lambda: fake  # type: ignore[method-assign]
    return ops


def test_one_nccl_rank_asks_for_avg_so_nccl_runs_a_kernel():
    """Before: ReduceOp.SUM (torch's default): no kernel ever ran, and the buffer was right anyway."""
    ops = _ops("nccl")
    spec = build_spec(ops, Case("collective.all_reduce", (0,), None, 1 << 16), latency_repeat=1)
    assert spec.extra["reduce_op"] == "avg" and spec.extra["ranks"] == 1
    m = measure(spec, ops, warmup=1, samples=3, link_class=None)
    fake = ops._dist()
    assert set(fake.ops) == {AVG} and fake.kernels == 4  # one per warm-up and sample
    assert m.wrong == 0 and m.error is None  # the input, bit for bit


@pytest.mark.parametrize("backend, world", [("gloo", 1), ("nccl", 2), ("gloo", 2)])
def test_a_sum_everywhere_else(backend, world):
    """Gloo has no AVG in general; two ranks or more reduce for real with a sum."""
    ops = _ops(backend, world)
    assert ops.all_reduce_op() == "sum"
    t = torch.ones(8)
    ops.all_reduce({0: t})
    assert ops._dist().ops == [SUM]


def test_the_sim_fabric_records_a_sum():
    from gputopo.bench.fabrics.base import Ops

    assert Ops.all_reduce_op(SimpleNamespace()) == "sum"
