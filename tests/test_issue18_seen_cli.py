"""Issue 18, "What a person sees", as a user runs it: `bench --resume DIR` first says which
run it continues and how far it got; `--concurrent` on a simulated machine is refused in one
line (exit 2) rather than silently ignored."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def gputopo(*args, cwd=None, timeout=240):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-m", "gputopo", *map(str, args)], check=False,
                          cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env=env)


def test_resume_says_first_which_run_it_continues_and_how_far_it_got(tmp_path):
    run = tmp_path / "run"
    first = gputopo("bench", "--sim", "pcie-4gpu", "--quick", "--pairs", "0,1", "--tests", "p2p",
                    "--out", run, "--json", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    ms = run / "measurements.jsonl"
    lines = ms.read_text(encoding="utf-8").splitlines(keepends=True)
    total, lost = len(lines), 3
    assert total > lost
    ms.write_text("".join(lines[:-lost]), encoding="utf-8")  # as if the last ones were never taken

    proc = gputopo("bench", "--resume", run, "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    said = proc.stderr.splitlines()
    assert said, "--resume said nothing about what it continues"
    assert said[0] == (f"resuming {run}: bench on pcie-4gpu (SIMULATED), {total - lost} of {total} "
                       f"measurements done, {lost} to go; tests p2p"), said[0]
    assert len(ms.read_text(encoding="utf-8").splitlines()) == total  # and it did what it said


def test_concurrent_on_a_simulated_machine_is_refused_in_one_line(tmp_path):
    proc = gputopo("bench", "--sim", "pcie-4gpu", "--quick", "--pairs", "0,1", "--tests", "p2p",
                   "--concurrent", "--out", tmp_path / "run", cwd=tmp_path)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--concurrent" in lines[0] and "sim" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists()  # nothing started
