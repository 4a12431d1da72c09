"""The cuda fabric on real GPUs (skipped without one): peer copies, DataParallel's real
torch.nn.parallel.comm calls and NCCL collectives, verified bit for bit, timed by CUDA events.

On a GPU these assert what a healthy machine must show (issue 8): 0 wrong elements, GB/s within
a plausible band of the link's theoretical rate, how the time was taken, and that
CUDA_VISIBLE_DEVICES never makes gputopo measure another GPU than the one named."""

import json
import os
import subprocess
import sys

import pytest

from gputopo.bench.api import BenchOptions, bench_document, run_bench
from helpers.cli import gputopo
from helpers.host_link import HIGH, LOW, host_link
from helpers.paths import REPO

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def _topology():
    from gputopo.probe.scan import scan_real

    return scan_real()


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    import torch

    topo = _topology()
    pairs = [topo.pairs[0].gpus] if topo.pairs and torch.cuda.device_count() >= 2 else []
    opts = BenchOptions(pairs=pairs, self_gpus=[topo.gpus[0].nvml_index], preset="quick",
                        progress=False, out_dir=str(tmp_path_factory.mktemp("gpu") / "run"),
                        timeout_s=120)
    return topo, pairs, run_bench(topo, opts, "cuda")


def test_cuda_self_and_first_pair(bench_run):
    topo, pairs, res = bench_run
    bad = [f.what for f in res.failures]
    assert not bad, bad
    assert res.measurements and all(m.timing == "cuda-events" for m in res.measurements)
    assert all(m.samples_s and min(m.samples_s) > 0 for m in res.measurements)
    assert all("spin kernel" in m.extra["timing_method"] for m in res.measurements)
    doc = bench_document(res)
    assert doc["self"][0]["h2d_gbps"] > 0.5
    if pairs:
        tests = {m.test for m in res.measurements}
        assert {"p2p.copy", "dp.scatter", "dp.reduce_add", "collective.all_reduce"} <= tests
        assert doc["pairs"][0]["p2p_gbps"]
        dp_nccl = [m for m in res.measurements if m.test in ("dp.broadcast_coalesced", "dp.reduce_add")]
        assert dp_nccl and all(m.extra["path"] == "nccl" for m in dp_nccl)


def test_no_wrong_element_anywhere(bench_run):
    _, _, res = bench_run
    wrong = {(m.test, m.direction, m.size_bytes): m.wrong for m in res.measurements if m.wrong}
    assert not wrong, wrong
    assert all(m.error is None for m in res.measurements)


def test_bandwidth_within_a_plausible_band_of_the_link(bench_run):
    from gputopo.report.expected import gpu_pcie_rate, pair_rate

    topo, pairs, res = bench_run
    doc = bench_document(res)
    g = topo.gpus[0].nvml_index
    pcie = gpu_pcie_rate(topo, g)
    # host copies cross NVLink-C2C on a Grace machine (GH200, GB200), the PCIe link elsewhere
    import pynvml
    import torch

    pynvml.nvmlInit()
    try:
        cuda = topo.gpus[0].cuda_index if isinstance(topo.gpus[0].cuda_index, int) else 0
        names = f"{topo.gpus[0].name} {torch.cuda.get_device_name(cuda)}"
        link = host_link(pynvml, pynvml.nvmlDeviceGetHandleByIndex(g), names, pcie.gbps, pcie.basis)
    finally:
        pynvml.nvmlShutdown()
    band = link.band()
    if band:
        for key in ("h2d_gbps", "d2h_gbps"):
            got = doc["self"][0][key]
            assert band[0] <= got <= band[1], (key, got, link.kind, link.basis)
    for pair in doc["pairs"]:
        rate = pair_rate(topo, *pair["gpus"])
        peer = [m for m in res.measurements if m.test == "p2p.copy" and m.extra.get("peer_access")]
        if rate.gbps and peer:
            for direction, got in pair["p2p_gbps"].items():
                assert LOW * rate.gbps <= got <= HIGH * rate.gbps, (direction, got, rate.basis)


