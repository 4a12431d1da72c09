"""How long `gputopo health --level passive` takes on each built-in simulated machine, as a
scheduler runs it: whole processes (interpreter start included), median of several runs, each
machine checked twice in a row against a history of its own (the second run compares counters).
Target (issue 48): under 3 s on every built-in machine, well inside NPD's 5 s and Slurm's 60 s.
Wall times on a shared machine depend on its load: the load average is printed with them.

    python benchmarks/health_time.py [--runs 3] [--as npd]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--as", dest="dialect", default="npd", choices=["json", "npd", "nagios"])
    args = ap.parse_args()
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.environ["PYTHONPATH"] = os.pathsep.join(x for x in (repo, os.environ.get("PYTHONPATH")) if x)
    work = tempfile.mkdtemp(prefix="gputopo-health-bench-")
    os.environ["GPUTOPO_HISTORY"] = os.path.join(work, "history.sqlite")  # never the user's own
    os.environ["GPUTOPO_STATE_DIR"] = work
    sys.path.insert(0, repo)
    from gputopo.sim.description import builtin_names

    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    print(f"{'machine':24} {'verdict (exit)':>14} {'median s':>9} {'max s':>7}")
    worst = 0.0
    for name in builtin_names():
        times, code = [], None
        for _ in range(args.runs):
            t0 = time.perf_counter()
            p = subprocess.run([sys.executable, "-m", "gputopo", "health", "--as", args.dialect, "--sim", name],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            times.append(time.perf_counter() - t0)
            code = p.returncode
        worst = max(worst, max(times))
        print(f"{name:24} {'exit ' + str(code):>14} {statistics.median(times):9.2f} {max(times):7.2f}")
    print(f"slowest run: {worst:.2f} s (target < 3 s); load average after: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
