"""Every benchmark, written once as a Spec over a fabric's Ops (see spec.py and fabrics/base.py).

Each builder takes the Ops of this worker process and a plan Case, and returns a Spec whose
``prepare`` allocates the local buffers, fills inputs with a known pattern and computes the
exact expected result; ``run`` is the operation users run (``tensor.to(other_gpu)``,
DataParallel's primitives, a collective), ``verify`` compares this process's outputs bit for bit.

Sizes follow nccl-tests: all_reduce and broadcast move ``size`` bytes per rank, all_gather's
``size`` is the gathered output, reduce_scatter's the input; algbw = size / time.

This module picks the builder for a test; the builders live by family: ``suite_copies``
(p2p.*, self.*), ``suite_dp`` (dp.*), ``suite_collectives`` (collective.*), and the seeded
buffers, expected results and output poisoning they share in ``suite_buffers``.
"""

from __future__ import annotations

from .plan import Case
from .spec import Spec
from .suite_buffers import (DP_BATCH_ROWS, SEED_BATCH, SEED_OUT, SEED_PARAM, SEED_RANK, SEED_SRC,
                            SEED_SRC2, batch_shape, param_shapes)
from .suite_collectives import _collective
from .suite_copies import _copy, _latency, _self
from .suite_dp import _dp

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
