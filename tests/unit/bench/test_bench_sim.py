"""run_bench on the sim fabric, end to end with real worker processes: the seed machine's
corruption is found where its faults are, a slow fault shows in GB/s, hang and crash faults
become findings with no process left behind, Ctrl-C leaves a valid partial run that --resume
completes, and every measurement is on disk before it is reported."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from gputopo.bench.api import BenchOptions, bench_document, render_summary, run_bench
from gputopo.bench.plan import measurement_key
from gputopo.report.measured_findings import bench_findings
from gputopo.sim.description import load_description, parse_description
from gputopo.sim.scan import scan_description

pytestmark = pytest.mark.slow


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _machine(text_or_name, tmp_path=None):
    if "\n" in text_or_name:
        path = tmp_path / "machine.toml"
        path.write_text(textwrap.dedent(text_or_name))
        desc = parse_description(path.read_text(), str(path))
    else:
        desc = load_description(text_or_name)
    return desc, scan_description(desc)


def _run(desc, topo, tmp_path, **kw):
    kw.setdefault("preset", "quick")
    kw.setdefault("progress", False)
    opts = BenchOptions(out_dir=str(tmp_path / "run"), **kw)
    return run_bench(topo, opts, "sim", desc)


@pytest.fixture(scope="module")
def seed_sweep(tmp_path_factory):
    """The quick all-pairs sweep of seed-8gpu (28 pairs), shared by the tests below."""
    desc, topo = _machine("seed-8gpu")
    tmp = tmp_path_factory.mktemp("seed")
    t0 = time.monotonic()
    res = _run(desc, topo, tmp, pairs=[p.gpus for p in topo.pairs])
    return desc, topo, res, time.monotonic() - t0


def test_seed_sweep_finds_corruption_exactly_where_peer_dma_is_broken(seed_sweep):
    desc, topo, res, _ = seed_sweep
    assert not res.interrupted and res.steps_run == 28 * 3
    by_pair = {}
    for m in res.measurements:
        by_pair.setdefault(tuple(m.gpus), []).append(m)
    assert len(by_pair) == 28
    broken = {p.gpus for p in topo.pairs
              if any(f.what == "corrupt" for f in desc.faults_for(*p.gpus, path="p2p"))}
    pcie_pairs = {p.gpus for p in topo.pairs if str(p.link_class) in ("NODE", "SYS")}
    nv_pairs = {p.gpus for p in topo.pairs if p.link_class.is_nvlink}
    # the seed's story: every PCIe pair (NODE and SYS; 5,6 is NODE) is broken, NVLink is not
    assert broken == pcie_pairs and (5, 6) in broken and len(pcie_pairs) == 24
    assert not (nv_pairs & broken)
    for pair, ms in by_pair.items():
        wrong = {m.test for m in ms if m.wrong}
        if pair in broken:
            # peer copies and DataParallel's raw-copy primitives (scatter, gather) are hit...
            assert {"p2p.copy", "p2p.copy_bidir", "dp.scatter", "dp.gather"} <= wrong, (pair, wrong)
            # ...staged copies and NCCL (through the host on NODE/SYS) are not, nor DataParallel's
            # broadcast/reduce_add, which torch hands to NCCL
            assert not any(t.startswith("collective.") or t == "p2p.staged" for t in wrong)
            assert not {"dp.broadcast_coalesced", "dp.reduce_add"} & wrong, (pair, wrong)
        else:
            assert not wrong, (pair, wrong)
        # DataParallel's broadcast/reduce_add are labelled NCCL's, with the route NCCL took
        for m in ms:
            if m.test in ("dp.broadcast_coalesced", "dp.reduce_add"):
                want = "host" if pair in pcie_pairs else "p2p"  # Intel host: P2P up to PXB
                assert (m.extra["path"], m.extra["nccl_route"]) == ("nccl", want), (pair, m.test)
    corrupt = {tuple(f.gpus) for f in bench_findings(res) if f.kind == "corrupt"}
    assert corrupt == broken
    assert not [f for f in bench_findings(res) if f.kind in ("hang", "crash")]
    assert not res.failures


def test_seed_sweep_outputs(seed_sweep, capsys):
    desc, topo, res, elapsed = seed_sweep
    doc = bench_document(res, bench_findings(res))
    assert doc["schema_version"] >= 1 and doc["simulated"] is True and doc["fabric"] == "sim"
    assert doc["timing"] == ["modeled"]
    p = next(x for x in doc["pairs"] if x["gpus"] == [0, 1])
    assert p["link_class"] == "NV4" and p["wrong"] == 0
    assert p["p2p_gbps"]["0->1"] > p["staged_gbps"]["0->1"] > 0
    assert p["latency_us"]["1->0"] > 0 and p["busbw_gbps"]["all_reduce"] > 0
    s = next(x for x in doc["pairs"] if x["gpus"] == [0, 4])
    assert s["link_class"] == "SYS" and s["wrong"] > 0
    f = next(x for x in doc["findings"] if x["kind"] == "corrupt")
    assert set(f) >= {"kind", "gpus", "link_class", "severity", "message"}
    json.dumps(doc)  # serialisable, no NaN
    run_dir = res.run_dir
    for name in ("run.json", "topology.json", "measurements.jsonl", "events.jsonl"):
        assert (run_dir / name).is_file(), name
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "complete" and info["simulated"] and info["fabric"] == "sim"
    lines = (run_dir / "measurements.jsonl").read_text().splitlines()
    assert len(lines) == len(res.measurements)
    render_summary(res, findings=bench_findings(res))
    out = capsys.readouterr().out
    assert "SIMULATED" in out and "corrupt" in out and "NV4" in out
    assert out.index("corrupt") < out.index("NV4")  # findings before the table
    print(f"seed-8gpu quick sweep: {elapsed:.1f} s")


SLOW = """
extends = "pcie-4gpu"
name = "slow-4gpu"
[[fault]]
where = "pair:0,2"
what = "slow"
factor = 0.25
"""


def test_slow_fault_lowers_gbps_by_its_factor(tmp_path):
    desc, topo = _machine(SLOW, tmp_path)
    res = _run(desc, topo, tmp_path, pairs=[(0, 2), (1, 3)], tests=("p2p",))
    doc = bench_document(res)
    slow, ref = doc["pairs"]
    assert slow["link_class"] == ref["link_class"] == "SYS"
    for way_s, way_r in (("0->2", "1->3"), ("2->0", "3->1")):
        ratio = slow["p2p_gbps"][way_s] / ref["p2p_gbps"][way_r]
        assert 0.24 < ratio < 0.28, ratio  # 16 MiB: latency adds a little
    assert slow["wrong"] == ref["wrong"] == 0


FAILING = """
extends = "pcie-4gpu"
name = "failing-4gpu"
[[fault]]
where = "pair:0,1"
what = "hang"
[[fault]]
where = "pair:2,3"
what = "crash"
"""


@pytest.mark.serial  # a wall-time bound: run alone, after the parallel part
def test_hang_and_crash_become_findings_and_leave_no_process(tmp_path):
    desc, topo = _machine(FAILING, tmp_path)
    t0 = time.monotonic()
    res = _run(desc, topo, tmp_path, pairs=[(0, 1), (2, 3), (0, 2)], tests=("p2p",),
               timeout_s=3.0)
    elapsed = time.monotonic() - t0
    kinds = {f.kind: f for f in bench_findings(res) if f.kind in ("hang", "crash")}
    assert set(kinds) == {"hang", "crash"}
    hang, crash = kinds["hang"], kinds["crash"]
    assert hang.gpus == [0, 1] and hang.link_class == "PXB" and hang.severity == "error"
    assert hang.evidence["case"]["test"] == "p2p.copy"
    assert crash.gpus == [2, 3] and "SIGABRT" in crash.message
    assert "fault crash" in crash.evidence["stderr_tail"]
    assert elapsed < 30, elapsed
    # the run went on: the healthy pair is fully measured
    assert {tuple(m.gpus) for m in res.measurements} == {(0, 2)}
    assert res.worker_pids and not [p for p in res.worker_pids if _alive(p)]
    events = [json.loads(x) for x in (res.run_dir / "events.jsonl").read_text().splitlines()]
    # recorded as they happened, as facts (the report words them: report/step_failures.py)
    assert {(e["kind"], e["step"]) for e in events if e["type"] == "step-failed"} == \
        {("hang", "p2p:0-1"), ("crash", "p2p:2-3")}
    assert not [e for e in events if e["type"] == "finding"]
    assert sorted((f.kind, tuple(f.gpus)) for f in res.failures) == [("crash", (2, 3)), ("hang", (0, 1))]
    assert {e["step"] for e in events if e["type"] == "step-done"} == \
        {"p2p:0-1", "p2p:2-3", "p2p:0-2"}


def test_a_measurement_longer_than_the_timeout_is_no_hang_while_its_samples_progress(tmp_path):
    """--timeout is "no progress for N s": a healthy measurement of many samples may take longer
    than N (256 MiB ones do on a busy CPU) and must not become a hang, as long as samples
    complete. (Before beats per sample, `--timeout 3` flagged healthy SYS pairs as hangs.)"""
    from gputopo.bench.api import worker_config
    from gputopo.bench.plan import Case, Step
    from gputopo.runfolder.writer import RunLog
    from gputopo.bench.runner import Runner

    desc, topo = _machine("pcie-4gpu")
    step = Step("p2p:0-2", "p2p", (0, 2), "SYS", [Case("p2p.copy", (0, 2), "0->2", 16 << 20, 0, 2)])
    timeout = 1.0
    runner = Runner(fabric="sim", config=worker_config(topo, "sim", desc, timeout, 1),
                    log=RunLog(tmp_path), timeout_s=timeout, pool_size=1,
                    step_settings={"warmup": 1, "samples": 1500, "latency_repeat": 1})
    runner.run([step])
    assert not runner.failures, runner.failures[0].what
    assert len(runner.measurements) == 1 and runner.measurements[0].n == 1500
    assert runner.worker_pids and not [p for p in runner.worker_pids if _alive(p)]
    done = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    if done[-1]["elapsed_s"] < 1.5 * timeout:
        pytest.skip("this machine measured it within the timeout: the case did not arise")


class _DiskCheck:
    """Progress hook asserting each measurement is on disk before progress hears of it."""

    def __init__(self, path):
        self.path, self.seen, self.ok = path, 0, True

    def start(self, total, description=""):
        self.total = total

    def advance(self, n=1, label=""):
        self.seen += n
        lines = self.path.read_text().splitlines() if self.path.exists() else []
        self.ok &= len(lines) == self.seen

    def stop(self):
        pass


def test_measurements_are_on_disk_as_they_come(tmp_path):
    desc, topo = _machine("pcie-4gpu")
    opts = BenchOptions(out_dir=str(tmp_path / "run"), preset="quick", pairs=[(0, 1)],
                        tests=("p2p",), progress=False, sim_workers=1)
    hook = _DiskCheck(tmp_path / "run" / "measurements.jsonl")
    res = run_bench(topo, opts, "sim", desc, progress=hook)
    assert hook.seen == hook.total == len(res.measurements) > 0 and hook.ok


SCRIPT = """
import json, sys
from gputopo.bench.api import BenchOptions, run_bench
from gputopo.sim.description import load_description
from gputopo.sim.scan import scan_description

