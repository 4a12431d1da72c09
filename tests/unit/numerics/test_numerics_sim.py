"""The numerics check on simulated machines: healthy twins train fine every way; on seed-8gpu
DataParallel is caught on the pairs whose peer path corrupts, from the numbers alone."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("torch")

from gputopo.numerics import run_numerics, validate_options  # noqa: E402
from gputopo.numerics.sink import done_pairs  # noqa: E402
from gputopo.report.numerics_record import numerics_run_findings  # noqa: E402
from gputopo.sim.description import load_description  # noqa: E402
from gputopo.sim.scan import scan_description  # noqa: E402
from helpers.paths import REPO


def _machine(name):
    desc = load_description(name)
    return desc, scan_description(desc)


def _all_pairs(topo):
    return [p.gpus for p in topo.pairs]


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    desc, topo = _machine("seed-8gpu-healthy")
    run_dir = tmp_path_factory.mktemp("healthy")
    return topo, run_numerics(topo, _all_pairs(topo), "sim", desc, run_dir=str(run_dir),
                              timeout_s=60), run_dir


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    desc, topo = _machine("seed-8gpu")
    return desc, topo, run_numerics(topo, _all_pairs(topo), "sim", desc, timeout_s=60)


@pytest.mark.slow
def test_healthy_sim_every_way_ok_on_every_pair(healthy):
    topo, run, _ = healthy
    verdicts = run.verdicts()
    assert sorted(verdicts) == sorted(_all_pairs(topo))
    for pair, ways in verdicts.items():
        assert ways == {"reference": "ok", "dp": "ok", "ddp": "ok"}, pair
    assert numerics_run_findings(run) == []
    assert all(r.timing == "modeled" and r.fabric == "sim" for r in run.results)
    assert run.tolerance_lines() and "tolerance" in run.tolerance_lines()[0]


@pytest.mark.slow
def test_healthy_run_folder(healthy):
    topo, run, run_dir = healthy
    lines = (run_dir / "numerics.jsonl").read_text().splitlines()
    assert len(lines) == 3 * len(topo.pairs)
    recs = [json.loads(line, parse_constant=lambda c: pytest.fail(f"non-JSON {c}")) for line in lines]
    dp = [r for r in recs if r["way"] == "dp"]
    assert all(r["dp_split"] == [32, 32] for r in dp)
    assert all(len(r["losses"]) == 50 and r["step"] is None for r in recs)
    assert all(r["tolerance"]["loss_rel"] > 0 for r in recs)
    csv = (run_dir / "numerics_losses.csv").read_text().splitlines()
    assert csv[0] == "gpus,link_class,way,step,loss" and len(csv) == 1 + 50 * len(recs)
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    assert {e["step"] for e in events if e["type"] == "step-done"} == {
        f"numerics:{i}-{j}" for i, j in _all_pairs(topo)}
    assert sorted(done_pairs(run_dir)) == sorted(_all_pairs(topo))


@pytest.mark.slow
def test_seed_8gpu_dataparallel_flagged_on_sys_and_ddp_ok_everywhere(seed):
    desc, topo, run = seed
    verdicts = run.verdicts()
    by_class = {}
    for p in topo.pairs:
        by_class.setdefault(str(p.link_class), []).append(p.gpus)
    assert len(by_class["SYS"]) == 16 and len(by_class["NV4"]) == 4
    for pair in by_class["SYS"]:
        assert verdicts[pair]["dp"] in ("nan", "diverged"), pair
    for pair in by_class["NV4"]:
        assert verdicts[pair]["dp"] == "ok", pair
    for pair, ways in verdicts.items():
        assert ways["ddp"] == "ok" and ways["reference"] == "ok", (pair, ways)
    # Flagged exactly where the machine's peer path damages data (the test reads the
    # description; the detector never does).
    damaged = {p for p in _all_pairs(topo)
               if any(f.what in ("corrupt", "nan") for f in desc.faults_for(*p, path="p2p"))}
    flagged = {p for p, ways in verdicts.items() if ways["dp"] != "ok"}
    assert flagged == damaged
    assert set(by_class["SYS"]) <= flagged


@pytest.mark.slow
def test_seed_8gpu_findings_name_way_step_and_class(seed):
    _, topo, run = seed
    dp_findings = [f for f in numerics_run_findings(run) if f.evidence.get("way") == "dp"]
    flagged = {p for p, ways in run.verdicts().items() if ways["dp"] != "ok"}
    assert {tuple(f.gpus) for f in dp_findings} == flagged
    for f in dp_findings:
        assert f.kind in ("nan", "diverged") and f.severity == "error"
        assert isinstance(f.evidence["step"], int)
        assert f.link_class == str(topo.link_class(*f.gpus))
        assert "DDP on the same GPUs: ok" in f.message
        assert f.cause and any("DistributedDataParallel" in r for r in f.remedies)
    sys_rec = next(r for r in run.results if r.way == "dp" and r.link_class == "SYS")
    assert sys_rec.paths == {"broadcast": "host", "scatter": "p2p", "gather": "p2p",
                             "reduce_add": "host"}
    ddp_sys = next(r for r in run.results if r.way == "ddp" and r.link_class == "SYS")
    assert ddp_sys.paths == {"all_reduce": "host"}
    ddp_nv = next(r for r in run.results if r.way == "ddp" and r.link_class == "NV4")
    assert ddp_nv.paths == {"all_reduce": "p2p"}


@pytest.mark.parametrize("batch, split", [(10, [5, 5]), (9, [5, 4])])
@pytest.mark.slow
def test_dp_split_recorded(batch, split):
    desc, topo = _machine("seed-8gpu-healthy")
    run = run_numerics(topo, [(6, 7)], "sim", desc, validate_options(batch=batch, steps=5),
                       ways=("reference", "dp"))
    dp = next(r for r in run.results if r.way == "dp")
    assert dp.dp_split == split and dp.verdict == "ok"


@pytest.mark.parametrize("machine, bad", [("seed-8gpu-healthy", False), ("seed-8gpu", True)])
@pytest.mark.slow
def test_batchnorm_difference_is_shown_as_expected_and_faults_still_found(machine, bad):
    desc, topo = _machine(machine)
    run = run_numerics(topo, [(0, 4), (6, 7)], "sim", desc,
                       validate_options(model="cnn-bn", steps=20))
    for rec in run.results:
        if rec.way == "reference":
            continue
        assert rec.baseline == "per-replica"
        # Per-replica statistics differ from the whole batch by design, and it is said ...
        assert rec.extra["vs_whole_batch"]["verdict"] in ("diverged", "nan")
        assert "BatchNorm" in rec.extra["vs_whole_batch"]["expected"]
        # ... and the verdict, against per-replica statistics, still finds the SYS corruption.
        expect_bad = bad and rec.way == "dp" and rec.gpus == (0, 4)
        assert (rec.verdict != "ok") == expect_bad, rec.summary()
    assert len(numerics_run_findings(run)) == (1 if bad else 0)


@pytest.mark.slow
def test_hang_and_crash_become_findings_and_the_run_goes_on(tmp_path):
    """A hang and a crash fault: each becomes a finding of its pair and way only, and the run
    goes on with the next (the pool is restarted)."""
    desc, _ = _machine("seed-8gpu-healthy")
    desc = desc.with_faults([{"where": "pair:0,4", "what": "hang", "path": "p2p"},
                             {"where": "pair:1,5", "what": "crash", "path": "all"}])
    topo = scan_description(desc)
    run = run_numerics(topo, [(0, 4), (1, 5), (6, 7)], "sim", desc,
                       validate_options(steps=10), timeout_s=3, run_dir=str(tmp_path))
    v = run.verdicts()
    assert v[(0, 4)] == {"reference": "ok", "dp": "hang", "ddp": "ok"}  # DDP goes via host on SYS
    assert v[(1, 5)] == {"reference": "ok", "dp": "crash", "ddp": "crash"}
    assert v[(6, 7)] == {"reference": "ok", "dp": "ok", "ddp": "ok"}
    kinds = sorted((f.kind, f.evidence["way"], tuple(f.gpus)) for f in numerics_run_findings(run))
    assert kinds == [("crash", "ddp", (1, 5)), ("crash", "dp", (1, 5)), ("hang", "dp", (0, 4))]
    events = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    # recorded as they happened, as records (the report makes the findings from them)
    assert not [e for e in events if e["type"] == "finding"]
    recs = [json.loads(x) for x in (tmp_path / "numerics.jsonl").read_text().splitlines()]
    assert sorted((r["verdict"], r["way"], tuple(r["gpus"])) for r in recs
                  if r["verdict"] in ("hang", "crash")) == kinds
    crash = next(f for f in numerics_run_findings(run) if f.kind == "crash")
    assert "SIGABRT" in crash.message
    # found once 3 s passed without progress, not sooner, and seconds later at most, even on a
    # busy machine (the healthy ways, longer than 3 s in all there, are not called hung)
    hang = next(f for f in numerics_run_findings(run) if f.kind == "hang")
    assert 3 <= hang.evidence["wall_s"] < 60 and "no progress for 3 s" in hang.message


@pytest.mark.slow
def test_ctrl_c_in_the_numerics_marks_the_run_interrupted(tmp_path, monkeypatch):
    """Ctrl-C during the numerics phase of a job: the result says interrupted (the CLI then exits
    130 and names --resume), run.json says so too (it said "complete" from the bench), and the
    numerics records already written stay for --resume."""
    import gputopo.numerics as numerics
    from gputopo.bench.api import BenchOptions
    from gputopo.jobs import Machine, run_job

    desc, topo = _machine("pcie-4gpu")
    seen = {}

    def interrupted(*args, **kw):
        seen["status"] = json.loads((tmp_path / "run" / "run.json").read_text())["status"]
        raise KeyboardInterrupt

    monkeypatch.setattr(numerics, "run_numerics", interrupted)
    opts = BenchOptions(pairs=[(0, 1)], tests=(), out_dir=str(tmp_path / "run"), progress=False)
    job = run_job(Machine(topo, "sim", desc), opts, validate_options(), render=False)
    assert job.interrupted and job.numerics is None
    assert seen["status"] == "running"  # while the numerics ran
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["status"] == "interrupted" and info.get("finished")


KILLED_WITH_A_JOB_UNREAD = """
import os, signal, time
from gputopo.numerics.worker import WorkerPool

