"""`gputopo report` and `diff` on run folders that were damaged after the run: garbage lines, a
cut or emptied measurements.jsonl, files of an unknown schema_version. Nothing may read like a
clean run: skipped lines are counted and shown, unknown schemas refused (exit 2, one line), and
no link class is called OK without a completed transfer."""

from __future__ import annotations

import json

import pytest

from conftest_report import write_run
from gputopo.errors import InputFileError
from gputopo.report.run_folder import load_run
from gputopo.report.summary import summarize_dir
from gputopo.report.outputs.tables import story, verdict_line
from helpers.cli import gputopo_here
from helpers.paths import REPO



def _healthy(tmp_path):
    return write_run(tmp_path / "run", [])


def test_garbage_lines_are_counted_in_the_verdict_line_and_the_story(tmp_path):
    d = _healthy(tmp_path)
    lines = (d / "measurements.jsonl").read_text().splitlines()
    lines = [line if k % 3 else f"garbage {k}" for k, line in enumerate(lines)]
    (d / "measurements.jsonl").write_text("\n".join(lines) + "\n")
    s = summarize_dir(d)
    assert s.verdict == "degraded" and "data is incomplete or invalid" in verdict_line(s)
    (f,) = [f for f in s.findings if f.kind == "incomplete-data"]
    assert f.severity == "warning" and "measurements.jsonl: 94 of 280 line(s) skipped (not JSON" in f.message
    warn = [it.text for it in story(s) if it.severity == "warning" and it.text.startswith("Data:")]
    assert warn and "line(s) 1, 4, 7, 10, 13 and 89 more" in warn[0]


def test_a_cut_measurements_file_is_said_and_unmeasured_classes_are_not_ok(tmp_path):
    d = _healthy(tmp_path)
    text = (d / "measurements.jsonl").read_text()
    (d / "measurements.jsonl").write_text(text[:3000])  # a few NV4 measurements, then cut mid-line
    s = summarize_dir(d)
    assert any("truncated last line" in f.message for f in s.findings if f.kind == "incomplete-data")
    items = story(s)
    ok = " ".join(it.text for it in items if it.severity == "ok")
    assert "NODE" not in ok and "SYS" not in ok
    unjudged = next(it.text for it in items if it.text.startswith("Links not measured"))
    assert "NODE (8 pairs)" in unjudged and "SYS (16 pairs)" in unjudged


def test_an_emptied_measurements_file_calls_no_class_ok(tmp_path):
    d = _healthy(tmp_path)
    (d / "measurements.jsonl").write_text("")
    json_run = json.loads((d / "run.json").read_text())
    (d / "run.json").write_text(json.dumps({**json_run, "status": "complete"}))
    rc, out, err = gputopo_here("report", d, "--no-plots", cwd=REPO)
    assert rc == 0, err
    assert "no measurement in it, yet run.json says the run completed" in out
    assert "Link classes without problems" not in out and "Every link class is fine" not in out
    assert "Links not measured: NV4 (4 pairs), NODE (8 pairs), SYS (16 pairs)" in out.replace("\n", " ")


@pytest.mark.parametrize("where", ["run.json", "topology.json", "measurements.jsonl", "numerics.jsonl"])
def test_an_unknown_schema_version_is_refused(tmp_path, where):
    d = _healthy(tmp_path)
    path = d / where
    if where.endswith(".jsonl"):
        lines = path.read_text().splitlines()
        lines[1] = json.dumps({**json.loads(lines[1]), "schema_version": 999})
        path.write_text("\n".join(lines) + "\n")
    else:
        path.write_text(json.dumps({**json.loads(path.read_text()), "schema_version": 999}))
    with pytest.raises(InputFileError, match="schema_version 999 is not one this gputopo reads"):
        load_run(d)
    line = ":2" if where.endswith(".jsonl") else ""
    rc, out, err = gputopo_here("report", d, "--no-plots", cwd=REPO)
    assert rc == 2 and out == ""
    assert err.strip().splitlines() == [
        f"gputopo: error: {path}{line}: schema_version 999 is not one this gputopo reads (it reads 1): "
        "use the gputopo version that wrote it"]


