"""Wall time of the quick all-pairs sim sweep: seed-8gpu (28 pairs) and a 16-GPU synthetic
machine (120 pairs), per pair. Target: the 8-GPU sweep under 60 s on 2 cores, time growing
linearly with the number of pairs (so seconds per pair about equal for both machines).

The forkserver that workers are forked from (one ``import torch``) is started by a one-pair
warm-up run first and reported apart; each sweep's wall time includes everything else (worker
start-up, planning, writing the run folder). The load average before and after each sweep is
printed with it: wall times on a machine shared with other processes are not quiet-machine
figures (compare CPU seconds, e.g. ``/usr/bin/time -v`` over this script, instead).

    python benchmarks/sweep_time.py [--skip-16]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

# Runs from a checkout without gputopo installed, as the other benchmarks do.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def sweep(desc, out: str, pairs=None):
    from gputopo.bench.api import BenchOptions, run_bench
    from gputopo.sim.scan import scan_description

    topo = scan_description(desc)
    pairs = pairs or [p.gpus for p in topo.pairs]
    opts = BenchOptions(pairs=pairs, preset="quick", progress=False, reports_dir=out)
    t0 = time.monotonic()
    res = run_bench(topo, opts, "sim", desc)
    return time.monotonic() - t0, res


def _load() -> str:
    """The 1-minute load average (how busy the cores were), or "?" where it is not known."""
    import os

    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "?"


def main(argv=None) -> int:
    import os

    from gputopo.sim.description import generate_description, load_description

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-16", action="store_true", help="only the 8-GPU sweep")
    args = ap.parse_args(argv)
    print(f"{os.cpu_count()} cores; quick preset; load average {_load()}", flush=True)
    machines = [("seed-8gpu", load_description("seed-8gpu"))]
    if not args.skip_16:
        machines.append(("synthetic-16gpu", generate_description(16)))
    per_pair = {}
    with tempfile.TemporaryDirectory() as out:
        warm, _ = sweep(machines[0][1], out, pairs=[(0, 1)])
        print(f"warm-up (forkserver start + 1 pair): {warm:.1f} s", flush=True)
        for name, desc in machines:
            wall, res = sweep(desc, out)
            n = len(res.options.pairs)
            per_pair[name] = wall / n
            bad = [f.kind for f in res.failures]
            print(f"{name}: {n} pairs, {len(res.measurements)} measurements, {wall:.1f} s wall, "
                  f"{wall / n:.2f} s/pair{' FAILURES ' + str(bad) if bad else ''} "
                  f"(load average after: {_load()})", flush=True)
    t8 = per_pair["seed-8gpu"] * 28
    print(f"8-GPU quick sweep {t8:.1f} s (target < 60 s): {'OK' if t8 < 60 else 'OVER'}")
    if len(per_pair) == 2:
        r = per_pair["synthetic-16gpu"] / per_pair["seed-8gpu"]
        print(f"s/pair 16-GPU / 8-GPU: {r:.2f} (1.0 = linear in pairs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
