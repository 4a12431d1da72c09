"""make gpu-check's one-rank NCCL probe starts its bench worker with the environment the bench
runner gives cuda workers (gputopo/bench/worker_env.py), not the shell's as it is: a shell with
TORCH_NCCL_BLOCKING_WAIT=1 or CUDA_LAUNCH_BLOCKING=1 made every sample of the probe a
hold_too_short one on a GPU while `gputopo bench` itself ran without them."""

from __future__ import annotations

import sys

from helpers.paths import REPO

sys.path.insert(0, str(REPO / "tools"))

import gpu_check_probe  # noqa: E402

from gputopo.bench.api import _worker_config  # noqa: E402
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

    bench = _worker_config(Topology(gpus=[Gpu(nvml_index=0)], pairs=[]), "cuda", None, 60.0, 1)
    probe = gpu_check_probe.worker_config("cuda", {0: {"pci_bus_id": None}}, 60.0)
    assert probe["env"] == bench["env"]


def test_the_cpu_fabric_keeps_the_shell_as_it_is():
    env = gpu_check_probe.worker_config("cpu", {}, 60.0, env=SHELL)["env"]
    assert env == SHELL