def main():
    desc = load_description("pcie-4gpu")
    topo = scan_description(desc)
    opts = BenchOptions(out_dir=sys.argv[1], pairs=[p.gpus for p in topo.pairs],
                        preset="quick", progress=False, sim_workers=1)
    res = run_bench(topo, opts, "sim", desc)
    print(json.dumps({"interrupted": res.interrupted, "pids": res.worker_pids}), flush=True)

if __name__ == "__main__":
    main()
"""


def test_ctrl_c_leaves_a_valid_partial_run_and_resume_finishes_it(tmp_path):
    script = tmp_path / "bench_script.py"
    script.write_text(SCRIPT)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, str(script), str(run_dir)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lines = run_dir / "measurements.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if lines.exists() and len(lines.read_text().splitlines()) >= 20:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["interrupted"] is True
    assert not [p for p in summary["pids"] if _alive(p)]
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "interrupted"
    partial = [json.loads(x) for x in lines.read_text().splitlines()]  # every line parses
    assert 20 <= len(partial)

    desc = load_description("pcie-4gpu")
    topo = scan_description(desc)
    res = run_bench(topo, BenchOptions(resume_dir=str(run_dir), progress=False), "sim", desc)
    assert not res.interrupted and res.steps_skipped >= 1
    keys = [measurement_key(m) for m in res.measurements]
    assert len(keys) == len(set(keys))
    from gputopo.bench.plan import plan_steps

    planned = {c.key for s in plan_steps(topo, res.options) for c in s.cases}
    assert set(keys) == planned
    final = [json.loads(x) for x in lines.read_text().splitlines()]
    assert len(final) <= len(planned) + 60  # only a partial step may have been measured twice
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "complete" and info.get("resumed")


def test_resume_of_a_complete_run_measures_nothing(tmp_path):
    desc, topo = _machine("pcie-4gpu")
    first = _run(desc, topo, tmp_path, pairs=[(2, 3)], tests=("collectives",))
    again = run_bench(topo, BenchOptions(resume_dir=str(first.run_dir), progress=False), "sim",
                      desc)
    assert again.steps_run == 0 and again.steps_skipped == 1
    assert sorted(map(measurement_key, again.measurements)) == \
        sorted(map(measurement_key, first.measurements))


def test_bad_resume_and_out_dirs(tmp_path):
    from gputopo.errors import UsageError

    desc, topo = _machine("pcie-4gpu")
    with pytest.raises(UsageError, match="not a gputopo run folder"):
        run_bench(topo, BenchOptions(resume_dir=str(tmp_path)), "sim", desc)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(UsageError, match="not empty"):
        run_bench(topo, BenchOptions(pairs=[(0, 1)], out_dir=str(tmp_path / "full")), "sim", desc)
    with pytest.raises(UsageError, match="needs a simulated machine"):
        run_bench(topo, BenchOptions(pairs=[(0, 1)], out_dir=str(tmp_path / "o")), "sim", None)


def test_dataparallel_flatten_copies_where_torch_does_and_reduce_leaves_inputs_alone():
    """A bucket of one tensor is flattened as a view (at::flatten_dense_tensors), several are
    concatenated; only a copy costs modeled on-device time. reduce_add makes a new tensor (as
    comm.reduce_add does): the master's gradients are not summed into."""
    import torch
    from torch._utils import _flatten_dense_tensors

    from gputopo.bench.fabrics.sim import SimModel, SimOps

    ops = SimOps((6, 7), (6, 7), SimModel(load_description("seed-8gpu")))
    for parts in ([torch.ones(4, 4)], [torch.ones(4, 4), torch.ones(3)]):
        ops._region = 0.0
        ours = ops._flat(6, parts, sum(p.numel() for p in parts))
        theirs = _flatten_dense_tensors(parts)
        same = parts[0].untyped_storage().data_ptr()
        assert (ours.untyped_storage().data_ptr() == same) == (theirs.untyped_storage().data_ptr() == same)
        assert torch.equal(ours, theirs) and (ops._region > 0) == (len(parts) > 1)
    grads = {6: [torch.full((8,), 1.0)], 7: [torch.full((8,), 2.0)]}
    out = ops.dp_reduce_add_coalesced(grads, [(8,)], 6, [6, 7])
    assert out is not None and torch.equal(out[0], torch.full((8,), 3.0))
    assert torch.equal(grads[6][0], torch.full((8,), 1.0))  # the master's input is untouched


