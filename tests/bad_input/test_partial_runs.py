"""Issue 18, wrong verdicts: a partial or damaged run folder is judged only over what it holds,
says so first, and never passes a gate. Run as a user runs it (the command's entry point; a
resume that measures again as `python -m gputopo`).

The run folders are the seed story (tests/conftest_report.py: NODE and SYS pairs corrupt, NV4
fine) written as a bench run would (run.json with the planned pairs and a status,
events.jsonl with the measurements each finished step delivered), then damaged the way the
issue found them: interrupted after GPU 0's and 1's pairs, a file deleted, a file cut short.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gputopo.runfolder.writer import append_jsonl, write_json

from conftest_report import measurements, numerics, write_run
from helpers.cli import gputopo, gputopo_here

ALL_PAIRS = [(i, j) for i in range(8) for j in range(i + 1, 8)]
SEED_FAULTS = ("corrupt-sys", "corrupt-node", "iommu", "acs")


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    """Commands that write a default folder (reports/) write it under the test's tmp_path."""
    monkeypatch.chdir(tmp_path)


#: The terminal the commands print for: wide enough that no table drops a column.
WIDE = {"COLUMNS": "200"}


def bench_like_run(run_dir: Path, pairs=ALL_PAIRS, status="complete", with_numerics=True,
                   faults=SEED_FAULTS) -> Path:
    """The seed story as a bench run writes it: run.json planning all 28 pairs, one step-done
    event per pair with the measurements it delivered, numerics on (5,6) and (6,7)."""
    meas = measurements(faults, pairs=list(pairs))
    nums = numerics(faults) if with_numerics else []
    write_run(run_dir, faults, meas=meas, nums=nums)
    (run_dir / "events.jsonl").unlink()
    for p in pairs:
        n = sum(1 for m in meas if tuple(m.gpus) == p)
        append_jsonl(run_dir / "events.jsonl", {"type": "step-done", "step": f"p2p:{p[0]}-{p[1]}",
                                                "status": "ok", "measurements": n})
    for rec in nums:
        if rec["way"] == "ddp":
            append_jsonl(run_dir / "events.jsonl", {"type": "step-done", "status": "ok",
                                                    "step": "numerics:{}-{}".format(*rec["gpus"])})
    info = json.loads((run_dir / "run.json").read_text())
    info.update(status=status, options={"pairs": [list(p) for p in ALL_PAIRS], "self_gpus": [],
                                        "tests": ["p2p", "dp", "collectives"]})
    write_json(run_dir / "run.json", info)
    return run_dir


def interrupted_run(run_dir: Path) -> Path:
    """Ctrl-C after GPU 0's and 1's pairs: 13 of 28 pairs measured, run.json interrupted."""
    return bench_like_run(run_dir, [p for p in ALL_PAIRS if 0 in p or 1 in p], "interrupted",
                          with_numerics=False)


def test_an_interrupted_run_blames_no_gpu_it_did_not_measure(tmp_path):
    run = interrupted_run(tmp_path / "run")
    proc = gputopo_here("report", run, env=WIDE)
    assert proc.returncode in (0, 1), proc.stderr
    out = proc.stdout
    # first line: partial, with the counts
    assert out.splitlines()[0].startswith("partial: 13 of 28 pairs measured"), out[:400]
    # no GPU is blamed: the measured NODE and SYS pairs are the host path's fault
    assert "GPU 2 corrupts" not in out and "GPU 3 corrupts" not in out, out
    summary = json.loads((run / "summary.json").read_text())
    assert not [f for f in summary["findings"] if f["kind"] == "gpu-fault"]
    assert any(f["kind"] == "class-fault" for f in summary["findings"])
    assert summary["partial"]["pairs_measured"] == 13 and summary["partial"]["pairs_planned"] == 28
    assert [2, 3] in summary["partial"]["unmeasured"]
    md = (run / "report.md").read_text()
    assert md.split("\n# ", 1)[0].count("partial: 13 of 28") or "partial: 13 of 28" in md.splitlines()[2]
    html = (run / "report.html").read_text()
    assert html.index("partial: 13 of 28") < html.index("<h1>")


