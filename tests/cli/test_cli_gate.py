"""`gputopo gate` as a Slurm prolog, a container or a person runs it: the GPUs it takes from the
environment, the copies it really makes through the bench's pool on the sim fabric, the verdict
per dialect and its exit code, and the verdict kept in the state folder. Every test starts the
workers' processes (slow)."""

import json

import pytest

from gputopo.model.reason import NPD_BYTES, REASON_RE
from helpers.cli import gputopo_here

pytestmark = pytest.mark.slow


def gate(*args, env=None, state=None):
    extra = ["--state-dir", str(state)] if state is not None else []
    return gputopo_here("gate", *args, *extra, env=env, timeout=180)


@pytest.mark.parametrize("sim, job_gpus, code, start", [
    ("dgx-h100", "0,1", 0, "gputopo gate: SIMULATED pass: 2 GPU(s) ok, 1 pair(s) verified"),
    ("dgx-h100-reset-pending", "2,3", 1, "gputopo gate: SIMULATED fail: gputopo: xid gpu3 recovery action pending"),
    ("dgx-h100-unregistered", "4,5", 1, "gputopo gate: SIMULATED fail: gputopo: nvlink-fabric node fabric not registered"),
    ("dgx-h100-p2p-not-ok", "2,5", 0, "gputopo gate: SIMULATED warn: gputopo: p2p-unsupported gpus2,5"),
    ("h100-sxm-1gpu", "0", 0, "gputopo gate: SIMULATED pass: 1 GPU(s) ok, 0 pair(s) verified (one GPU"),
])
def test_a_prolog_fails_only_on_a_failure(sim, job_gpus, code, start, tmp_path):
    r = gate("--sim", sim, "--allocated", "--as", "slurm-prolog", "--budget", "30",
             env={"SLURM_JOB_GPUS": job_gpus, "SLURM_JOB_ID": "4242", "CUDA_VISIBLE_DEVICES": None,
                  "NVIDIA_VISIBLE_DEVICES": None},
             state=tmp_path)
    assert r.returncode == code, (r.stdout, r.stderr)
    line = r.stdout.rstrip("\n")
    assert "\n" not in line and line.startswith(start), line
    assert f"SLURM_JOB_GPUS={job_gpus}" in line and str(tmp_path / "gate-last.json") in line
    kept = json.loads((tmp_path / "gate-last.json").read_text())
    assert kept["command"] == "gate" and kept["exit_code"] == code and kept["job"] == "4242"
    assert kept["selection"]["source"] == f"SLURM_JOB_GPUS={job_gpus}"
    if code:
        assert REASON_RE.match(kept["reason"]) and kept["reason"] in line and kept["problems"]


def test_a_bad_allocation_never_drains_unless_asked(tmp_path):
    env = {"SLURM_JOB_GPUS": "7", "CUDA_VISIBLE_DEVICES": None, "NVIDIA_VISIBLE_DEVICES": None}
    r = gate("--sim", "h100-sxm-1gpu", "--allocated", "--as", "slurm-prolog", env=env, state=tmp_path)
    assert r.returncode == 0 and "no GPU has device number 7" in r.stderr
    assert r.stdout.startswith("gputopo gate: could not run: --allocated: SLURM_JOB_GPUS=7") and "exit 0" in r.stdout
    assert json.loads((tmp_path / "gate-last.json").read_text())["verdict"] == "could-not-run"
    r = gate("--sim", "h100-sxm-1gpu", "--allocated", "--as", "slurm-prolog", "--on-unknown", "drain", env=env)
    assert r.returncode == 1 and "exit 1" in r.stdout
    r = gate("--sim", "h100-sxm-1gpu", "--allocated", "--as", "nagios", env=env)
    assert r.returncode == 3 and r.stdout.startswith("UNKNOWN - gputopo gate could not run")
    r = gate("--sim", "h100-sxm-1gpu", "--allocated", env=env)
    assert r.returncode == 2 and json.loads(r.stdout)["verdict"] == "could-not-run"
    r = gate("--sim", "h100-sxm-1gpu", "--budget", "nan", "--as", "slurm-prolog")
    assert r.returncode == 0 and "could not run" in r.stdout


