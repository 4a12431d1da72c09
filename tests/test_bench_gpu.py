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


def test_cuda_collectives_record_what_nccl_did(tmp_path):
    """NCCL's own INFO log (NCCL_DEBUG_FILE beside each worker's log) names the transport of the
    pair's collectives: P2P on NVLink/close PCIe pairs, SHM beyond NCCL_P2P_LEVEL."""
    import torch

    topo = _topology()
    if torch.cuda.device_count() < 2 or not topo.pairs:
        pytest.skip("needs two GPUs")
    opts = BenchOptions(pairs=[topo.pairs[0].gpus], preset="quick", tests=("collectives",), progress=False,
                        out_dir=str(tmp_path / "run"), timeout_s=120)
    res = run_bench(topo, opts, "cuda")
    coll = [m for m in res.measurements if m.test.startswith("collective.")]
    assert coll
    for m in coll:
        nt = m.extra["nccl_transport"]
        assert "not_available" not in nt, nt
        assert nt["source"] == "nccl-debug" and nt["kind"] in ("P2P", "SHM", "NET") and nt["channels"] > 0
        assert nt["gpus"] == list(m.gpus[:2])
