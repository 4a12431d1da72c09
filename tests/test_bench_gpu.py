"""The cuda fabric on real GPUs (skipped without one): peer copies, DataParallel's real
torch.nn.parallel.comm calls and NCCL collectives, verified bit for bit, timed by CUDA events."""

import pytest

from gputopo.bench.api import BenchOptions, bench_document, run_bench

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def _topology():
    from gputopo.probe.scan import scan_real

    return scan_real()


def test_cuda_self_and_first_pair(tmp_path):
    import torch

    topo = _topology()
    pairs = [topo.pairs[0].gpus] if topo.pairs and torch.cuda.device_count() >= 2 else []
    opts = BenchOptions(pairs=pairs, self_gpus=[topo.gpus[0].nvml_index], preset="quick",
                        progress=False, out_dir=str(tmp_path / "run"), timeout_s=120)
    res = run_bench(topo, opts, "cuda")
    bad = [f.message for f in res.findings if f.kind in ("hang", "crash")]
    assert not bad, bad
    assert res.measurements and all(m.timing == "cuda-events" for m in res.measurements)
    assert all(m.samples_s and min(m.samples_s) > 0 for m in res.measurements)
    doc = bench_document(res)
    assert doc["self"][0]["h2d_gbps"] > 0.5
    if pairs:
        tests = {m.test for m in res.measurements}
        assert {"p2p.copy", "dp.scatter", "dp.reduce_add", "collective.all_reduce"} <= tests
        assert doc["pairs"][0]["p2p_gbps"]