@pytest.mark.parametrize("gpus", [(6, 7), (4, 5, 6, 7)])
def test_sim_reduce_scatter_is_out_of_place_and_exact(gpus):
    """NCCL's reduce-scatter leaves its inputs alone; the ring's sums land in the outputs, equal
    (bit for bit: small integers) to the elementwise sum of the ranks' chunk."""
    import torch

    from gputopo.bench.fabrics.sim import SimModel, SimOps

    ops = SimOps(gpus, gpus, SimModel(load_description("seed-8gpu-healthy")))
    n, per = len(gpus), 1000
    ins = {g: torch.arange(n * per, dtype=torch.float32) % 97 + k for k, g in enumerate(gpus)}
    kept = {g: t.clone() for g, t in ins.items()}
    outs = {g: torch.full((per,), -1.0) for g in gpus}
    ops.reduce_scatter(outs, ins)
    total = sum(kept.values())
    for r, g in enumerate(gpus):
        assert torch.equal(ins[g], kept[g])
        assert torch.equal(outs[g], total[r * per:(r + 1) * per])


def test_a_shared_step_deals_its_cases_heaviest_first_each_once():
    from gputopo.bench.plan import Step, cases_for
    from gputopo.bench.run_records import RunningStep
    from gputopo.bench.shares import _weight, dealing_order, share_steps

    cases = cases_for("p2p", (5, 6), (1 << 20, 16 << 20, 64 << 20, 256 << 20), (4, 4096))
    order = dealing_order(cases)
    assert sorted(c.key for c in order) == sorted(c.key for c in cases)  # each once
    weights = [_weight(c) for c in order]
    assert weights == sorted(weights, reverse=True) and order[0].test == "p2p.copy_bidir"
    ties = [c for c in order if _weight(c) == 256 << 20]  # equal weight: the step's own order
    assert [cases.index(c) for c in ties] == sorted(cases.index(c) for c in ties)
    r = RunningStep(Step("p2p:5-6", "p2p", (5, 6), "NODE", cases), ["sim0", "sim1"],
                    [(5, 6)] * 2, deadline=0.0, queue=list(order))
    got = {k: [r.hand_out(k)] for k in ("sim0", "sim1")}
    assert r.current_case("sim0") == order[0] and r.current_case("sim1") == order[1]
    r.by_key["sim0"] = 1  # sim0 delivered its case and is handed the next one
    got["sim0"].append(r.hand_out("sim0"))
    assert r.current_case("sim0") == order[2] == got["sim0"][1]
    assert r.current_case(None) == min(order[1], order[2], key=cases.index)  # first in the step
    while r.hand_out("sim1") is not None:
        pass
    assert r.hand_out("sim0") is None and r.queue == []
    assert sum(len(v) for v in r.given.values()) == len(cases)
    assert share_steps("sim", [None] * 3, 2) and not share_steps("sim", [None] * 4, 2)
    assert not share_steps("cuda", [None], 2) and not share_steps("sim", [None], 1)


