"""The floor under a default-preset sim bench of one pair: its verified work alone, measured.

Why: ``gputopo bench --sim seed-8gpu --pairs 5,6`` has a 15 s target on 2 cores that it does not
meet; this says how much of its time is the measuring itself. It runs the pair's 72 cases
(peer copies, DataParallel, collectives, up to 256 MiB, 10 samples each, every sample's bytes
moved, damaged by the pair's faults and compared bit for bit) in this one process, the way a
sim worker runs them, twice: the first pass pays what a fresh worker pays (pages faulted in,
patterns generated), the second is the work alone with every buffer and pattern in place.
Then it times a 256 MiB memory copy alone and beside a second process doing the same, since
the two sim workers share the memory bus. All figures are CPU seconds or wall seconds measured
here; the last line combines them (warm work / the two workers' combined speed-up) into the
least wall time two workers could take for the steps, with perfect packing and nothing else.

    python benchmarks/pair_floor.py [--sim seed-8gpu] [--pair 5,6]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _copies(n: int, out) -> None:
    import numpy as np

    src, dst = np.ones(64 << 20, dtype=np.float32), np.empty(64 << 20, dtype=np.float32)
    np.copyto(dst, src)  # pages in
    t = time.perf_counter()
    for _ in range(n):
        np.copyto(dst, src)
    out.put(time.perf_counter() - t)


def shared_bus_speedup(n: int = 20) -> float:
    """Throughput of two processes copying 256 MiB side by side, over one alone."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_copies, args=(n, q))
    p.start()
    p.join()
    alone = q.get()
    ps = [ctx.Process(target=_copies, args=(n, q)) for _ in range(2)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    together = max(q.get(), q.get())
    return 2 * alone / together


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sim", default="seed-8gpu")
    ap.add_argument("--pair", default="5,6")
    args = ap.parse_args()
    import torch

    from gputopo.bench.fabrics.sim import SimModel, SimOps
    from gputopo.bench.options import PRESETS
    from gputopo.bench.plan import cases_for
    from gputopo.bench.spec import measure
    from gputopo.bench.suites import build_spec
    from gputopo.bench.worker import _reuse_freed_memory
    from gputopo.sim.description import load_description

    torch.set_num_threads(1)  # as in a sim worker
    _reuse_freed_memory()
    preset = PRESETS["default"]
    pair = tuple(int(g) for g in args.pair.split(","))
    model = SimModel(load_description(args.sim), {})
    ops = SimOps(pair, pair, model)
    passes = []
    for label in ("first pass (a fresh worker)", "second pass (the work alone)"):
        per_group = {}
        for group in ("p2p", "dp", "collectives"):
            t0 = time.process_time()
            for case in cases_for(group, pair, preset.sizes_bytes, preset.latency_sizes_bytes):
                measure(build_spec(ops, case, latency_repeat=preset.latency_repeat), ops,
                        warmup=preset.warmup, samples=preset.samples, link_class=None)
            per_group[group] = time.process_time() - t0
        passes.append(sum(per_group.values()))
        print(f"{label}: {passes[-1]:.1f} CPU s (" +
              ", ".join(f"{g} {s:.1f}" for g, s in per_group.items()) + ")", flush=True)
    speedup = shared_bus_speedup()
    print(f"two processes copying 256 MiB side by side: {speedup:.2f}x the throughput of one")
    print(f"least wall for the steps on 2 workers: {passes[1]:.1f} / {speedup:.2f} = "
          f"{passes[1] / speedup:.1f} s, before start-up, numerics and the report")


if __name__ == "__main__":
    main()
