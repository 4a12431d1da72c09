"""gputopo's measurement overhead on the cpu fabric: all_reduce busbw at 64 MiB, gputopo vs a
bare torch.distributed loop timed the same way, side by side in one run.

Two processes join one gloo group (one torch thread each, like gputopo's workers) and
alternate, sample by sample, gputopo's own sample path (gputopo.bench.spec.take_sample on the
all_reduce Spec of gputopo.bench.suites and the cpu fabric's Ops: refill, barrier, timed
all_reduce, bit-exact verify, slowest rank's time) with a bare loop (refill, barrier, timed
all_reduce, slowest rank's time). Alternating in the same processes makes machine-load drift
hit both alike. busbw = median over all samples; the ratio gputopo / bare should be >= 0.95.
Then a full ``run_bench`` of the same size prints the busbw the CLI would report, for
reference.

    python benchmarks/overhead.py [--rounds 10] [--samples 10] [--size 64M]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

# Runs from a checkout without gputopo installed, as the other benchmarks do.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def rank_main(rank: int, port: int, size_bytes: int, warmup: int, samples: int, rounds: int,
              conn) -> None:
    import torch
    import torch.distributed as dist

    from gputopo.bench.fabrics.cpu import CpuOps
    from gputopo.bench.plan import Case
    from gputopo.bench.spec import take_sample
    from gputopo.bench.suites import build_spec

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    ops = CpuOps(local_gpus=(rank,), step_gpus=(0, 1), world=2)
    case = Case("collective.all_reduce", (0, 1), "both", size_bytes)
    buf = torch.empty(size_bytes // 4)
    pristine = torch.ones(size_bytes // 4)
    sync = torch.zeros(1)

    def bare_sample() -> float:
        buf.copy_(pristine)  # refill outside the timed region, as gputopo does
        dist.all_reduce(sync)  # the barrier gputopo uses
        t0 = time.perf_counter()
        dist.all_reduce(buf)
        dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(dt, op=dist.ReduceOp.MAX)
        return dt.item()

    # gputopo's own sample path (refill, barrier, timed op, verify, combine) on its Spec ...
    spec = build_spec(ops, case, latency_repeat=1)
    prepared = spec.prepare()
    for _ in range(warmup):
        take_sample(spec, prepared, ops, 0)
        bare_sample()
    ours, bare = [], []
    for k in range(rounds * samples):  # ... alternating sample by sample with the bare loop
        t, wrong, _ = take_sample(spec, prepared, ops, k)
        assert wrong == 0, wrong
        ours.append(t)
        bare.append(bare_sample())
    if rank == 0:
        conn.send((ours, bare))
    dist.destroy_process_group()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def side_by_side(size_bytes: int, warmup: int, samples: int, rounds: int):
    from gputopo.bench.runner import mp_context

    ctx = mp_context()
    parent, child = ctx.Pipe()
    port = _free_port()
    procs = [ctx.Process(target=rank_main,
                         args=(r, port, size_bytes, warmup, samples, rounds, child))
             for r in range(2)]
    for p in procs:
        p.start()
    ours, bare = parent.recv()
    for p in procs:
        p.join(60)
    return ours, bare


def run_bench_busbw(size_bytes: int, warmup: int, samples: int) -> float:
    from gputopo.bench.api import BenchOptions, run_bench
    from gputopo.model import Gpu, LinkClass, Pair, Topology

    topo = Topology(gpus=[Gpu(0), Gpu(1)], pairs=[Pair((0, 1), LinkClass("SYS"))],
                    machine="cpu-2", source="cpu")
    with tempfile.TemporaryDirectory() as out:
        opts = BenchOptions(pairs=[(0, 1)], tests=("collectives",), sizes_bytes=(size_bytes,),
                            warmup=warmup, samples=samples, progress=False, reports_dir=out)
        res = run_bench(topo, opts, "cpu")
    m = next(m for m in res.measurements if m.test == "collective.all_reduce")
    return m.busbw_gbps


def main(argv=None) -> int:
    from gputopo.bench.options import format_size, parse_size

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--samples", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--size", default="64M")
    args = ap.parse_args(argv)
    size = parse_size(args.size)
    ours, bare = side_by_side(size, args.warmup, args.samples, args.rounds)
    # 2 ranks: busbw = algbw x 2(n-1)/n = algbw
    ours_bw = size / statistics.median(ours) / 1e9
    bare_bw = size / statistics.median(bare) / 1e9
    ratio = ours_bw / bare_bw
    paired = statistics.median(b / o for o, b in zip(ours, bare))
    print(f"all_reduce {format_size(size)} on the cpu fabric (gloo, 2 processes), "
          f"{len(ours)} samples each, alternating")
    print(f"  bare torch.distributed loop: busbw {bare_bw:.3f} GB/s")
    print(f"  gputopo measure loop:        busbw {ours_bw:.3f} GB/s")
    print(f"  ratio gputopo/bare: {ratio:.3f} (target >= 0.95): "
          f"{'OK' if ratio >= 0.95 else 'BELOW TARGET'}; median of paired sample ratios "
          f"{paired:.3f}")
    full = run_bench_busbw(size, args.warmup, args.samples)
    print(f"  for reference, `run_bench` (own worker processes): busbw {full:.3f} GB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
