"""Issue 18, runs that lose or duplicate results: `--resume` as a user runs it (the CLI).

One real sim bench run (seed-8gpu, pair 0,1, p2p only, --quick) is made once; each test works on
a copy, damaged the way the issue found it: a line cut by a kill, a recorded hang, a second
writer, a finished run, an import.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.cli import gputopo, gputopo_here
from helpers.paths import REPO



@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    """Commands that write a default folder (reports/) write it under the test's tmp_path."""
    monkeypatch.chdir(tmp_path)


#: The terminal the commands print for: wide enough that no table drops a column.
WIDE = {"COLUMNS": "200"}


def lines(path: Path):
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("resume") / "p2p"
    proc = gputopo("bench", "--sim", "seed-8gpu", "--quick", "--pairs", "0,1", "--tests", "p2p",
                   "--out", d, env=WIDE, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return d


@pytest.fixture
def run(finished, tmp_path) -> Path:
    d = tmp_path / "run"
    shutil.copytree(finished, d)
    (d / ".gputopo.lock").unlink(missing_ok=True)
    return d


def _set_status(d: Path, status: str) -> None:
    info = json.loads((d / "run.json").read_text())
    info["status"] = status
    (d / "run.json").write_text(json.dumps(info))


def _drop_step_done(d: Path, step: str) -> None:
    ev = [e for e in lines(d / "events.jsonl") if not (e.get("type") == "step-done" and e.get("step") == step)]
    (d / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in ev))


