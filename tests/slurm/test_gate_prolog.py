"""`gputopo gate --allocated --as slurm-prolog` as slurm.conf's ``Prolog`` (issue 50), on a real
slurmctld and slurmd (Debian's 22.05; tests/helpers/slurm.py), with batch jobs (``sbatch``):

- the job's GPUs come from Slurm itself: ``gres.conf`` declares two stand-in GPU device files
  (character devices with /dev/null's numbers; slurmd refuses regular files) and the job asks
  ``--gres=gpu:2``, so slurmd sets ``SLURM_JOB_GPUS=0,1`` in the Prolog's environment, which
  ``--allocated`` maps through the sim's NVML minor numbers to its GPUs 0 and 1 (nothing in the
  environment is set by the test);
- a healthy sim: gate passes, the Prolog exits 0, the job runs and completes;
- a faulty sim (every NVLink of the bridged pair down): gate fails, the Prolog exits non-zero,
  and Slurm itself drains the node with its reason ``Prolog error`` and requeues the batch job
  held (``launch_failed_requeued_held``); gate keeps its verdict in the state folder;
- then ``health --as slurm-healthcheck`` (the node's HealthCheckProgram, every 3 s, on the
  healthy sim of the same machine) never resumes that drain, and its log line says gate's
  verdict explains it, with gate's reason.
"""

from __future__ import annotations

import json
import shlex
import sys

import pytest

from helpers.slurm import GATE_FAULTY, GATE_HEALTHY, SETTLE_S, LocalSlurm, running, slurm_or_skip

pytestmark = [pytest.mark.slow, pytest.mark.slurm]


@pytest.fixture
def slurm(tmp_path_factory):
    programs = slurm_or_skip()
    root = tmp_path_factory.mktemp("slurm")  # short: munged's socket path must fit 108 bytes
    (root / "node.toml").write_text(GATE_HEALTHY)  # what the health check reads
    (root / "gate.toml").write_text(GATE_HEALTHY)  # what the Prolog's gate reads
    state = root / "gputopo-state"  # the health check's --state-dir (LocalSlurm.write): one folder
    # --budget 60: gate's default 10 s is the time model's on a real node; here two loaded cores,
    # slurmd, the health checks and the sim's workers share it, and a pair not measured in time
    # is "not judged" (exit 0: the job would start unjudged, which this test would not tell
    # from a pass). Slurm 22.05 sets no Prolog time limit by default (PrologEpilogTimeout).
    prolog = (f"{shlex.quote(sys.executable)} -m gputopo gate --allocated --as slurm-prolog --budget 60 "
              f"--sim {shlex.quote(str(root / 'gate.toml'))} --state-dir {shlex.quote(str(state))}")
    yield from running(LocalSlurm(root, programs, root / "node.toml", prolog=prolog, gpus=2))


def _gate_sim(slurm: LocalSlurm, text: str) -> None:
    (slurm.root / "gate.toml").write_text(text)


def test_a_healthy_sim_lets_the_job_run(slurm):
    job = slurm.sbatch("--gres=gpu:2")
    slurm.wait_for(lambda: slurm.job(job).get("JobState") == "COMPLETED", f"job {job} completed", SETTLE_S)
    assert slurm.job_output(job).strip() == "ran"
    runs = slurm.prolog_runs()
    assert [r["job"] for r in runs] == [job] and runs[0]["gpus"] == "0,1" and runs[0]["rc"] == "0", runs
    node = slurm.node()
    assert not node.drained, f"{node}\n{slurm.diagnostics()}"
    kept = json.loads((slurm.state_dir / "gate-last.json").read_text())
    assert kept["verdict"] == "pass" and kept["selection"]["gpus"] == [0, 1]
    assert "SLURM_JOB_GPUS=0,1" in kept["selection"]["source"]


def test_a_faulty_sim_drains_the_node_and_requeues_the_job_held_and_health_leaves_it(slurm):
    _gate_sim(slurm, GATE_FAULTY)
    job = slurm.sbatch("--gres=gpu:2")
    slurm.wait_for(lambda: slurm.node().drained and slurm.job(job).get("Reason") == "launch_failed_requeued_held",
                   "the node drained and the job requeued held", SETTLE_S)
    node, state = slurm.node(), slurm.job(job)
    assert node.reason == "Prolog error", node  # Slurm's own reason: gate drains nothing itself
    assert state["JobState"] == "PENDING" and int(state["Restarts"]) >= 1 and state["BatchFlag"] == "1", state
    out = slurm.job_output(job)  # the job never ran; slurmd wrote why in its output file
    assert "ran" not in out and "Error running slurm prolog: 1" in out, out
    runs = slurm.prolog_runs()
    assert runs and runs[0]["job"] == job and runs[0]["gpus"] == "0,1" and runs[0]["rc"] != "0", runs
    kept = json.loads((slurm.state_dir / "gate-last.json").read_text())
    assert kept["verdict"] == "fail" and kept["reason"].startswith("gputopo: nvlink-down gpu0 "), kept
    assert kept["exit_code"] == int(runs[0]["rc"]) == 1, (kept["exit_code"], runs)

    # health on the healthy sim of the same machine: passes, never resumes Slurm's drain, and
    # says gate's verdict explains it (its line, appended to hc.out by the wrapper)
    slurm.wait_checks(3)
    node = slurm.node()
    assert node.drained and node.reason == "Prolog error", f"{node}\n{slurm.diagnostics()}"
    assert slurm.job(job).get("Reason") == "launch_failed_requeued_held"
    last = [ln for ln in slurm.hc_out.read_text().splitlines() if ln.startswith("gputopo health:")][-1]
    assert "pass" in last and "explained by gate fail" in last and kept["reason"] in last, last
    assert "left as it is" in last
    assert set(slurm.checks_done()) == {0}, slurm.diagnostics()
