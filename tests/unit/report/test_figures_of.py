"""The report judges a measurement by what it records of itself (``figures_of``: real GPUs, a
simulated machine's GPUs, CPU processes standing in), not by its fabric's name (issue 51): a
figure of real GPUs timed by the host's clock is judged, CPU processes' figures are not, and a
folder written before the field reads as it did (the field derived from the fabric it names)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest_report import measurements, write_run
from gputopo.bench.fabrics.fabric import FABRICS
from gputopo.report.run_folder import load_run
from gputopo.report.summary import summarize_dir


def _old_shaped(run_dir: Path) -> Path:
    """``run_dir``'s measurements.jsonl rewritten as a gputopo before the field wrote it."""
    path = run_dir / "measurements.jsonl"
    recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert recs and all("figures_of" in r for r in recs)
    path.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "figures_of"}) + "\n" for r in recs))
    return run_dir


def _judgement(s):
    return (s.verdict, sorted((f.kind, f.severity, tuple(f.gpus or ())) for f in s.findings),
            [(p.gpus, p.efficiency) for p in s.pairs], s.notes)


def test_each_fabric_records_what_its_figures_are_of():
    assert {n: f.figures_of for n, f in FABRICS.items()} == {
        "cuda": "gpus", "cpu": "cpu-processes", "sim": "simulated-gpus"}
    for name in FABRICS:
        (m,) = measurements(pairs=[(0, 1)], fabric=name)[:1]
        assert m.figures_of == FABRICS[name].figures_of
        assert json.loads(json.dumps(m.to_json()))["figures_of"] == FABRICS[name].figures_of


def test_an_old_sim_folder_is_judged_as_a_new_one(tmp_path):
    faults = ["slow-pair", "staged-faster"]
    new = summarize_dir(write_run(tmp_path / "new", faults))
    old_dir = _old_shaped(write_run(tmp_path / "old", faults))
    assert {m.figures_of for m in load_run(old_dir).measurements} == {"simulated-gpus"}
    old = summarize_dir(old_dir)
    assert _judgement(old) == _judgement(new)
    assert {"slow", "p2p-slower-than-staged"} <= {f.kind for f in old.findings}


def test_an_old_cpu_folder_stays_unjudged_against_a_link(tmp_path):
    ms = measurements(["slow-pair", "staged-faster"], fabric="cpu")
    for m in ms:
        m.timing = "wall"
    old_dir = _old_shaped(write_run(tmp_path / "old", [], meas=ms, fabric="cpu"))
    assert {m.figures_of for m in load_run(old_dir).measurements} == {"cpu-processes"}
    s = summarize_dir(old_dir)
    assert not {f.kind for f in s.findings} & {"slow", "outlier", "p2p-slower-than-staged"}
    assert any("cpu fabric" in n for n in s.notes)
    assert all(p.efficiency is None for p in s.pairs)
    assert "timed on the cpu fabric (CPU processes, not a GPU link)" in json.dumps(s.to_json()["judged"])


def test_an_old_line_of_a_fabric_gputopo_never_wrote_is_not_judged(tmp_path):
    run_dir = _old_shaped(write_run(tmp_path / "old", ["slow-pair"]))
    path = run_dir / "measurements.jsonl"
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({**r, "fabric": "rocm"}) + "\n" for r in recs))
    assert {m.figures_of for m in load_run(run_dir).measurements} == {None}
    s = summarize_dir(run_dir)
    assert "slow" not in {f.kind for f in s.findings}
    assert all(p.efficiency is None for p in s.pairs)
    reasons = json.dumps(s.to_json()["judged"])
    assert "timed on the rocm fabric (a fabric gputopo never wrote" in reasons and "CPU processes" not in reasons


def test_real_gpus_timed_by_the_host_clock_are_judged_whatever_the_fabric_name(tmp_path):
    """An imported nccl-tests run in cputime mode or a p2pBandwidthLatencyTest matrix timed by the
    CPU: ``timing`` is wall, the figures are real GPUs', so a slow pair is still slow. The
    measurement's record decides, not its fabric's name (here one gputopo does not know)."""
    ms = measurements(["slow-pair"], fabric="cuda")
    for m in ms:
        m.timing, m.fabric = "wall", "imported-tool"
    assert {m.figures_of for m in ms} == {"gpus"}
    s = summarize_dir(write_run(tmp_path / "run", [], meas=ms, fabric="cuda"))
    assert "slow" in {f.kind for f in s.findings}
    assert any(p.efficiency is not None for p in s.pairs)
    assert not any("cpu fabric" in n for n in s.notes)
