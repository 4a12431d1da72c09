"""Run folders: loading (with a crash's truncated last line), writing helpers."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from conftest_report import seed_topology, write_run
from gputopo.errors import InputFileError, UsageError
from gputopo.runfolder.writer import append_jsonl, new_run_dir, write_json
from gputopo.report.run_folder import load_run


def test_load_run_reads_everything(tmp_path):
    d = write_run(tmp_path / "r", ["corrupt-sys", "nan-dp", "hang"])
    run = load_run(d)
    assert run.topology is not None and len(run.topology.gpus) == 8
    assert run.simulated is True and run.fabric == "sim"
    assert len(run.measurements) == 28 * 10
    assert [f.kind for f in run.event_findings] == ["hang"]
    assert {r["way"] for r in run.numerics} == {"dp", "ddp", "reference"}
    assert run.notes == []


def test_truncated_last_line_is_skipped_with_a_note(tmp_path):
    d = write_run(tmp_path / "r", [], truncate_last=True)
    run = load_run(d)
    assert len(run.measurements) == 28 * 10
    assert any("truncated last line" in n for n in run.problems)


def test_garbage_in_the_middle_is_noted_not_fatal(tmp_path):
    d = write_run(tmp_path / "r", [])
    lines = (d / "measurements.jsonl").read_text().splitlines()
    lines.insert(3, "{not json")
    (d / "measurements.jsonl").write_text("\n".join(lines) + "\n")
    run = load_run(d)
    assert len(run.measurements) == 28 * 10
    assert "measurements.jsonl: 1 of 281 line(s) skipped (not JSON): line(s) 4; " \
        "the report covers only the lines that were read" in run.problems


def test_not_a_run_folder(tmp_path):
    with pytest.raises(UsageError, match="not a run folder"):
        load_run(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="not a run folder"):
        load_run(tmp_path / "empty")


def test_broken_topology_names_the_file(tmp_path):
    d = write_run(tmp_path / "r", [])
    (d / "topology.json").write_text('{"gpus": [}')
    with pytest.raises(InputFileError, match="topology.json"):
        load_run(d)


def test_run_without_topology_still_loads(tmp_path):
    d = write_run(tmp_path / "r", [])
    (d / "topology.json").unlink()
    run = load_run(d)
    assert run.topology is None and any("no topology.json" in n for n in run.notes)


def test_new_run_dir_never_reuses_a_folder(tmp_path):
    now = dt.datetime(2024, 5, 1, 12, 0, 0)
    a = new_run_dir(tmp_path, "seed 8gpu/x", now=now)
    b = new_run_dir(tmp_path, "seed 8gpu/x", now=now)
    assert a.name == "20240501-120000-seed_8gpu_x"
    assert b.name == "20240501-120000-seed_8gpu_x-2"
    assert a.is_dir() and b.is_dir()


def test_append_jsonl_and_write_json(tmp_path):
    p = tmp_path / "x.jsonl"
    append_jsonl(p, {"a": 1})
    append_jsonl(p, {"b": (1, 2)})
    assert [json.loads(x) for x in p.read_text().splitlines()] == [{"a": 1}, {"b": [1, 2]}]
    write_json(tmp_path / "y.json", {"topo": seed_topology().machine})
    assert json.loads((tmp_path / "y.json").read_text()) == {"topo": "seed-8gpu-healthy"}
    assert not (tmp_path / "y.json.tmp").exists()


def test_event_findings_with_extra_context_keys(tmp_path):
    d = write_run(tmp_path / "r", [])
    append_jsonl(d / "events.jsonl", {"type": "finding", "step": "p2p-0-4", "kind": "hang", "severity": "error",
                                      "message": "GPUs 0,4: p2p step timed out", "gpus": [0, 4],
                                      "link_class": "SYS", "evidence": {"timeout_s": 30}})
    run = load_run(d)
    (f,) = run.event_findings
    assert f.kind == "hang" and f.evidence == {"step": "p2p-0-4", "timeout_s": 30}
    assert run.notes == []