def test_a_shared_step_with_fewer_cases_than_workers_leaves_the_others_idle(tmp_path):
    """Should a shared step ever get more workers than it has cases (_keys_for caps them
    today), the workers left without a case are done at once: the step is measured once, ends,
    and no worker is handed an empty case (which raised in the runner before)."""
    from gputopo.bench.api import worker_config
    from gputopo.bench.plan import Step, cases_for
    from gputopo.runfolder.writer import RunLog
    from gputopo.bench.runner import Runner

    desc, topo = _machine("seed-8gpu")
    cases = cases_for("p2p", (5, 6), (1 << 20,), ())[:1]
    runner = Runner(fabric="sim", config=worker_config(topo, "sim", desc, 60.0, 1),
                    log=RunLog(tmp_path), timeout_s=60.0, pool_size=2,
                    step_settings={"warmup": 1, "samples": 2, "latency_repeat": 2})
    runner._keys_for = lambda step, running: None if running else ["sim0", "sim1"]
    runner.run([Step("p2p:5-6", "p2p", (5, 6), "NODE", cases)])
    assert not runner.failures and runner.steps_done == 1
    assert len(runner.measurements) == 1 and sum(runner.delivered_by.values()) == 1
    assert not [p for p in runner.worker_pids if _alive(p)]


