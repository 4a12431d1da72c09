"""Ctrl-C the demo's bench at random moments, once or twice, as a terminal does (the signal to
the whole process group), and check what is left: run.json says interrupted (or complete), the
last line says what the run folder holds and what to run next, and no process is still alive.

Not a pytest module (minutes of wall time, and random by design): run it after touching the
runner, the numerics' workers, the report's child or the CLI's exit path. It found that a
second Ctrl-C (or the process group's copy of the first: `timeout -s INT` sends both) escaped
the runner's shutdown ("gputopo: aborted", run.json failed) and the report's drawing.

    python tests/tools/ctrl_c_stress.py [--runs 20] [--single] [--signal SIGTERM] [--from 0.5 --to 12]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # tests/tools/ctrl_c_stress.py


def _alive_in_session(sid: int) -> list:
    """Processes of session ``sid`` still running (zombies have ended: init reaps them)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if os.getsid(int(d.name)) != sid:
                continue
            stat = (d / "stat").read_text()
        except (OSError, ProcessLookupError):
            continue
        if stat[stat.rfind(")") + 2] != "Z":
            out.append(int(d.name))
    return out


def one_run(out: Path, at_s: float, again_s: float, sig: int, twice: bool) -> tuple:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.Popen([sys.executable, "-m", "gputopo", "bench", "--sim", "seed-8gpu", "--quick",
                          "--out", str(out)], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, start_new_session=True)
    time.sleep(at_s)
    os.killpg(p.pid, sig)
    if twice:
        time.sleep(again_s)
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
    try:
        err = p.communicate(timeout=90)[1].decode(errors="replace")
    except subprocess.TimeoutExpired:
        p.kill()
        err = p.communicate()[1].decode(errors="replace") + "\n(hung: killed after 90 s)"
    deadline = time.monotonic() + 5
    while _alive_in_session(p.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _alive_in_session(p.pid)
    try:
        status = json.loads((out / "run.json").read_text())["status"]
    except (OSError, ValueError, KeyError):
        status = "?"
    last = (err.strip().splitlines() or [""])[-1]
    ok = (not left and p.returncode == 130 and "Traceback" not in err
          and ((status == "interrupted" and "--resume" in last)
               or (status == "complete" and last.startswith("gputopo: interrupted"))))
    return ok, p.returncode, status, left, last, err


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--single", action="store_true", help="one Ctrl-C per run, not two")
    ap.add_argument("--signal", default="SIGINT", choices=("SIGINT", "SIGTERM"))
    ap.add_argument("--from", dest="t0", type=float, default=0.5, help="earliest first signal (s)")
    ap.add_argument("--to", dest="t1", type=float, default=12.0, help="latest first signal (s)")
    args = ap.parse_args()
    sig = getattr(signal, args.signal)
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.runs):
            out = Path(tmp) / f"run{k}"
            at_s, again_s = random.uniform(args.t0, args.t1), random.uniform(0.0, 1.5)
            ok, rc, status, left, last, err = one_run(out, at_s, again_s, sig, not args.single)
            bad += not ok
            print(f"{'ok ' if ok else 'BAD'} signal at {at_s:5.2f} s"
                  + ("" if args.single else f", again {again_s:4.2f} s later")
                  + f": rc {rc}, run.json {status}, left {left or 'none'} | {last[:90]}", flush=True)
            if not ok:
                print("    " + "\n    ".join(err.strip().splitlines()[-12:]))
            shutil.rmtree(out, ignore_errors=True)
    print(f"{bad} of {args.runs} runs left something wrong")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
