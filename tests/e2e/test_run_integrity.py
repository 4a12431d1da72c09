"""A run's folder tells the truth about how it ended: SIGTERM leaves run.json "interrupted",
a worker that dies while idle is in events.jsonl, and Ctrl-C during `check` still writes the
JUnit file (of the partial run, which cannot pass)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from conftest import wait_for_first_line
from helpers.paths import REPO



def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


@pytest.mark.slow
def test_sigterm_leaves_the_run_interrupted_not_running(tmp_path):
    out, err = open(tmp_path / "stdout.txt", "w"), open(tmp_path / "stderr.txt", "w")
    with out, err:
        p = subprocess.Popen([sys.executable, "-m", "gputopo", "bench", "--sim", "seed-8gpu",
                              "--quick", "--tests", "p2p", "--out", "run"], cwd=tmp_path,
                             env=_env(), stdout=out, stderr=err, start_new_session=True)
    ms = tmp_path / "run" / "measurements.jsonl"
    wait_for_first_line(p, ms, "run")
    os.kill(p.pid, signal.SIGTERM)  # the command only, as `kill PID` or a CI runner does
    try:
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    stderr = (tmp_path / "stderr.txt").read_text()
    assert p.returncode == 130, stderr
    assert "Traceback" not in stderr and "--resume run" in stderr
    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "interrupted"


def test_a_worker_that_dies_idle_is_recorded_in_events(tmp_path):
    """A worker that died with no step: the pool's idle_exit (the one place of the exit-time
    SIGABRT rule) removes it, once, and the runner records its exit, not a failure."""
    import multiprocessing

    from gputopo.bench.runner import Runner
    from gputopo.runfolder.writer import RunLog
    from gputopo.workers.pool import Worker, WorkerProcesses

    class Proc:  # a process the kernel killed (SIGKILL) while it had no step
        exitcode, pid = -9, 4242

        def join(self, timeout=None):
            pass

        def is_alive(self):
            return False

    gone = []
    parent, _child = multiprocessing.Pipe()
    w = Worker("w0", Proc(), parent, "")

    class Host:  # the runner's state _worker_died reads and changes
        log = RunLog(tmp_path)
        procs = WorkerProcesses(None, on_gone=gone.append)

    host = Host()
    host.procs.workers["w0"] = w
    Runner._worker_died(host, w, {})
    events = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert events == [{"type": "worker-exit", "worker": "w0", "pid": 4242, "exitcode": -9,
                       "exit": "killed by signal SIGKILL", "idle": True}]
    assert gone == ["w0"] and host.procs.workers == {}
    # a report of the folder still loads (the event is not a finding)
    from gputopo.report.run_folder import load_run

    (tmp_path / "run.json").write_text("{}")
    assert load_run(tmp_path).event_findings == []


@pytest.mark.slow
def test_ctrl_c_during_check_still_writes_the_junit_of_what_was_judged(tmp_path, monkeypatch,
                                                                        capsys):
    import gputopo.jobs as jobs
    from gputopo.cli.main import main

    run = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        main(["bench", "--sim", "pcie-4gpu", "--quick", "--pairs", "0,1", "--tests", "p2p",
              "--out", str(run), "--json"])
    assert e.value.code == 0
    info = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**info, "status": "interrupted"}))

    class Interrupted:
        run_dir = run
        interrupted = True
        report_cut = False

    monkeypatch.setattr(jobs, "run_job", lambda *a, **kw: Interrupted())
    capsys.readouterr()
    junit = tmp_path / "gate.xml"
    with pytest.raises(SystemExit) as e:
        main(["check", "--spec", "pcie-box", "--sim", "pcie-4gpu", "--quick", "--pairs", "0,1",
              "--junit", str(junit)])
    assert e.value.code == 130
    err = capsys.readouterr().err
    assert "--resume" in err and str(junit) in err
    root = ET.parse(junit).getroot()
    failures = [c.get("name") for c in root.iter("testcase") if c.find("failure") is not None]
    assert any("run.complete" in (n or "") for n in failures), failures
    assert len(list(root.iter("testcase"))) > 1  # the rest was judged too
