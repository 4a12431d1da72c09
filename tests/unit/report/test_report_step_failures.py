"""A bench step or a numerics way that hung or crashed is recorded as a fact (model/step_failure.py:
an events.jsonl ``step-failed`` line, a numerics way's made from its numerics.jsonl record) and
the report alone makes the finding, through one reader (report/step_failures.py): the same
finding the bench and the numerics used to write themselves, so a folder written any of the
three ways (findings; bench facts and numerics records alone; both as facts) gives the same
report."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path
from typing import Optional

import pytest

from gputopo.model.step_failure import STEP_FAILED, StepFailure, numerics_failure
from gputopo.report.analysis import analyze
from gputopo.report.render import render_run
from gputopo.report.run_folder import load_run
from gputopo.report.step_failures import step_failure_finding
from helpers.paths import DATA

BEFORE = DATA / "run_before_step_facts"
RAW = ("run.json", "topology.json", "measurements.jsonl", "events.jsonl", "numerics.jsonl",
       "numerics_losses.csv")


def _copy(tmp_path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    for name in RAW:
        shutil.copy(BEFORE / name, run / name)
    return run


def _expected(name: str, run: Path) -> str:
    return (BEFORE / f"expected-{name}").read_text(encoding="utf-8").replace("{RUN_DIR}", str(run))


def _events(run: Path) -> list:
    return [json.loads(x) for x in (run / "events.jsonl").read_text(encoding="utf-8").splitlines()]


def _write_events(run: Path, events: list) -> None:
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")


def test_a_folder_written_before_step_failures_were_facts_gives_the_same_report(tmp_path):
    """Its hang and crash findings (bench and numerics) stay as written: summary.json and
    report.md are those gputopo wrote for it then, byte for byte."""
    run = _copy(tmp_path)
    assert {e["type"] for e in _events(run)} == {"finding", "step-done"}  # (the old layout)
    render_run(run)
    assert (run / "summary.json").read_text(encoding="utf-8") == _expected("summary.json", run)
    assert (run / "report.md").read_text(encoding="utf-8") == _expected("report.md", run)


def _records(run: Path) -> list:
    return [json.loads(x) for x in (run / "numerics.jsonl").read_text(encoding="utf-8").splitlines()]


def _as_facts(events: list, records: Optional[list] = None) -> list:
    """The same run as gputopo wrote it before a numerics way's failure was a step-failed line:
    a bench step's finding becomes its step-failed fact, and a numerics way's finding goes (its
    numerics.jsonl record says it); with ``records`` (the folder's numerics.jsonl), as gputopo
    writes it now: each numerics way's finding becomes the step-failed line its sink writes,
    made from its record."""
    out = []
    for e in events:
        if e["type"] != "finding":
            out.append(e)
            continue
        ev = e["evidence"]
        if ev.get("test") == "numerics":
            if records is not None:
                (rec,) = [r for r in records if r["gpus"] == e["gpus"] and r["way"] == ev["way"]]
                out.append(numerics_failure(rec).to_event())
            continue
        group = ev["test_group"]
        prefix = step_failure_finding(StepFailure(e["kind"], ev["step"], group, e["gpus"], e["link_class"],
                                                  "", ev)).message
        assert e["message"].startswith(prefix)
        out.append(StepFailure(e["kind"], ev["step"], group, e["gpus"], e["link_class"],
                               e["message"][len(prefix):], ev).to_event())
    return out


def test_the_same_run_written_as_facts_gives_the_same_findings_and_verdicts(tmp_path):
    run = _copy(tmp_path)
    _write_events(run, _as_facts(_events(run)))
    kinds = [e["type"] for e in _events(run)]
    assert kinds.count(STEP_FAILED) == 2 and "finding" not in kinds
    folder = load_run(run)
    # the numerics ways' failures derived from their records, after the events' own
    assert [(f.kind, f.step, f.evidence.get("way")) for f in folder.step_failures] == [
        ("hang", "p2p:0-1", None), ("crash", "p2p:2-3", None), ("hang", "numerics:0-1", "dp"),
        ("hang", "numerics:0-1", "ddp"), ("crash", "numerics:2-3", "dp"), ("crash", "numerics:2-3", "ddp")]
    assert [f.numerics for f in folder.step_failures] == [False, False, True, True, True, True]
    assert folder.event_findings == [] and not folder.problems
    render_run(run)
    got = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    want = json.loads(_expected("summary.json", run))
    assert [f["kind"] for f in got["findings"]] == ["hang", "hang", "hang", "crash", "crash", "crash"]
    assert got == want  # findings, evidence, causes, classes, pairs, verdict: all the same
    assert (run / "report.md").read_text(encoding="utf-8") == _expected("report.md", run)


def test_the_same_run_with_numerics_failures_as_step_failed_lines_gives_the_same_report(tmp_path):
    """As gputopo writes a run now: the numerics ways' failures are step-failed lines too (made
    from their records by the one maker), read by the one reader into the same findings."""
    run = _copy(tmp_path)
    _write_events(run, _as_facts(_events(run), _records(run)))
    assert [e["type"] for e in _events(run)].count(STEP_FAILED) == 6
    folder = load_run(run)
    assert [(f.step, f.evidence.get("way")) for f in folder.step_failures] == [
        ("p2p:0-1", None), ("p2p:2-3", None), ("numerics:0-1", "dp"), ("numerics:0-1", "ddp"),
        ("numerics:2-3", "dp"), ("numerics:2-3", "ddp")]
    assert folder.event_findings == [] and not folder.problems
    render_run(run)
    got = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    assert got == json.loads(_expected("summary.json", run))
    assert (run / "report.md").read_text(encoding="utf-8") == _expected("report.md", run)


def test_a_numerics_way_run_again_keeps_only_its_latest_result(tmp_path):
    """A resume that ran a way again (--retry-hung) appends its new record: a way that now
    trained leaves no failure (its step-failed line is superseded); one that failed again has
    only its last failure record."""
    run = _copy(tmp_path)
    records = _records(run)
    events = _as_facts(_events(run), records)
    dp01 = next(r for r in records if r["gpus"] == [0, 1] and r["way"] == "dp")
    ddp23 = next(r for r in records if r["gpus"] == [2, 3] and r["way"] == "ddp")
    again = {**ddp23, "error": "DDP: worker process 0 died (killed by signal SIGKILL)"}
    records += [{**dp01, "verdict": "ok", "error": None}, again]
    events.append(numerics_failure(again, {"exitcode": -signal.SIGKILL}).to_event())
    _write_events(run, events)
    (run / "numerics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    fs = [f for f in load_run(run).step_failures if f.numerics]
    assert [(f.step, f.evidence["way"]) for f in fs] == [("numerics:0-1", "ddp"), ("numerics:2-3", "dp"),
                                                       ("numerics:2-3", "ddp")]
    assert fs[-1].what == again["error"] and fs[-1].evidence["exitcode"] == -signal.SIGKILL
    (killed,) = [f for f in analyze(load_run(run)).findings
                 if f.kind == "crash" and f.gpus == [2, 3] and (f.evidence or {}).get("way") == "ddp"]
    assert killed.message == f"GPUs 2,3 (PIX): DDP training run crashed: {again['error']}"
    assert "OOM killer" in (killed.cause or "") and "IOMMU" not in (killed.cause or "")


def test_a_numerics_failure_is_made_from_its_record_by_one_maker():
    rec = {"gpus": [3, 1], "link_class": "SYS", "way": "ddp", "verdict": "crash", "step": None,
           "losses": [], "error": "DDP: rank 0: RuntimeError: boom", "wall_s": 1.5, "tolerance": {},
           "paths": {"all_reduce": "P2P"}, "notes": ["x"]}
    f = numerics_failure(rec, {"exitcode": -6})
    assert (f.kind, f.step, f.group, f.gpus, f.link_class, f.what) == (
        "crash", "numerics:1-3", "numerics", [1, 3], "SYS", rec["error"])
    assert f.evidence == {"way": "ddp", "step": None, "test": "numerics", "link_class": "SYS",
                          "error": rec["error"], "wall_s": 1.5, "paths": {"all_reduce": "P2P"}, "exitcode": -6}
    assert StepFailure.from_event(f.to_event()) == f
    for bad in ({**rec, "verdict": "nan"}, {**rec, "gpus": []}):
        with pytest.raises(ValueError):
            numerics_failure(bad)
    finding = step_failure_finding(f)
    assert finding.message == "GPUs 1,3 (SYS): DDP training run crashed: DDP: rank 0: RuntimeError: boom"
    assert finding.evidence == f.evidence and finding.cause is None  # (SIGABRT: the analysis adds one)


def test_a_step_redone_by_a_resume_keeps_only_its_new_result(tmp_path):
    run = _copy(tmp_path)
    events = _as_facts(_events(run))
    events.append({"type": "step-redo", "step": "p2p:0-1", "reason": "hang", "previous": "hang"})
    _write_events(run, events)
    assert [f.step for f in load_run(run).step_failures] == ["p2p:2-3"] + ["numerics:0-1"] * 2 + ["numerics:2-3"] * 2


def test_a_damaged_step_failure_line_is_skipped_and_said(tmp_path):
    """A step-failed line that is not one (gpus of the wrong type) is never shown as a finding
    nor silently dropped: the folder's data is incomplete, and the report says so."""
    run = _copy(tmp_path)
    events = _as_facts(_events(run))
    bad = next(e for e in events if e["type"] == STEP_FAILED and e["kind"] == "hang")
    bad["gpus"] = "0,1"
    _write_events(run, events)
    folder = load_run(run)
    assert [f.step for f in folder.step_failures if not f.numerics] == ["p2p:2-3"]
    assert any("not a step failure" in s and "gpus" in s for s in folder.skipped_lines)
    kinds = {f.kind for f in analyze(folder).findings}
    assert "incomplete-data" in kinds