def test_cuda_visible_devices_maps_by_bus_id_never_by_number(tmp_path):
    """With only the last GPU visible, a worker knows it as cuda:0 and no other GPU; naming a
    pair with a hidden GPU is refused (exit 2)."""
    import torch

    topo = _topology()
    last = topo.gpus[-1]
    code = ("import json,sys; from gputopo.bench.fabrics.cuda import resolve_cuda_indices; "
            "print(json.dumps(resolve_cuda_indices({int(k): v for k, v in "
            "json.loads(sys.argv[1]).items()})))")
    gpus = {g.nvml_index: {"pci_bus_id": g.pci_bus_id} for g in topo.gpus}
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(last.uuid), CUDA_DEVICE_ORDER="PCI_BUS_ID")
    env["PYTHONPATH"] = str(REPO)
    out = subprocess.run([sys.executable, "-c", code, json.dumps(gpus)], capture_output=True,
                         text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {str(last.nvml_index): 0}
    if torch.cuda.device_count() >= 2:
        a, b = topo.gpus[0].nvml_index, topo.gpus[1].nvml_index
        proc = gputopo("bench", "--pairs", f"{a},{b}", "--tests", "p2p", "--quick",
                       env={"CUDA_VISIBLE_DEVICES": str(last.uuid)}, timeout=300)
        assert proc.returncode == 2, proc.stderr
        assert "not visible to CUDA" in proc.stderr


def _collectives(topo, tmp_path):
    opts = BenchOptions(pairs=[topo.pairs[0].gpus], preset="quick", tests=("collectives",), progress=False,
                        out_dir=str(tmp_path / "run"), timeout_s=120)
    res = run_bench(topo, opts, "cuda")
    coll = [m for m in res.measurements if m.test.startswith("collective.")]
    assert coll
    return coll


def _two_gpus():
    import torch

    topo = _topology()
    if torch.cuda.device_count() < 2 or not topo.pairs:
        pytest.skip("needs two GPUs")
    return topo


def test_cuda_collectives_record_what_nccl_did(tmp_path, monkeypatch):
    """NCCL's own INFO log (NCCL_DEBUG_FILE beside each worker's log) names the transport of the
    pair's collectives, and it is the one NCCL's route rule gives for the pair's class, this
    host's CPU and these NCCL settings: P2P on NVLink/close PCIe pairs, SHM beyond its level.
    (A user's own NCCL_DEBUG_FILE is kept and then nothing is read: the next test.)"""
    from gputopo.bench.routes import nccl_route

    monkeypatch.delenv("NCCL_DEBUG_FILE", raising=False)
    topo = _two_gpus()
    pair = topo.pairs[0]
    peer_ok = all(pair.p2p.get(c) == "OK" for c in ("read", "write"))
    want = {"p2p": "P2P", "host": "SHM"}[nccl_route(str(pair.link_class), peer_ok,
                                                     cpu_vendor=topo.host.cpu_vendor)]
    for m in _collectives(topo, tmp_path):
        nt = m.extra["nccl_transport"]
        assert "not_available" not in nt, nt
        assert nt["source"] == "nccl-debug" and nt["channels"] > 0
        assert nt["kind"] == want, (pair.gpus, str(pair.link_class), nt)
        assert nt["gpus"] == list(m.gpus[:2])


def test_a_users_nccl_debug_file_is_kept_and_said(tmp_path, monkeypatch):
    topo = _two_gpus()
    mine = str(tmp_path / "mine.%h.%p.log")
    monkeypatch.setenv("NCCL_DEBUG_FILE", mine)
    for m in _collectives(topo, tmp_path):
        why = m.extra["nccl_transport"].get("not_available", "")
        assert "set by the user" in why and mine in why
