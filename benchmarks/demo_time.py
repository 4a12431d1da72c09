"""Wall and CPU time of the timed commands of docs/performance.md, as a user runs them (whole process tree):

- the demo's bench, ``gputopo bench --sim seed-8gpu --quick`` (1,008 verified measurements,
  56 trainings, the report), target 15 s wall on 2 quiet cores;
- a default-preset bench of one pair, ``gputopo bench --sim seed-8gpu --pairs 5,6`` (72
  measurements up to 256 MiB, numerics, report), target 15 s wall.

Each is run ``--repeat`` times; every run prints its wall seconds, the CPU seconds of the whole
tree (user + system of the command and every process it started, from getrusage of the
children), the bench phase's own seconds from run.json, and the 1-minute load average before
and after: a wall time taken while other processes ran is an upper bound, the CPU seconds are
the figure to compare then. Before each run it also times a 64 MiB memory copy (GB/s, best of
5): most of the demo's work is memory-bound, and on a shared virtual machine that speed moves
by 20 % or more from minute to minute (neighbours on the host), taking both figures with it.

    python benchmarks/demo_time.py [--repeat 3] [--only demo|pair]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMMANDS = {
    "demo": ["bench", "--sim", "seed-8gpu", "--quick"],
    "pair": ["bench", "--sim", "seed-8gpu", "--pairs", "5,6"],
}


def _load() -> str:
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "?"


def memory_copy_gbps(size_bytes: int = 64 << 20, repeat: int = 5) -> float:
    """GB/s of one 64 MiB numpy copy (read + write counted once), best of ``repeat``."""
    import numpy as np

    src = np.ones(size_bytes // 8)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t)
    return size_bytes / best / 1e9


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_once(argv, out: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO), GPUTOPO_HISTORY=str(out.parent / "history.sqlite"))
    copy_gbps = memory_copy_gbps()
    load_before, cpu0, t0 = _load(), _children_cpu_s(), time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "gputopo", *argv, "--out", str(out)], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    wall = time.monotonic() - t0
    cpu = _children_cpu_s() - cpu0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr.strip()[-500:]}")
    info = json.loads((out / "run.json").read_text())
    return {"wall_s": wall, "cpu_s": cpu, "bench_s": info.get("elapsed_s"),
            "load": f"{load_before} -> {_load()}", "copy_gbps": copy_gbps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", choices=sorted(COMMANDS))
    args = ap.parse_args()
    print(f"{os.cpu_count()} CPU(s); wall / CPU seconds of the whole process tree")
    for name, argv in COMMANDS.items():
        if args.only and name != args.only:
            continue
        walls = []
        for k in range(args.repeat):
            with tempfile.TemporaryDirectory(prefix="gputopo-demo-time-") as tmp:
                r = run_once(argv, Path(tmp) / "run")
            walls.append(r["wall_s"])
            print(f"gputopo {' '.join(argv)}  run {k + 1}: {r['wall_s']:.1f} s wall, "
                  f"{r['cpu_s']:.1f} CPU s (bench phase {r['bench_s']} s), load {r['load']}, "
                  f"memory copy {r['copy_gbps']:.1f} GB/s before",
                  flush=True)
        walls.sort()
        print(f"  median wall {walls[len(walls) // 2]:.1f} s, best {walls[0]:.1f} s; target 15 s")


if __name__ == "__main__":
    main()