@pytest.mark.slow
def test_resume_of_a_finished_p2p_run_has_nothing_to_do(run):
    before = (run / "measurements.jsonl").read_bytes()
    proc = gputopo("bench", "--resume", run, env=WIDE, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "nothing to do" in proc.stderr, proc.stderr
    assert not (run / "numerics.jsonl").exists()
    assert (run / "measurements.jsonl").read_bytes() == before


@pytest.mark.slow
def test_resume_takes_its_tests_from_run_json_not_the_defaults(run):
    """An interrupted `--tests p2p` run: the resume finishes p2p and adds no numerics."""
    m = run / "measurements.jsonl"
    keep = m.read_text().splitlines(keepends=True)
    m.write_text("".join(keep[:-3]))
    _drop_step_done(run, "p2p:0-1")
    _set_status(run, "interrupted")
    proc = gputopo("bench", "--resume", run, env=WIDE, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert not (run / "numerics.jsonl").exists(), "a p2p-only run got numerics on resume"
    assert len(lines(m)) == len(keep)


@pytest.mark.slow
def test_a_line_cut_by_a_kill_is_redone_not_dropped(run):
    m = run / "measurements.jsonl"
    whole = lines(m)
    text = m.read_text()
    last = text.rstrip("\n").rsplit("\n", 1)[1]
    m.write_text(text[: len(text) - len(last) - 1] + last[: len(last) // 2])  # cut mid-line
    _drop_step_done(run, "p2p:0-1")
    _set_status(run, "interrupted")
    proc = gputopo("bench", "--resume", run, env=WIDE, timeout=300)
    assert proc.returncode == 0, proc.stderr
    after = lines(m)  # every line parses: the cut one was cleared, not glued to the next
    keys = {(r["test"], r.get("direction"), r["size_bytes"]) for r in after}
    assert keys == {(r["test"], r.get("direction"), r["size_bytes"]) for r in whole}
    report = gputopo("report", run, "--json", env=WIDE, timeout=300)
    doc = json.loads(report.stdout)
    assert not [f for f in doc["findings"] if f["kind"] in ("incomplete-data", "invalid-data")], doc["findings"]


def _fake_hang(run: Path) -> int:
    """Make p2p:0-1 a step that hung: its measurements gone, step-done status hang."""
    m = run / "measurements.jsonl"
    n = len(lines(m))
    m.write_text("")
    ev = [e for e in lines(run / "events.jsonl") if e.get("type") != "step-done"]
    ev.append({"type": "step-done", "step": "p2p:0-1", "status": "hang", "measurements": 0})
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in ev))
    _set_status(run, "interrupted")
    return n


@pytest.mark.slow
def test_a_recorded_hang_stays_a_result_unless_retry_hung(run):
    n = _fake_hang(run)
    proc = gputopo("bench", "--resume", run, env=WIDE, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    assert lines(run / "measurements.jsonl") == [], "the hung step was run again"
    proc = gputopo("bench", "--resume", run, "--retry-hung", env=WIDE, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    assert len(lines(run / "measurements.jsonl")) == n
    assert "--retry-hung" in proc.stderr


def test_retry_hung_without_resume_is_refused():
    proc = gputopo_here("bench", "--sim", "seed-8gpu", "--retry-hung", env=WIDE, timeout=300)
    assert proc.returncode == 2 and "--retry-hung" in proc.stderr


def test_numerics_pairs_with_a_recorded_hang_are_done_unless_retried(tmp_path):
    from gputopo.runfolder.writer import append_jsonl
    from gputopo.numerics.sink import done_pairs

    append_jsonl(tmp_path / "numerics.jsonl", {"gpus": [0, 1], "way": "reference", "verdict": "ok"})
    append_jsonl(tmp_path / "numerics.jsonl", {"gpus": [0, 1], "way": "dp", "verdict": "hang"})
    assert done_pairs(tmp_path) == [(0, 1)]
    assert done_pairs(tmp_path, retry_hung=True) == []


@pytest.mark.slow
def test_a_second_writer_is_refused_in_one_line(run):
    m = run / "measurements.jsonl"
    m.write_text("".join(m.read_text().splitlines(keepends=True)[:-3]))
    _drop_step_done(run, "p2p:0-1")
    _set_status(run, "interrupted")
    before = m.read_bytes()
    fd = os.open(run / ".gputopo.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another gputopo writing this folder
        proc = gputopo("bench", "--resume", run, env=WIDE, timeout=300)
    finally:
        os.close(fd)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "another gputopo" in proc.stderr
    assert m.read_bytes() == before


def test_resume_and_place_of_an_import_are_usage_errors(tmp_path):
    log = REPO / "tests" / "fixtures" / "nccl-tests" / "autodl_2x2080ti_all_reduce.txt"
    d = tmp_path / "imp"
    assert gputopo_here("import", "nccl-tests", log, "--out", d, env=WIDE, timeout=300).returncode == 0
    proc = gputopo_here("bench", "--resume", d, env=WIDE, timeout=300)
    assert proc.returncode == 2 and "not a bench run" in proc.stderr, proc.stderr
    proc = gputopo_here("place", "2", "--from", d, env=WIDE, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def _full_disk(monkeypatch, folder: str, allow=("run.json.tmp",)):
    """Every write into ``folder`` fails with ENOSPC (but the names in ``allow``)."""
    import builtins
    import errno
    import io

    real_open = builtins.open

    def full_disk_open(file, mode="r", *a, **k):
        if any(c in mode for c in "wax") and str(file).startswith(folder) \
                and not str(file).endswith(allow):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(file, mode, *a, **k)

    monkeypatch.setattr(builtins, "open", full_disk_open)
    monkeypatch.setattr(io, "open", full_disk_open)


def test_a_disk_that_fills_while_the_report_is_written_is_one_line(tmp_path, monkeypatch, capsys):
    """ENOSPC on every write into the run folder (the report, and the error handler's own
    error.txt): one line, exit 2, no traceback (was a 77-line traceback)."""
    from conftest_report import write_run
    from gputopo.cli.main import main

    run = write_run(tmp_path / "run", ())
    _full_disk(monkeypatch, str(run), allow=())
    with pytest.raises(SystemExit) as exc:
        main(["report", str(run)])
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    assert len(err.strip().splitlines()) == 1 and "disk full" in err, err
    assert "Traceback" not in err


def test_a_full_disk_during_a_job_marks_the_run_failed_not_running(tmp_path, monkeypatch, capsys):
    """The job's report fails on a full disk while run.json says running (the numerics phase):
    run.json becomes "failed" where the disk still takes it (best effort)."""
    from conftest_report import write_run
    from gputopo import jobs
    from gputopo.runfolder.writer import errors_belong_to, set_run_status
    from gputopo.cli.main import main

    run = write_run(tmp_path / "run", ())
    set_run_status(run, "running")

    def job_whose_report_hits_a_full_disk(*a, **k):
        import errno
        with errors_belong_to(run):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(jobs, "run_job", job_whose_report_hits_a_full_disk)
    _full_disk(monkeypatch, str(run))
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--sim", "seed-8gpu", "--pairs", "0,1", "--tests", "p2p"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and len(err.strip().splitlines()) == 1, err
    monkeypatch.undo()
    assert json.loads((run / "run.json").read_text())["status"] == "failed"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks")
@pytest.mark.slow
def test_a_lock_still_shared_with_a_starting_child_is_waited_for_not_refused(tmp_path, monkeypatch):
    """A flock belongs to the open file: a child this process forks while a phase holds the lock
    shares it until it closes the descriptor (at exec, for the forkserver). The next phase's lock
    in that window must wait, not say "another gputopo is writing"; a lock really held by another
    process is still refused, after LOCK_GRACE_S."""
    import time

    from gputopo.errors import UsageError
    from gputopo.runfolder import writer as R
    from gputopo.runfolder.layout import LOCK_FILE

    with R.run_folder_lock(tmp_path):
        pid = os.fork()
        if pid == 0:  # the child keeps its copy of the locked descriptor for 0.3 s
            time.sleep(0.3)
            os._exit(0)
    t0 = time.monotonic()
    with R.run_folder_lock(tmp_path):
        waited = time.monotonic() - t0
    os.waitpid(pid, 0)
    assert 0.1 < waited < R.LOCK_GRACE_S

    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time\n"
         f"fd = os.open({str(tmp_path / LOCK_FILE)!r}, os.O_RDWR)\n"
         "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(30)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(R, "LOCK_GRACE_S", 0.2)
        with pytest.raises(UsageError, match="another gputopo is writing"):
            with R.run_folder_lock(tmp_path):
                pass
    finally:
        holder.kill()
        holder.wait()