def test_place_from_an_interrupted_run_keeps_every_gpu(tmp_path):
    run = interrupted_run(tmp_path / "run")
    proc = gputopo_here("place", "4", "--from", run, env=WIDE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "left out" not in proc.stdout + proc.stderr
    assert "Best 4 GPUs" in proc.stdout


def test_a_complete_run_is_not_partial(tmp_path):
    run = bench_like_run(tmp_path / "run")
    proc = gputopo_here("report", run, "--json", env=WIDE)
    doc = json.loads(proc.stdout)
    assert doc["partial"] is None
    assert not [f for f in doc["findings"] if f["kind"] == "incomplete-data"], doc["findings"]


def _check(run, *more):
    return gputopo_here("check", "--spec", "pcie-box", run, *more, env=WIDE)


@pytest.fixture
def healthy_spec(tmp_path):
    """A spec that fails on nothing but errors of its own rules (no fail_on, no warnings)."""
    spec = tmp_path / "lenient.toml"
    spec.write_text('name = "lenient"\n[integrity]\nno_corruption = true\n')
    return spec


@pytest.mark.parametrize("damage", ["numerics-deleted", "measurements-cut", "measurements-cut-mid-line",
                                    "topology-deleted", "run-json-deleted", "measurements-deleted"])
def test_check_fails_a_damaged_run_even_on_a_spec_that_ignores_warnings(tmp_path, healthy_spec, damage):
    run = bench_like_run(tmp_path / "run", faults=())
    ok = gputopo_here("check", "--spec", healthy_spec, run, env=WIDE)
    assert ok.returncode == 0, ok.stdout + ok.stderr  # undamaged: passes
    m = run / "measurements.jsonl"
    if damage == "numerics-deleted":
        (run / "numerics.jsonl").unlink()
    elif damage == "measurements-cut":
        lines = m.read_text().splitlines(keepends=True)
        m.write_text("".join(lines[: len(lines) // 2]))
    elif damage == "measurements-cut-mid-line":
        text = m.read_text()
        m.write_text(text[: len(text) // 2])
    elif damage == "topology-deleted":
        (run / "topology.json").unlink()
    elif damage == "run-json-deleted":
        (run / "run.json").unlink()
    else:
        m.unlink()
    proc = gputopo_here("check", "--spec", healthy_spec, run, env=WIDE)
    assert proc.returncode in (1, 2), proc.stdout + proc.stderr
    assert "PASSED" not in proc.stdout
    report = gputopo_here("report", run, env=WIDE)
    assert "incomplete" in report.stdout or "no " in report.stdout, report.stdout


@pytest.mark.parametrize("status", ["running", "interrupted"])
def test_report_says_a_run_did_not_finish(tmp_path, status):
    run = bench_like_run(tmp_path / "run", status=status)
    proc = gputopo_here("report", run, env=WIDE)
    assert f"run.json says {status}" in proc.stdout.splitlines()[0], proc.stdout[:300]


@pytest.mark.parametrize("status", ["running", "empty"])
def test_check_init_refuses_a_running_or_empty_run(tmp_path, status):
    run = bench_like_run(tmp_path / "run", status="running" if status == "running" else "complete",
                         faults=())
    if status == "empty":
        (run / "measurements.jsonl").write_text("")
        (run / "numerics.jsonl").write_text("")
    spec = tmp_path / "new.toml"
    proc = gputopo_here("check", "--init", "--from", run, "--spec", spec, env=WIDE)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not spec.exists()


def test_diff_with_the_second_runs_measurements_gone_is_no_clean_gone(tmp_path):
    a = bench_like_run(tmp_path / "a")
    b = bench_like_run(tmp_path / "b")
    (b / "measurements.jsonl").unlink()
    proc = gputopo_here("diff", a, b, env=WIDE)
    assert proc.returncode != 0, proc.stdout
    assert "finding gone" not in proc.stdout or proc.returncode == 2


def test_check_junit_never_writes_over_a_file_of_the_run(tmp_path, healthy_spec):
    run = bench_like_run(tmp_path / "run", faults=())
    before = (run / "run.json").read_bytes()
    proc = gputopo_here("check", "--spec", healthy_spec, run, "--junit", run / "run.json", env=WIDE)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert (run / "run.json").read_bytes() == before


def test_a_numerics_only_run_does_not_call_its_trained_class_unmeasured(tmp_path):
    """`numerics` on an NV4 pair: the class table says NV4 measured 1, ok; the story must not
    also warn "Links not measured: NV4"."""
    run = write_run(tmp_path / "run", (), meas=[], nums=numerics((), pairs=((0, 1),)))
    proc = gputopo_here("report", run, env=WIDE)
    assert "Links not measured: NV4" not in proc.stdout, proc.stdout
    assert "NV4 (4 pairs, 1 measured" in proc.stdout, proc.stdout


def test_numerics_heatmap_paints_wrong_data_over_dataparallel_only(tmp_path, monkeypatch):
    """A pair whose peer copies were wrong while DDP trained fine: DDP's "ok" cell (below the
    diagonal) keeps its colour; DataParallel's (above) is painted as wrong data."""
    from gputopo.report.outputs import plots
    from gputopo.report.outputs.plots import plot_numerics
    from gputopo.report.summary import summarize_dir

    run = write_run(tmp_path / "run", ("corrupt-sys",), meas=measurements(("corrupt-sys",), pairs=[(0, 4)]),
                    nums=numerics((), pairs=((0, 4),)))
    painted = {}
    real = plots.paint_wrong_data

    def spy(ax, pos, pairs, texts, annotate, cells=None):
        painted["cells"] = cells
        return real(ax, pos, pairs, texts, annotate, cells)

    monkeypatch.setattr(plots, "paint_wrong_data", spy)
    assert plot_numerics(summarize_dir(run), tmp_path) is not None
    assert painted["cells"] == {(0, 4)}  # row GPU 0, column GPU 4: DataParallel only


def test_a_topology_of_another_machine_is_no_baseline_and_fails_the_gate(tmp_path, healthy_spec):
    """topology.json copied from another machine (here: the seed's pairs 0,1 NV4 turned PIX):
    every pair would be judged by a class it was not measured on. The sweep found report, check,
    check --init and diff reading it as a whole run."""
    run = bench_like_run(tmp_path / "run", faults=())
    assert gputopo_here("check", "--spec", healthy_spec, run, env=WIDE).returncode == 0
    topo = json.loads((run / "topology.json").read_text())
    changed = next(p for p in topo["pairs"] if sorted(p["gpus"]) == [0, 1])
    assert changed["link_class"] == "NV4"
    changed["link_class"] = "PIX"
    write_json(run / "topology.json", topo)
    says = "name another link class for their pair than topology.json (GPUs 0,1: NV4 measured, PIX in"
    proc = gputopo_here("check", "--spec", healthy_spec, run, env=WIDE)
    assert proc.returncode == 1 and "PASSED" not in proc.stdout and says in proc.stdout, proc.stdout
    proc = gputopo_here("check", "--init", "--from", run, "--spec", tmp_path / "new.toml", env=WIDE)
    assert proc.returncode == 2 and says in proc.stderr and not (tmp_path / "new.toml").exists()
    assert says in gputopo_here("report", run, env=WIDE).stdout
    assert gputopo_here("diff", bench_like_run(tmp_path / "a", faults=()), run, env=WIDE).returncode == 2


@pytest.mark.parametrize("edit, says", [
    ({"status": None}, "run.json has no status"),
    ({"status": "bogus"}, "says the run is 'bogus', a status gputopo never writes"),
    ({"fabric": "quantum"}, "names the fabric 'quantum'"),
])
def test_a_run_json_edited_out_of_shape_fails_the_gate(tmp_path, healthy_spec, edit, says):
    """The sweep found check passing a bench run whose run.json lost its status or names a fabric
    no bench uses: whether it finished, and what measured it, are unknown."""
    run = bench_like_run(tmp_path / "run", faults=())
    info = json.loads((run / "run.json").read_text())
    info.update(edit)
    write_json(run / "run.json", {k: v for k, v in info.items() if v is not None})
    proc = gputopo_here("check", "--spec", healthy_spec, run, env=WIDE)
    assert proc.returncode == 1 and says in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("command", [("report",), ("report", "--json"), ("check", "--spec", "pcie-box"),
                                     ("place", "2", "--from")])
def test_run_json_options_of_the_wrong_type_is_one_line(tmp_path, command):
    """run.json's "options" as text was rc 4 (AttributeError) in report and check."""
    run = bench_like_run(tmp_path / "run", faults=())
    info = json.loads((run / "run.json").read_text())
    write_json(run / "run.json", {**info, "options": "x"})
    proc = gputopo_here(*command, run, env=WIDE)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [f"gputopo: error: {run}/run.json [options]: must be an object, "
                                                "got 'x'"]


def test_events_that_lost_the_lines_of_finished_steps_fail_the_gate(tmp_path, healthy_spec):
    """events.jsonl cut at a line end (the sweep): the steps of pair 0,2 are gone from it, and a
    crash recorded there would be gone too, yet check passed the "complete" run."""
    run = bench_like_run(tmp_path / "run", faults=())
    lines = (run / "events.jsonl").read_text().splitlines(keepends=True)
    kept = [x for x in lines if '"p2p:0-2"' not in x]
    assert len(kept) == len(lines) - 1
    (run / "events.jsonl").write_text("".join(kept))
    proc = gputopo_here("check", "--spec", healthy_spec, run, env=WIDE)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "events.jsonl records no finished step for 1 planned pair(s) (0-2)" in proc.stdout


@pytest.mark.slow
def test_resume_of_a_done_but_damaged_run_does_not_say_complete(tmp_path):
    """`bench --resume` of a run whose every step is done said "complete, nothing to do" (exit 0)
    while its folder, missing topology.json or events.jsonl, fails every gate (the sweep)."""
    import shutil

    run = tmp_path / "run"
    made = gputopo("bench", "--sim", "seed-8gpu-healthy", "--pairs", "0,1", "--quick", "--tests", "p2p",
                   "--out", run, "--no-history", env=WIDE)
    assert made.returncode == 0, made.stderr
    assert "nothing to do" in gputopo("bench", "--resume", run, env=WIDE).stderr  # undamaged: done
    for damage in ("topology.json", "events.jsonl"):
        copy = tmp_path / f"no-{damage}"
        shutil.copytree(run, copy)
        (copy / damage).unlink()
        proc = gputopo("bench", "--resume", copy, env=WIDE)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        line = proc.stderr.strip().splitlines()
        assert len(line) == 1 and f"every step is done, but the folder cannot be read as a whole run (no {damage}" \
            in line[0], proc.stderr