def test_measurements_appended_twice_are_counted_once_and_said(tmp_path):
    d = _healthy(tmp_path)
    text = (d / "measurements.jsonl").read_text()
    (d / "measurements.jsonl").write_text(text + text)
    s = summarize_dir(d)
    assert len(s.run.measurements) == 280
    (f,) = [f for f in s.findings if f.kind == "invalid-data"]
    assert "280 line(s) repeat an earlier measurement exactly" in f.message
    assert s.verdict == "degraded"


def test_records_of_the_wrong_shape_are_skipped_and_counted_not_a_crash(tmp_path):
    """JSON lines that parse but hold the wrong types (gpus "x", losses "abc", an event finding
    whose gpus is a string) ended in an internal error (exit 4); they are skipped and counted."""
    d = write_run(tmp_path / "run", ["hang"])
    lines = (d / "numerics.jsonl").read_text().splitlines()
    lines[0] = json.dumps({**json.loads(lines[0]), "gpus": "x"})
    lines[1] = json.dumps({**json.loads(lines[1]), "losses": "abc"})
    lines[2] = json.dumps({**json.loads(lines[2]), "step": "nine"})
    (d / "numerics.jsonl").write_text("\n".join(lines) + "\n")
    with open(d / "events.jsonl", "a") as f:
        f.write(json.dumps({"type": "finding", "kind": "hang", "severity": "error", "gpus": "0,1",
                            "message": "x"}) + "\n")
    rc, out, err = gputopo_here("report", d, "--no-plots", cwd=REPO)
    assert rc == 0, err
    flat = " ".join(out.split())
    assert "numerics.jsonl: 3 of 5 line(s) skipped (not a numerics record): line(s) 1, 2, 3" in flat
    assert "events.jsonl: 1 of 3 line(s) skipped (not a finding): line(s) 3" in flat


def test_nccl_tests_json_with_logs_of_the_wrong_type_is_refused(tmp_path):
    d = _healthy(tmp_path)
    (d / "nccl_tests.json").write_text('{"schema_version": 1, "logs": "x"}')
    rc, out, err = gputopo_here("report", d, "--no-plots", cwd=REPO)
    assert rc == 2 and err.strip() == (f"gputopo: error: {d}/nccl_tests.json: \"logs\" must be a list of objects "
                                       "(one per imported nccl-tests log)")


def test_classes_a_run_did_not_ask_for_are_not_a_warning(tmp_path):
    """`bench --pairs 0,1` measures one NV4 pair: NODE and SYS are 'not-measured' in the class
    table, not a 'Links not measured' warning (that is for classes called ok without a transfer,
    or for a run whose data was damaged)."""
    from conftest_report import measurements as make_measurements

    d = write_run(tmp_path / "run", meas=make_measurements(pairs=[(0, 1)]), nums=[])
    s = summarize_dir(d)
    texts = [it.text for it in story(s)]
    assert not any(t.startswith("Links not measured") for t in texts), texts
    # not "Every link class is fine": two classes were not measured
    assert any(t.startswith("Link classes without problems: NV4") for t in texts), texts
    assert {c.link_class: c.verdict for c in s.classes} == {"NV4": "ok", "NODE": "not-measured",
                                                            "SYS": "not-measured"}


def test_measurements_with_impossible_values_are_skipped_and_said(tmp_path):
    """Lines of the right types but impossible values (a negative or zero time, a negative size
    or #wrong, a GPU twice, a GPU the topology lacks) went into the report silently."""
    d = _healthy(tmp_path)
    lines = (d / "measurements.jsonl").read_text().splitlines()
    changes = [{"samples_s": [-1.0, 0.001]}, {"samples_s": [0.0]}, {"size_bytes": -5}, {"wrong": -3},
               {"gpus": [3, 3]}, {"gpus": [0, 99]}]
    for k, change in enumerate(changes):
        lines[k] = json.dumps({**json.loads(lines[k]), **change})
    (d / "measurements.jsonl").write_text("\n".join(lines) + "\n")
    s = summarize_dir(d)
    assert len(s.run.measurements) == 280 - len(changes)
    (f,) = [f for f in s.findings if f.kind == "invalid-data"]
    assert "measurements.jsonl: 6 of 280 line(s) skipped (impossible values): line(s) 1, 2, 3, 4, 5 and 1 more" \
        in f.message
