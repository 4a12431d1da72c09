"""Issue 33 item 5 (the bench's half): a user's own TORCH_NCCL_BLOCKING_WAIT=1 reached the
bench's workers (they copied the user's environment), every synchronous collective then
blocked until the hold kernel and the collective had run, and every sample was flagged
hold_too_short. The cuda workers (the bench's and the numerics' NCCL pool) now set the
variables that change what is timed, and run.json records what they set, the value they
replaced and why (gputopo/bench/worker_env.py)."""

from __future__ import annotations

import json

from gputopo.bench.worker_env import LEGACY_NAMES, TIMING_ENV, WORKER_ENV_KEY, worker_env


def test_the_workers_set_what_changes_the_timing_and_keep_the_rest():
    user = {"TORCH_NCCL_BLOCKING_WAIT": "1", "NCCL_BLOCKING_WAIT": "maybe",
            "CUDA_LAUNCH_BLOCKING": "1", "NCCL_P2P_LEVEL": "SYS", "HOME": "/h",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}
    env, record = worker_env(user)
    assert env["TORCH_NCCL_BLOCKING_WAIT"] == "0" and env["CUDA_LAUNCH_BLOCKING"] == "0"
    assert env["TORCH_NCCL_NAN_CHECK"] == "0" and env["TORCH_NCCL_ENABLE_TIMING"] == "0"
    # torch reads the legacy name too (and fails on a value that is not a boolean): dropped
    assert "NCCL_BLOCKING_WAIT" not in env
    # NCCL's own settings, error handling and the rest are the user's
    assert env["NCCL_P2P_LEVEL"] == "SYS" and env["HOME"] == "/h"
    assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
    assert record["TORCH_NCCL_BLOCKING_WAIT"] == {
        "value": "0", "user_value": "1", "why": TIMING_ENV["TORCH_NCCL_BLOCKING_WAIT"][1]}
    assert "hold_too_short" in record["TORCH_NCCL_BLOCKING_WAIT"]["why"]
    assert record["NCCL_BLOCKING_WAIT"]["value"] is None
    assert record["NCCL_BLOCKING_WAIT"]["user_value"] == "maybe"
    assert record["TORCH_NCCL_NAN_CHECK"]["user_value"] is None  # set all the same
    assert set(LEGACY_NAMES.values()) <= set(TIMING_ENV)
    assert user["TORCH_NCCL_BLOCKING_WAIT"] == "1"  # the caller's mapping is left alone


def test_a_cuda_run_gives_its_workers_the_settings_and_records_them(tmp_path, monkeypatch, capsys):
    """run_bench on the cuda fabric up to its workers (there is no GPU here: the visibility
    check, the memory check and the runner are stood in for): what the worker processes are
    given, and what run.json says."""
    import gputopo.bench.api as api
    import gputopo.bench.visible as visible
    from gputopo.bench.api import cpu_topology
    from gputopo.bench.options import BenchOptions

    monkeypatch.setenv("TORCH_NCCL_BLOCKING_WAIT", "1")
    monkeypatch.setenv("NCCL_BLOCKING_WAIT", "1")
    monkeypatch.delenv("CUDA_LAUNCH_BLOCKING", raising=False)
    monkeypatch.setattr(visible, "restrict_to_cuda_visible", lambda *a, **k: (a[1], a[2], None))
    monkeypatch.setattr(api, "_check_memory", lambda *a, **k: None)
    seen = {}

    class Runner:
        def __init__(self, **kw):
            seen.update(kw)
            self.interrupted, self.steps_done = False, 0
            self.measurements, self.failures, self.worker_pids = [], [], []

        def run(self, steps, meanwhile=None):
            seen["steps"] = list(steps)

    monkeypatch.setattr(api, "Runner", Runner)
    opts = BenchOptions(pairs=[(0, 1)], tests=("collectives",), out_dir=str(tmp_path / "run"),
                        progress=False)
    api.run_bench(cpu_topology(2), opts, "cuda")
    env = seen["config"]["env"]
    assert env["TORCH_NCCL_BLOCKING_WAIT"] == "0" and "NCCL_BLOCKING_WAIT" not in env
    assert seen["peer_limit"] == 8  # (item 6: the runner counts peer mappings on cuda)
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    rec = info[WORKER_ENV_KEY]
    assert rec["TORCH_NCCL_BLOCKING_WAIT"]["value"] == "0"
    assert rec["TORCH_NCCL_BLOCKING_WAIT"]["user_value"] == "1"
    assert rec["NCCL_BLOCKING_WAIT"] == {"value": None, "user_value": "1",
                                         "why": rec["NCCL_BLOCKING_WAIT"]["why"]}
    assert rec["CUDA_LAUNCH_BLOCKING"]["user_value"] is None
    assert info["nccl_env"]["TORCH_NCCL_BLOCKING_WAIT"] == "1"  # the user's, as before
    err = capsys.readouterr().err
    assert "TORCH_NCCL_BLOCKING_WAIT=0 (this shell: 1)" in err and "run.json worker_env" in err


def test_cpu_and_sim_workers_keep_the_users_environment(monkeypatch):
    import gputopo.bench.api as api
    from gputopo.bench.api import cpu_topology

    monkeypatch.setenv("TORCH_NCCL_BLOCKING_WAIT", "1")
    config = api.worker_config(cpu_topology(2), "cpu", None, 10.0, 1)
    assert config["env"]["TORCH_NCCL_BLOCKING_WAIT"] == "1"


def test_the_numerics_nccl_workers_get_the_same_settings(tmp_path, monkeypatch):
    import gputopo.numerics.worker as nw

    monkeypatch.setenv("TORCH_NCCL_BLOCKING_WAIT", "1")
    monkeypatch.setenv("TORCH_NCCL_NAN_CHECK", "1")
    envs = {}

    class Ctx:
        def get_start_method(self):
            return "fake"

        def Pipe(self):
            import multiprocessing

            return multiprocessing.Pipe()

        def Process(self, target=None, name=None, daemon=None, args=()):
            envs[(args[2], args[1])] = args[6]  # (backend, rank) -> env (args[0]: its pipe)

            class P:
                pid = None

                def start(self):
                    raise SystemExit  # what is passed is all this test needs

            return P()

    monkeypatch.setattr(nw, "mp_context", lambda: Ctx())
    for backend in ("nccl", "gloo"):
        pool = nw.WorkerPool(backend, log_dir=str(tmp_path))
        try:
            pool._start()
        except SystemExit:
            pass
    assert envs[("nccl", 0)]["TORCH_NCCL_BLOCKING_WAIT"] == "0"
    assert envs[("nccl", 1)]["TORCH_NCCL_NAN_CHECK"] == "0"
    assert envs[("gloo", 0)]["TORCH_NCCL_BLOCKING_WAIT"] == "1"
