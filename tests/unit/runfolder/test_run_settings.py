"""Issue 16, item 7: a run keeps the settings it was measured under in its run.json, and a
report or a ``--resume`` uses those, not the reader's shell: the NCCL_* / TORCH_NCCL_*
variables (NCCL's route for a pair depends on them) and the numerics options.
Run as a user runs it: `gputopo bench --sim ...` in this process, then the shell changes."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from gputopo.runfolder.settings import NCCL_PREFIXES, nccl_settings, use_saved_nccl_settings
from gputopo.runfolder.layout import NUMERICS_JSONL, RUN_JSON
from helpers.cli import gputopo_here


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """`NCCL_P2P_LEVEL=SYS gputopo bench --sim seed-8gpu --pairs 5,6 --tests p2p,numerics
    --steps 3 --quick`: P2P across NODE is allowed by that setting only."""
    mp = pytest.MonkeyPatch()
    out = tmp_path_factory.mktemp("settings") / "run"
    mp.setenv("NCCL_P2P_LEVEL", "SYS")
    mp.setenv("TORCH_NCCL_BLOCKING_WAIT", "1")
    mp.delenv("NCCL_P2P_DISABLE", raising=False)
    from gputopo.cli.main import main

    try:
        with pytest.raises(SystemExit):
            main(["bench", "--sim", "seed-8gpu", "--pairs", "5,6", "--tests", "p2p,numerics",
                  "--steps", "3", "--quick", "--json", "--out", str(out)])
    finally:
        mp.undo()
    return out


@pytest.mark.slow
def test_run_json_records_nccl_settings_and_numerics_options(run_dir):
    info = json.loads((run_dir / RUN_JSON).read_text())
    assert info["nccl_env"] == {"NCCL_P2P_LEVEL": "SYS", "TORCH_NCCL_BLOCKING_WAIT": "1"}
    assert info["numerics_options"]["steps"] == 3 and info["numerics_options"]["model"] == "mlp"


@pytest.mark.slow
def test_report_judges_nccl_routes_with_the_runs_settings(run_dir, monkeypatch):
    """The reader's shell has no NCCL_P2P_LEVEL: NCCL would avoid NODE there, but in the run
    it used P2P across it, so the remedy is to disable P2P, not "already avoids"."""
    from gputopo.report.analysis import analyze
    from gputopo.report.run_folder import load_run

    monkeypatch.delenv("NCCL_P2P_LEVEL", raising=False)
    corrupt = [f for f in analyze(load_run(run_dir)).findings if f.kind == "corrupt"]
    assert corrupt
    ev = corrupt[0].evidence
    assert ev["nccl_route"] == "p2p" and "NCCL_P2P_LEVEL=SYS" in ev["nccl_route_reason"]
    assert any(r.startswith("set NCCL_P2P_DISABLE=1") for r in corrupt[0].remedies)


@pytest.fixture
def nccl_env_kept():
    """A resume sets this process's NCCL variables to the run's (the workers inherit them):
    put the test process's own back afterwards."""
    before = {k: v for k, v in os.environ.items() if k.startswith(NCCL_PREFIXES)}
    yield
    for k in [k for k in os.environ if k.startswith(NCCL_PREFIXES)]:
        del os.environ[k]
    os.environ.update(before)


@pytest.mark.slow
def test_resume_uses_the_runs_numerics_options_and_nccl_settings(run_dir, tmp_path, monkeypatch,
                                                                 nccl_env_kept):
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    (copy / NUMERICS_JSONL).unlink()  # the numerics phase is still to do
    info = json.loads((copy / RUN_JSON).read_text())
    (copy / RUN_JSON).write_text(json.dumps({**info, "status": "interrupted"}))
    monkeypatch.delenv("NCCL_P2P_LEVEL", raising=False)
    monkeypatch.setenv("NCCL_P2P_DISABLE", "1")
    code, _, err = gputopo_here("bench", "--resume", str(copy), "--steps", "9")
    assert code == 2 and "--steps is ignored with --resume" in err
    code, _, err = gputopo_here("bench", "--resume", str(copy), "--json")
    assert code in (0, 1), err
    assert ("--resume runs with the run's NCCL settings: NCCL_P2P_DISABLE unset (this shell: 1); "
            "NCCL_P2P_LEVEL=SYS (this shell: unset)") in err
    recs = [json.loads(ln) for ln in (copy / NUMERICS_JSONL).read_text().splitlines() if ln.strip()]
    assert recs and {r["steps"] for r in recs} == {3}  # not the default 50 of this command line
    assert {len(r["losses"]) for r in recs} == {3}


@pytest.mark.slow
def test_a_resume_of_a_run_without_numerics_runs_none(tmp_path, nccl_env_kept):
    out = tmp_path / "run"
    code, _, err = gputopo_here("bench", "--sim", "seed-8gpu", "--pairs", "6,7", "--tests", "p2p",
                                "--quick", "--json", "--out", str(out))
    assert code in (0, 1), err
    assert json.loads((out / RUN_JSON).read_text())["numerics_options"] is None
    code, _, err = gputopo_here("bench", "--resume", str(out), "--json")
    assert code in (0, 1), err
    assert not (out / NUMERICS_JSONL).exists() or not (out / NUMERICS_JSONL).read_text().strip()


def test_saved_nccl_settings_replace_the_shells():
    env = {"NCCL_IB_DISABLE": "1", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3", "PATH": "/bin"}
    assert nccl_settings(env) == {"NCCL_IB_DISABLE": "1", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}
    changes = use_saved_nccl_settings({"NCCL_IB_DISABLE": "0", "NCCL_ALGO": "Ring"}, env)
    assert env == {"NCCL_IB_DISABLE": "0", "NCCL_ALGO": "Ring", "PATH": "/bin"}
    assert changes == ["NCCL_ALGO=Ring (this shell: unset)", "NCCL_IB_DISABLE=0 (this shell: 1)",
                       "TORCH_NCCL_ASYNC_ERROR_HANDLING unset (this shell: 3)"]


def test_a_cluster_run_json_records_the_nccl_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("NCCL_IB_HCA", "mlx5_0,mlx5_1")
    f = tmp_path / "c.toml"
    f.write_text('[cluster]\nnodes = 3\nnode = "pcie-4gpu"\n')
    out = tmp_path / "run"
    code, _, err = gputopo_here("cluster", "--sim", str(f), "--pattern", "pairwise", "--out", str(out))
    assert code == 0, err
    assert json.loads((out / RUN_JSON).read_text())["nccl_env"]["NCCL_IB_HCA"] == "mlx5_0,mlx5_1"