@pytest.mark.parametrize("change, why", [
    ({"kind": "slow"}, "kind"), ({"step": 3}, "step"), ({"gpus": []}, "gpus"), ({"gpus": [True]}, "gpus"),
    ({"link_class": 7}, "link_class"), ({"evidence": []}, "evidence"),
    ({"evidence": {"case": {"test": "p2p.copy", "size_bytes": "16M"}}}, "evidence.case")])
def test_a_step_failure_line_is_checked_field_by_field(change, why):
    good = StepFailure("hang", "p2p:0-1", "p2p", [0, 1], "PXB", "no progress for 3 s", {}).to_event()
    assert StepFailure.from_event(good) == StepFailure("hang", "p2p:0-1", "p2p", [0, 1], "PXB",
                                                       "no progress for 3 s", {})
    with pytest.raises(ValueError, match=why):
        StepFailure.from_event({**good, **change})


def test_the_report_words_a_step_failure_and_names_a_kill_as_not_the_links():
    case = {"test": "p2p.copy", "direction": "0->1", "size_bytes": 16 << 20}
    hang = step_failure_finding(StepFailure("hang", "p2p:0-1", "p2p", [0, 1], "PXB",
                                            "no progress for 3 s", {"case": case}))
    assert (hang.kind, hang.severity, hang.gpus, hang.link_class) == ("hang", "error", [0, 1], "PXB")
    assert hang.message == "GPUs 0,1 (PXB): hang in the p2p step during p2p.copy 0->1 at 16M: no progress for 3 s"
    assert hang.cause is None and hang.remedies == []  # the analysis adds the path's suspects
    killed = step_failure_finding(StepFailure("crash", "self:2", "self", [2], None, "worker died",
                                              {"exitcode": -signal.SIGKILL}))
    assert killed.message == "GPU 2: crash in the self step: worker died"
    assert "out-of-memory" in killed.cause and "says nothing about the GPU link" in killed.cause
    # only what the fact supports: one cause among others, never "most likely"
    assert "is one cause, a person or the job scheduler others" in killed.cause
    assert "most likely" not in killed.cause
