"""tools/gpu_check.py (`make gpu-check`), the GPU acceptance run, tested here without a GPU:
against the fake nvidia-smi (tests/fake_nvidia_smi: outputs written from NVIDIA's documented
formats, not read from a GPU) and the built-in sims. What this proves is the plumbing: every step
bounded and recorded, a hang costing its timeout and one line, a failure its traceback, the
comparison saying `differs` where nvidia-smi and gputopo disagree."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TOOLS = REPO / "tools"


def _probe(*args, timeout=120):
    return subprocess.run([sys.executable, str(TOOLS / "gpu_check_probe.py"), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout,
                          env={**_env(), "PYTHONPATH": str(REPO)})


def _env():
    import os

    return dict(os.environ)


@pytest.mark.slow
def test_one_rank_all_reduce_goes_through_the_bench_worker(tmp_path):
    """The bench's collective path at world size 1 (a bench worker, its process group, the
    all_reduce Spec): on the cpu fabric here, over gloo. Before the worker built a group for a
    one-rank collective step this failed with "Default process group has not been initialized"."""
    out = tmp_path / "nccl.json"
    proc = _probe("nccl", "--fabric", "cpu", "--size", "1M", "--samples", "3", "--log-dir",
                  str(tmp_path), "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["verified"] is True and doc["wrong"] == 0 and doc["error"] is None
    assert doc["backend"] == "gloo" and doc["world_size"] == 1
    m = doc["measurement"]
    assert m["test"] == "collective.all_reduce" and m["extra"]["ranks"] == 1
    assert len(m["samples_s"]) == 3 and m["timing"] == "wall"
    assert (tmp_path / "nccl-one-rank-worker.log").is_file()
