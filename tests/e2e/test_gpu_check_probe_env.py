"""make gpu-check on a GPU machine: its one-rank NCCL probe starts its bench worker with the environment the bench
runner gives cuda workers (gputopo/bench/worker_env.py), not the shell's as it is: a shell with
TORCH_NCCL_BLOCKING_WAIT=1 or CUDA_LAUNCH_BLOCKING=1 made every sample of the probe a
hold_too_short one on a GPU while `gputopo bench` itself ran without them; and its GPU tests
step on a python without pytest says so (n/a) instead of failing the check."""

from __future__ import annotations

import sys

from helpers.paths import REPO

sys.path.insert(0, str(REPO / "tools"))

import gpu_check  # noqa: E402
import gpu_check_probe  # noqa: E402

from gputopo.bench.api import worker_config  # noqa: E402
from gputopo.bench.worker_env import TIMING_ENV  # noqa: E402

SHELL = {"PATH": "/usr/bin", "TORCH_NCCL_BLOCKING_WAIT": "1", "NCCL_BLOCKING_WAIT": "1",
         "CUDA_LAUNCH_BLOCKING": "1", "NCCL_P2P_LEVEL": "NVL"}


def test_the_cuda_worker_runs_with_the_benchs_timing_variables():
    env = gpu_check_probe.worker_config("cuda", {0: {"pci_bus_id": None}}, 60.0, env=SHELL)["env"]
    for name, (value, _why) in TIMING_ENV.items():
        assert env[name] == value, name
    assert "NCCL_BLOCKING_WAIT" not in env  # the legacy name the TORCH_NCCL_ one replaces
    assert env["NCCL_P2P_LEVEL"] == "NVL" and env["PATH"] == "/usr/bin"  # the user's own kept


def test_the_same_environment_as_the_bench_runner(monkeypatch):
    for k, v in SHELL.items():
        monkeypatch.setenv(k, v)
    from gputopo.model.topology import Gpu, Topology

    bench = worker_config(Topology(gpus=[Gpu(nvml_index=0)], pairs=[]), "cuda", None, 60.0, 1)
    probe = gpu_check_probe.worker_config("cuda", {0: {"pci_bus_id": None}}, 60.0)
    assert probe["env"] == bench["env"]


def test_the_cpu_fabric_keeps_the_shell_as_it_is():
    env = gpu_check_probe.worker_config("cpu", {}, 60.0, env=SHELL)["env"]
    assert env == SHELL


# ----------------------------------------------------------------------------- pytest-gpu without pytest


def test_pytest_gpu_without_pytest_is_said_not_failed(tmp_path):
    """pytest is no requirement of gputopo (a GPU machine with the requirements may lack it):
    `python -m pytest` then ends "No module named pytest" (Python's own words for -m of a
    missing module), which is n/a saying so, not a failed step that fails the whole check."""
    from types import SimpleNamespace

    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "20-pytest-gpu.err").write_text("/usr/bin/python3: No module named pytest\n")
    (tmp_path / "logs" / "20-pytest-gpu.out").write_text("")
    check = SimpleNamespace(dir=tmp_path, path=tmp_path.joinpath)
    r = gpu_check.Result(20, "pytest-gpu", "pytest", rc=1, stdout="logs/20-pytest-gpu.out",
                         stderr="logs/20-pytest-gpu.err")
    verdict, line = gpu_check._j_pytest(check, r)
    assert verdict == gpu_check.NA, line
    assert "pytest is not installed" in line and "did not run" in line


def test_pytest_gpu_that_crashes_is_still_a_failure(tmp_path):
    from types import SimpleNamespace

    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "20-pytest-gpu.err").write_text("Traceback (most recent call last):\nKeyError: 'x'\n")
    (tmp_path / "logs" / "20-pytest-gpu.out").write_text("INTERNALERROR> KeyError\n")
    check = SimpleNamespace(dir=tmp_path, path=tmp_path.joinpath)
    r = gpu_check.Result(20, "pytest-gpu", "pytest", rc=3, stdout="logs/20-pytest-gpu.out",
                         stderr="logs/20-pytest-gpu.err")
    assert gpu_check._j_pytest(check, r)[0] == gpu_check.FAILED