def main():
    pool = WorkerPool("sim", threads=1, size=1)
    pool._start()
    w = pool._procs.workers["0"]
    os.kill(w.proc.pid, signal.SIGKILL)
    w.proc.join()
    pool._procs.send(w, {"kind": "sim-dp", "description": "x" * 200_000})  # > a pipe's buffer
    time.sleep(0.3)
    pool.kill()
    pool.close()
    print("done", flush=True)

if __name__ == "__main__":
    main()
"""


@pytest.mark.slow
def test_a_killed_pool_with_a_big_job_unread_lets_the_process_exit(tmp_path):
    """A job bigger than a pipe's buffer (the sim description of a 64-GPU machine is ~70 KB)
    that the killed worker never read (Ctrl-C right after it was sent) kept the queue's feeder
    thread blocked, and the process hung at exit for ever. Over the pool's pipe the send to a
    dead worker fails at once (its end is closed): nothing is left blocked either."""
    import subprocess
    import sys

    script = tmp_path / "killed.py"
    script.write_text(KILLED_WITH_A_JOB_UNREAD)
    repo = str(REPO)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (repo, os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=90, env=env)
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stderr


def _records(run_dir):
    return {(tuple(r["gpus"]), r["way"]): r
            for r in map(json.loads, (run_dir / "numerics.jsonl").read_text().splitlines())}


@pytest.mark.slow
def test_fault_free_sim_runs_are_computed_once_and_say_so(tmp_path):
    """A sim job no fault can touch gives the same bits on every pair with its routes, so a
    worker computes it once (numerics/worker_main._train_sim): the other pairs' records say
    ``same_run_as`` and hold exactly what running them gives. A pair whose route a fault hits
    (DataParallel's peer copies on NODE/SYS here, and a pair given a fault of its own) is
    always run, and caught."""
    from gputopo.numerics import worker_main
    from gputopo.numerics.job import NumericsOptions

    desc = load_description("seed-8gpu")
    desc = desc.with_faults(list(desc.faults) + [
        {"where": "pair:2,3", "what": "corrupt", "path": "all", "rate": 0.001}])
    topo = scan_description(desc)
    run = run_numerics(topo, _all_pairs(topo), "sim", desc, run_dir=str(tmp_path), timeout_s=60)
    recs = _records(tmp_path)
    reused = {k for k, r in recs.items() if "same_run_as" in (r.get("extra") or {})}
    hit = {(p, way) for p in _all_pairs(topo) for way in ("dp", "ddp")
           if any(desc.faults_for(*p, path=route)
                  for route in ({"p2p", "host"} if way == "dp" else {recs[(p, way)]["paths"]["all_reduce"]}))}
    assert reused and not reused & hit
    # DDP on the 16 SYS pairs goes through host memory, which no fault touches: shared runs
    assert sum(1 for (p, way) in reused if way == "ddp") >= 16 - 2
    verdicts = run.verdicts()
    assert verdicts[(2, 3)]["reference"] == "ok"  # its own fault: both ways run, both caught
    assert "ok" not in (verdicts[(2, 3)]["dp"], verdicts[(2, 3)]["ddp"])
    assert verdicts[(0, 1)] == {"reference": "ok", "dp": "ok", "ddp": "ok"}
    for key in reused:  # the run it names has the same numbers; a fresh run of it too
        rec, origin = recs[key], recs[(tuple(recs[key]["extra"]["same_run_as"]), key[1])]
        assert rec["losses"] == origin["losses"] and rec["verdict"] == origin["verdict"]
        assert "same_run_as" not in (origin.get("extra") or {})
    pair, way = sorted(reused)[-1]
    worker_main._FAULT_FREE_RUNS.clear()  # this process never ran it: a fresh computation
    job = {"kind": f"sim-{way}", "pair": list(pair), "description": desc,
           "opts": NumericsOptions().to_json()}
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the workers run (another count sums in another order)
    try:
        fresh = worker_main._run_job(0, job, "sim")
    finally:
        torch.set_num_threads(threads)
    assert fresh["losses"] == [float(x) for x in recs[(pair, way)]["losses"]]
    assert fresh["extra"]["paths"] == recs[(pair, way)]["paths"]  # its own routes, recorded
    assert "same_run_as" not in fresh["extra"]
