"""How fast `gputopo --help` and `gputopo scan --sim` are, end to end, as a user runs them.

Times whole processes (interpreter start included), median of several runs, for the built-in
seed machine and generated machines of 8, 64, 256 and 1,024 GPUs (`--sim synthetic-<N>gpu`;
1,024 once, it writes 135 MB of JSON), and the cost per GPU pair. Targets (issue 2): 8-GPU scan
< 0.5 s, --help < 0.3 s, cost growing with the number of pairs and no faster; issue 18: the
1,024-GPU scan in seconds, not minutes. Wall times on a shared machine depend on its load: the
load average is printed with them.

    python benchmarks/scan_speed.py [--runs 5] [--no-1024]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time


def wall(argv, runs):
    """Median wall seconds of running argv ``runs`` times (output discarded)."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        times.append(time.perf_counter() - t0)
        if proc.returncode != 0:
            sys.exit(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-1024", dest="big", action="store_false", help="skip the 1,024-GPU scan")
    args = ap.parse_args()
    gputopo = [sys.executable, "-m", "gputopo"]
    # each scan records into the history as a user's does, but into a throw-away database, not
    # the user's own (simulated runs would clutter it)
    import tempfile

    os.environ["GPUTOPO_HISTORY"] = os.path.join(tempfile.mkdtemp(prefix="gputopo-bench-"), "history.sqlite")
    # the checkout's gputopo, installed or not (as demo_time.py runs it)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.environ["PYTHONPATH"] = os.pathsep.join(x for x in (repo, os.environ.get("PYTHONPATH")) if x)

    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    base = wall([sys.executable, "-c", "pass"], args.runs)
    help_s = wall(gputopo + ["--help"], args.runs)
    seed_s = wall(gputopo + ["scan", "--sim", "seed-8gpu"], args.runs)
    print(f"python interpreter start alone        {base:7.3f} s")
    print(f"gputopo --help                        {help_s:7.3f} s   (target < 0.3 s)")
    print(f"gputopo scan --sim seed-8gpu (table)  {seed_s:7.3f} s   (target < 0.5 s)")
    print()
    print(f"{'GPUs':>5} {'pairs':>6} {'scan --json s':>14} {'minus start-up s':>17} {'ms/pair':>8}")
    rows = []
    for n in (8, 64, 256, 1024) if args.big else (8, 64, 256):
        pairs = n * (n - 1) // 2
        runs = 1 if n > 256 else max(3, args.runs // 2)
        s = wall(gputopo + ["scan", "--sim", f"synthetic-{n}gpu", "--json"], runs)
        work = s - help_s  # the part that depends on the machine's size
        rows.append((n, pairs, s, work))
        print(f"{n:>5} {pairs:>6} {s:>14.3f} {work:>17.3f} {1000 * work / pairs:>8.3f}")
    print()
    for (n0, p0, _, w0), (n1, p1, _, w1) in zip(rows[1:], rows[2:]):
        print(f"{n0} -> {n1} GPUs: pairs x{p1 / p0:.1f}, size-dependent time x{w1 / max(w0, 1e-9):.1f} "
              "(linear in pairs means about the same factor; faster growth would be worse than O(pairs))")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
