"""The cuda fabric on real GPUs: reference on one GPU, real nn.DataParallel, DDP over NCCL."""

from __future__ import annotations

import pytest


def _two_gpus():
    try:
        import torch

        return torch.cuda.is_available() and torch.cuda.device_count() >= 2
    except Exception:
        return False


@pytest.fixture
def real_pair():
    """This machine's topology (NVML) and its first GPU pair; skips without two CUDA GPUs."""
    if not _two_gpus():
        pytest.skip("needs two CUDA GPUs")
    from gputopo.probe.scan import scan_real

    topo = scan_real()
    return topo, topo.pairs[0].gpus


@pytest.mark.gpu
@pytest.mark.slow
def test_cuda_pair_three_ways(tmp_path, real_pair):
    from gputopo.numerics import run_numerics, validate_options

    topo, pair = real_pair
    run = run_numerics(topo, [pair], "cuda", options=validate_options(steps=20),
                       run_dir=str(tmp_path), timeout_s=300)
    v = run.verdicts()[pair]
    assert v["reference"] == "ok" and v["ddp"] == "ok"
    assert v["dp"] in ("ok", "nan", "diverged")  # a broken peer path is a finding, not a failure
    dp = next(r for r in run.results if r.way == "dp")
    assert dp.dp_split == [32, 32]
    assert f"{pair[0]},{pair[1]}" in run.tolerances


@pytest.mark.gpu
@pytest.mark.slow
def test_cuda_nan_injection(tmp_path, real_pair):
    from gputopo.numerics import run_numerics, validate_options

    topo, pair = real_pair
    run = run_numerics(topo, [pair], "cuda", timeout_s=300,
                       options=validate_options(steps=10, inject_nan_at_step=4))
    for way in ("dp", "ddp"):
        rec = next(r for r in run.results if r.way == way)
        assert (rec.verdict, rec.step) == ("nan", 4), rec.summary()
