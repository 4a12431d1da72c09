"""The cpu fabric: two real worker processes exchange every byte over gloo, and every test
(peer copies, DataParallel's flow, the four collectives, --self) verifies bit for bit."""

import pytest

from gputopo.bench.api import BenchOptions, bench_document, cpu_topology, run_bench
from gputopo.report.measured_findings import bench_findings

pytestmark = pytest.mark.slow


def test_cpu_fabric_real_gloo_between_two_processes(tmp_path):
    topo = cpu_topology(2)
    opts = BenchOptions(pairs=[(0, 1)], self_gpus=[1], preset="quick",
                        sizes_bytes=(64 << 10, 1 << 20), samples=3, progress=False,
                        out_dir=str(tmp_path / "run"), timeout_s=60)
    res = run_bench(topo, opts, "cpu")
    assert not [f for f in bench_findings(res) if f.kind in ("hang", "crash", "corrupt")], \
        [f.message for f in bench_findings(res)]
    tests = {m.test for m in res.measurements}
    assert {"collective.all_reduce", "collective.all_gather", "collective.reduce_scatter",
            "collective.broadcast", "p2p.copy", "p2p.copy_bidir", "p2p.staged", "p2p.latency",
            "dp.broadcast_coalesced", "dp.scatter", "dp.gather", "dp.reduce_add",
            "self.h2d", "self.d2h", "self.d2d"} == tests
    assert all(m.timing == "wall" and m.fabric == "cpu" for m in res.measurements)
    assert all(m.wrong == 0 and m.n == 3 for m in res.measurements)
    ar = [m for m in res.measurements if m.test == "collective.all_reduce"]
    assert all(m.busbw_factor == 1.0 and m.busbw_gbps > 0 for m in ar)
    ag = next(m for m in res.measurements if m.test == "collective.all_gather")
    assert ag.busbw_factor == 0.5 and ag.extra["ranks"] == 2
    # two worker processes, one per "GPU", started once for the whole run
    assert len(res.worker_pids) == 2
    doc = bench_document(res)
    assert doc["simulated"] is False and doc["fabric"] == "cpu"
    assert doc["pairs"][0]["busbw_gbps"]["all_reduce"] > 0
    assert doc["self"][0]["gpu"] == 1 and doc["self"][0]["d2d_gbps"] > 0
