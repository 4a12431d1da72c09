"""The history's `drift` and `counter-growth` findings are part of the run folder's record, as a
user runs it: two benches of a simulated lab box whose `clock` moves a day, whose GPU 2 NVLink 1
recovery counter grows and whose pair 2,3 slows to 60 %. The second run's summary.json,
report.md and report.html hold the findings and the runs they were compared against, and still
do after `gputopo report` re-renders the folder without the database; `check` reads the same
findings once; a run recorded with --no-history says nothing about the history.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from helpers.cli import gputopo
from history_box import day  # noqa: E402


def history_at(db: Path) -> dict:
    """The environment of a command that records into (and compares with) the database ``db``."""
    return {"GPUTOPO_HISTORY": str(db)}


def bench(tmp: Path, db: Path, n: int, recovery: int, slow: float = 0.0, *extra) -> Path:
    out = tmp / f"run{n}"
    code, _o, err = gputopo("bench", "--sim", day(tmp, n, recovery, slow), "--pairs", "2,3",
                            "--tests", "p2p", "--quick", "--out", out, *extra, env=history_at(db),
                            timeout=300)
    assert code == 0, err
    return out


def history_findings(summary: dict) -> list[dict]:
    return [f for f in summary["findings"] if (f["evidence"] or {}).get("basis") == "history"]


def assert_folder_tells_history(run: Path, baseline_run: Path) -> None:
    summary = json.loads((run / "summary.json").read_text())
    found = history_findings(summary)
    kinds = sorted({f["kind"] for f in found})
    assert kinds == ["counter-growth", "drift"], summary["findings"]
    drift = [f for f in found if f["kind"] == "drift"]
    assert all(f["gpus"] == [2, 3] and 0.55 < f["evidence"]["ratio"] < 0.65 for f in drift)
    growth = next(f for f in found if f["kind"] == "counter-growth")
    assert growth["gpus"] == [2] and growth["evidence"]["delta"] == 3 and growth["evidence"]["link"] == 1
    basis = summary["history"]
    assert [r["run_dir"] for r in basis["drift"]["baseline_runs"]] == [str(baseline_run.resolve())]
    assert basis["counters"]["compared_with"]["run_dir"] == str(baseline_run.resolve())
    md = (run / "report.md").read_text()
    section = md.split("## Against this machine's history", 1)[1].split("\n## ", 1)[0]
    assert str(baseline_run.resolve()) in section and "2026-11-01 08:00 UTC" in section
    assert "1 counter-growth" in section and f"{len(drift)} drift" in section
    assert "nvlink_recovery grew by 3" in md and "of this machine's baseline" in md
    html = (run / "report.html").read_text()
    assert 'id="history"' in html and "nvlink_recovery grew by 3" in html


@pytest.mark.slow
def test_history_findings_are_in_the_run_folder_and_survive_a_re_render(tmp_path):
    db = tmp_path / "history.sqlite"
    run1 = bench(tmp_path, db, 1, 0)
    first = json.loads((run1 / "summary.json").read_text())
    assert history_findings(first) == []  # nothing earlier to compare with
    assert (run1 / "history_findings.json").exists()

    run2 = bench(tmp_path, db, 2, 3, 0.6)
    assert_folder_tells_history(run2, run1)

    # re-rendered later, without the database: the folder keeps what the history said
    gone = tmp_path / "elsewhere.sqlite"
    code, out, err = gputopo("report", run2, "--json", env=history_at(gone), timeout=300)
    assert code == 0, err
    assert not gone.exists()
    assert sorted({f["kind"] for f in history_findings(json.loads(out))}) == ["counter-growth", "drift"]
    assert_folder_tells_history(run2, run1)

    # check reads the same findings, each once: fail_on counter-growth fails on the one growth
    spec = tmp_path / "growth.toml"
    spec.write_text('[findings]\nfail_on = ["counter-growth"]\n')
    code, out, err = gputopo("check", "--spec", spec, run2, "--json", env=history_at(db), timeout=300)
    verdict = json.loads(out)
    assert code == 1, err
    assert [o["rule"] for o in verdict["failures"]] == ["findings.fail_on.counter-growth"]
    # [history] judges drift from the database: one failure per drifted figure, none again
    # from the folder's drift findings
    spec.write_text("[history]\nbaseline_fraction = 0.8\n")
    code, out, err = gputopo("check", "--spec", spec, run2, "--json", env=history_at(db), timeout=300)
    failures = json.loads(out)["failures"]
    drifted = [f for f in history_findings(json.loads((run2 / "summary.json").read_text()))
               if f["kind"] == "drift"]
    assert code == 1 and {o["rule"] for o in failures} == {"history.baseline_fraction"}
    assert len(failures) == len(drifted)
    spec.write_text('[findings]\nfail_on = ["drift"]\n[history]\n')
    code, out, err = gputopo("check", "--spec", spec, run2, env=history_at(db), timeout=300)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "[history]" in err

    # checking a recorded folder records it again, never its history findings as its own
    c = sqlite3.connect(db)
    rows = c.execute("SELECT r.command, f.origin, count(*) FROM findings f JOIN runs r ON r.id = f.run_id "
                     "WHERE r.run_dir = ? AND f.kind IN ('drift', 'counter-growth') "
                     "GROUP BY r.id, f.origin", (str(run2.resolve()),)).fetchall()
    assert rows and all(origin == "history" for _cmd, origin, _n in rows)
    assert len({n for _c, _o, n in rows}) == 1  # each recording judged the same findings
    c.close()


@pytest.mark.slow
def test_a_run_recorded_with_no_history_says_nothing_about_it(tmp_path):
    db = tmp_path / "history.sqlite"
    bench(tmp_path, db, 1, 0)
    run2 = bench(tmp_path, db, 2, 3, 0.6, "--no-history")
    assert not (run2 / "history_findings.json").exists()
    summary = json.loads((run2 / "summary.json").read_text())
    assert summary["history"] is None and history_findings(summary) == []
    md = (run2 / "report.md").read_text()
    assert "history" not in md.lower().replace("gputopo history", "")
    # a gate cannot say "no drift" of a run never compared: the rule is skipped, saying why
    spec = tmp_path / "drift.toml"
    spec.write_text('[findings]\nfail_on = ["drift"]\n')
    code, out, err = gputopo("check", "--spec", spec, run2, "--json", "--no-history", env=history_at(db),
                             timeout=300)
    outcomes = [o for o in json.loads(out)["outcomes"] if o["rule"] == "findings.fail_on.drift"]
    assert code == 0, err
    assert [o["status"] for o in outcomes] == ["skipped"] and "--no-history" in outcomes[0]["message"]
    spec.write_text('strict = true\n[findings]\nfail_on = ["drift"]\n')
    code, out, err = gputopo("check", "--spec", spec, run2, "--no-history", env=history_at(db), timeout=300)
    assert code == 1, out + err


def test_a_damaged_history_findings_file_is_said_never_a_crash(tmp_path, capsys):
    from gputopo.cli.main import main

    log = tmp_path / "kern.log"
    log.write_text("[ 5.0] NVRM: Xid (PCI:0000:1c:00): 48, An uncorrectable double bit error (DBE)\n")
    run = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        main(["import", "kernel-log", str(log), "--out", str(run), "--no-history"])
    assert e.value.code == 0
    assert not (run / "history_findings.json").exists()
    drift = {"kind": "drift", "severity": "warning", "gpus": [0, 1], "link_class": None,
             "message": "GPUs 0,1: p2p.copy is 50.0% of this machine's baseline",
             "evidence": {"basis": "history", "ratio": 0.5}, "cause": None, "remedies": []}
    own = {**drift, "kind": "slow", "evidence": {"ratio": 0.5}}  # not a history finding
    (run / "history_findings.json").write_text(json.dumps(
        {"schema_version": 1, "drift": [], "counters": "x", "findings": [own, "junk", drift]}))
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(["report", str(run), "--json", "--no-plots"])
    out, err = capsys.readouterr()
    assert e.value.code == 0, err
    summary = json.loads(out)
    assert [f["kind"] for f in history_findings(summary)] == ["drift"]
    assert not any(f["kind"] == "slow" for f in summary["findings"])
    assert sum("history_findings.json: finding" in n for n in summary["notes"]) == 2
    assert "drift: not judged" in (run / "report.md").read_text()
    (run / "history_findings.json").write_text("{not json")
    with pytest.raises(SystemExit) as e:
        main(["report", str(run), "--no-plots"])
    _out, err = capsys.readouterr()
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and "history_findings.json" in err