def test_copies_at_pcie_rate_are_found_by_measuring(tmp_path):
    r = gate("--sim", "dgx-h100-nvlink-at-pcie", "--gpus", "0,1,6", "--budget", "60", state=tmp_path)
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["verdict"] == "warn", doc["summary"]
    pairs = {tuple(p["gpus"]): p for p in doc["pairs"]}
    slow = pairs[(1, 6)]
    assert (slow["status"], slow["scope"], slow["kind"]) == ("degraded", "link", "slow")
    assert len(slow["copies"]) == 2 and all(c["gbps"] <= 1.25 * 63 and c["wrong"] == 0 for c in slow["copies"])
    assert all(c["timing"] == "modeled" for p in doc["pairs"] for c in p["copies"])  # said: the sim's clock
    assert pairs[(0, 1)]["status"] == "ok" and min(c["gbps"] for c in pairs[(0, 1)]["copies"]) > 1.25 * 63
    assert doc["reason"].startswith("gputopo: slow gpus1,6 NVLinks up but copies at PCIe/staged rate")
    assert doc["best_other_set"]["gpus"] and not {1, 6} <= set(doc["best_other_set"]["gpus"])


def test_wrong_data_on_a_host_path_is_broken(tmp_path):
    r = gate("--sim", "seed-8gpu", "--gpus", "5,6", "--as", "nagios", "--budget", "60")
    assert r.returncode == 2, r.stdout
    first = r.stdout.splitlines()[0]
    assert first.startswith("CRITICAL - gputopo: corrupt host 1 PCIe pair(s): peer copy wrong data") and "| time=" in first
    assert "SIMULATED machine 'seed-8gpu'" in r.stdout and "[host-path]" in r.stdout
    r = gate("--sim", "seed-8gpu", "--gpus", "5,6", "--as", "npd", "--budget", "60")
    assert r.returncode == 1 and len(r.stdout.rstrip("\n").encode()) <= NPD_BYTES


def test_a_hung_copy_is_a_broken_link_and_no_worker_is_left(tmp_path):
    desc = tmp_path / "hang.toml"
    desc.write_text('extends = "dgx-h100"\nname = "dgx-h100-hang"\n[[fault]]\nwhere = "pair:0,1"\nwhat = "hang"\n')
    r = gate("--sim", desc, "--gpus", "0-2", "--budget", "8")
    doc = json.loads(r.stdout)
    pairs = {tuple(p["gpus"]): p for p in doc["pairs"]}
    assert r.returncode == 1 and (pairs[(0, 1)]["status"], pairs[(0, 1)]["kind"]) == ("broken", "hang")
    assert doc["reason"].startswith("gputopo: hang gpus0,1 ")


def test_a_container_gives_uuids_and_the_all_reduce_runs(tmp_path):
    u = ["GPU-3ed5d5ff-9be4-e5b9-b747-09d91e685d0f", "GPU-a2b26654-d65d-86f1-2e93-872933e1fe6e",
         "GPU-753af783-088f-6967-967f-d635dea32963"]  # dgx-h100's GPUs 4, 0, 5
    r = gate("--sim", "dgx-h100", "--allocated", "--measure", "copy+allreduce", "--budget", "60",
             env={"SLURM_JOB_GPUS": None, "CUDA_VISIBLE_DEVICES": None, "NVIDIA_VISIBLE_DEVICES": ",".join(u)})
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["verdict"] == "pass", doc["summary"]
    assert doc["selection"]["gpus"] == [0, 4, 5]
    assert [g["uuid"] for g in doc["gpus"]] == [u[1], u[0], u[2]]
    assert doc["allreduce"]["status"] == "ok" and "over 3 GPUs verified" in doc["allreduce"]["detail"]


def test_the_8_gpu_sim_measures_every_pair_or_says_why(tmp_path):
    r = gate("--sim", "dgx-h100", "--budget", "10", state=tmp_path)
    doc = json.loads(r.stdout)
    assert len(doc["pairs"]) == 28
    left = {tuple(p) for p in doc["plan"]["left_out"]}
    for p in doc["pairs"]:
        if len(p["copies"]) == 2:
            assert p["status"] == "ok"
        else:  # not measured: never ok, and it says why
            assert p["status"] == "not-judged" and ("time model" in p["detail"] or "budget" in p["detail"]), p
            assert tuple(p["gpus"]) in left or "budget" in p["detail"]
    assert doc["verdict"] == ("pass" if all(len(p["copies"]) == 2 for p in doc["pairs"]) else "not-judged")
    assert doc["plan"]["costs"]["measured"] is True and doc["budget_s"] == 10


