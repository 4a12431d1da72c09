"""`gputopo gate`'s time model (gputopo/fleet/gate_time.py) against what its measuring step
really takes: for each fabric here (sim, cpu) and sets of 2, 4 and 8 GPUs of a simulated DGX
H100, the copies of every pair (and, with --allreduce, the all_reduce) run through the bench's
pool as `gate` runs them (gputopo/bench/gate_copies.py), each with a forkserver of its own (as
each `gate` process starts one), timed on the wall clock, median of --runs; printed beside the model's estimate and its error (model / measured). The cuda fabric's
costs are unmeasured here (no GPU): the script says so instead of timing them.
Wall times on a shared machine depend on its load: the load average is printed with them.

    python benchmarks/gate_time.py [--runs 3] [--allreduce] [--fabrics sim,cpu]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--allreduce", action="store_true")
    ap.add_argument("--fabrics", default="sim,cpu")
    ap.add_argument("--machine", default="dgx-h100")
    args = ap.parse_args()
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, repo)
    from gputopo.bench.fabrics.fabric import fabric_named
    from gputopo.bench.gate_copies import allreduce_step, copy_step, run_gate_steps
    from gputopo.bench.options import all_pairs
    from gputopo.bench.runner import stop_forkserver
    from gputopo.cli.gate import ALLREDUCE_BYTES, COPY_BYTES
    from gputopo.fleet.gate_time import COSTS, estimate
    from gputopo.sim.description import load_description
    from gputopo.sim.scan import scan_description

    desc = load_description(args.machine)
    topo = scan_description(desc)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs); "
          f"machine {args.machine} (SIMULATED); copies of {COPY_BYTES >> 20} MiB each way per pair")
    print("cuda: the model's costs are unmeasured (no GPU here): " + COSTS["cuda"].basis)
    print(f"{'fabric':6} {'GPUs':>4} {'pairs':>5} {'measured s':>10} {'model s':>8} {'model/measured':>14}")
    worst = 1.0
    for name in args.fabrics.split(","):
        fabric = fabric_named(name)
        for n in (2, 4, 8):
            gpus = list(range(min(n, len(topo.gpus))))
            pairs = all_pairs(gpus)
            steps = [copy_step(topo, p, COPY_BYTES) for p in pairs]
            if args.allreduce:
                steps.append(allreduce_step(gpus, ALLREDUCE_BYTES))
            times = []
            for _ in range(args.runs):
                with tempfile.TemporaryDirectory(prefix="gputopo-gate-bench-") as d:
                    t0 = time.perf_counter()
                    got = run_gate_steps(topo, steps, fabric, Path(d) / "run", desc if fabric.simulated else None,
                                         timeout_s=60.0)
                    times.append(time.perf_counter() - t0)
                    stop_forkserver()  # each gate is a process of its own: it starts the forkserver
                    if got.failures or len(got.measurements) < 2 * len(pairs):
                        print(f"  ({name}, {n} GPUs: {len(got.failures)} step(s) failed, "
                              f"{len(got.measurements)} measurements)")
            workers = fabric.pool_size(None) if fabric.pooled else len(gpus)
            model = estimate(COSTS[name], workers, len(pairs), args.allreduce)
            real = statistics.median(times)
            ratio = model / real
            worst = max(worst, ratio, 1 / ratio)
            print(f"{name:6} {len(gpus):4d} {len(pairs):5d} {real:10.2f} {model:8.2f} {ratio:14.2f}")
    print(f"worst error: a factor of {worst:.2f}; load average after: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