def test_a_shared_step_is_measured_by_every_worker_and_gives_the_same_results(tmp_path):
    """A one-pair run is three steps on two sim workers: each step is shared (shares.py), its
    cases handed out one at a time to whichever worker is free. Its measurements must be exactly those of the same plan on one worker: every case once, the
    same wrong counts, first bad indices and modeled samples (seeded per measurement)."""
    from gputopo.bench.api import worker_config
    from gputopo.bench.plan import Step, cases_for
    from gputopo.runfolder.writer import RunLog
    from gputopo.bench.runner import Runner

    desc, topo = _machine("seed-8gpu")
    pair = (5, 6)  # NODE: peer copies corrupt

    def measured(pool, folder):
        steps = [Step(f"{g}:5-6", g, pair, "NODE", cases_for(g, pair, (1 << 20, 4 << 20), (4,)))
                 for g in ("p2p", "dp", "collectives")]
        runner = Runner(fabric="sim", config=worker_config(topo, "sim", desc, 60.0, 1),
                        log=RunLog(folder), timeout_s=60.0, pool_size=pool,
                        step_settings={"warmup": 1, "samples": 3, "latency_repeat": 2})
        runner.run(steps)
        assert not runner.failures and runner.steps_done == 3
        assert runner.worker_pids and not [p for p in runner.worker_pids if _alive(p)]
        return runner, {measurement_key(m): (m.wrong, m.first_bad_index, m.samples_s,
                                             m.extra.get("wrong_samples"))
                        for m in runner.measurements}

    alone, one = measured(1, tmp_path / "one")
    shared, two = measured(2, tmp_path / "two")
    assert len(shared.measurements) == len(alone.measurements) == len(one) == 12 + 16 + 8
    assert two == one and any(w for w, *_ in one.values())  # the corruption was there to find
    assert set(shared.delivered_by) == {"sim0", "sim1"} and all(shared.delivered_by.values())
    assert set(alone.delivered_by) == {"sim0"}