def test_a_budget_too_small_measures_nothing_and_says_so(tmp_path):
    r = gate("--sim", "dgx-h100", "--gpus", "0-3", "--budget", "0.5")
    doc = json.loads(r.stdout)
    assert r.returncode == 2 and doc["verdict"] == "not-judged"
    assert all(p["status"] == "not-judged" and "time model" in p["detail"] for p in doc["pairs"])
    r = gate("--sim", "dgx-h100", "--gpus", "0-3", "--budget", "0.5", "--as", "slurm-prolog")
    assert r.returncode == 0 and "SIMULATED not-judged: not judged: 6 pair(s): left out by the time model" in r.stdout
    r = gate("--sim", "dgx-h100", "--gpus", "0-3", "--budget", "0.5", "--as", "slurm-prolog", "--on-unknown", "drain",
             state=tmp_path)
    kept = json.loads((tmp_path / "gate-last.json").read_text())
    assert r.returncode == 1 and kept["exit_code"] == 1
    assert REASON_RE.match(kept["reason"]) and kept["reason"].startswith("gputopo: not-judged node 6 pair(s)")


@pytest.mark.parametrize("args, words", [
    (["--gpus", "0,1", "--allocated"], "--gpus and --allocated are exclusive"),
    (["--gpus", "0,9"], "GPU 9 does not exist"),
    (["--gpus", ""], "--gpus"),
    (["--fabric", "cuda"], "--fabric cuda measures this machine's real GPUs"),
    (["--on-unknown", "drain"], "--on-unknown is ignored without --as slurm-prolog"),
])
def test_bad_options_are_one_line(args, words):
    r = gate("--sim", "dgx-h100", *args)
    assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr


def test_the_declared_layer_is_the_machines_own_history(tmp_path):
    """A lab box scanned and benched with --history (the real recording path), then gated with its
    0-1 NVLink bridge gone, then with its PCIe pair 0,2 at a third of its benched rate."""
    from helpers.gate_box import box

    db = str(tmp_path / "h.sqlite")
    good = box(tmp_path, "good")
    r = gputopo_here("bench", "--sim", good, "--tests", "p2p", "--sizes", "4M", "--history", db,
                     "--out", str(tmp_path / "run"), timeout=180)
    assert r.returncode == 0, r.stderr
    r = gate("--sim", box(tmp_path, "bad", bridge_01=False, day=5), "--gpus", "all", "--budget", "60",
             "--history", db)
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "warn" and doc["reason"].startswith("gputopo: nvlink-down gpu0 0 active NVLink(s), 4 in "
                                                                 "this machine's history"), doc["reason"]
    pair = {tuple(p["gpus"]): p for p in doc["pairs"]}
    assert pair[(0, 1)]["layers"]["declared"].startswith("this machine's history: NV4 (run 1 of 2026-11-01)")
    slow = tmp_path / "slow.toml"
    slow.write_text('extends = "good.toml"\nname = "lab-box"\nclock = 2026-11-06T08:00:00Z\n'
                    '[[fault]]\nwhere = "pair:0,2"\nwhat = "slow"\nfactor = 0.3\n')
    doc = json.loads(gate("--sim", str(slow), "--gpus", "all", "--budget", "60", "--history", db).stdout)
    pair = {tuple(p["gpus"]): p for p in doc["pairs"]}
    assert (pair[(0, 2)]["status"], pair[(0, 2)]["kind"]) == ("degraded", "slow")
    assert "this machine's own bench of 2026-11-01" in pair[(0, 2)]["detail"]
    assert pair[(2, 3)]["status"] == "ok" and "own bench of 2026-11-01" in pair[(2, 3)]["detail"]
    assert any("1 run(s) with its links" in n for n in doc["notes"])
    nothing = json.loads(gate("--sim", str(slow), "--gpus", "0,2", "--history", str(tmp_path / "no.sqlite")).stdout)
    assert "declared: no history of this machine" in nothing["gpus"][0]["layers"]["declared"]
    assert nothing["pairs"][0]["status"] == "ok"  # a PCIe pair: no rate declared without the bench
