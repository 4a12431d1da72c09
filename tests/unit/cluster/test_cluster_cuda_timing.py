"""Issue 43, item 1: `cluster --fabric cuda` times the collective, not the ranks' CPUs.

Each sample used to poll the gate's event every 0.2 ms, record ``start`` on an idle stream when
the CPU noticed, then enqueue the all_reduce: every rank but the last to notice timed the
others' lag and the host launch, and the group kept its slowest rank. The fake here
(tests/helpers/gpu_timeline.py) models several ranks with different CPU lag per sample, a host
launch time per call, and a gate that costs what a 1-element all_reduce costs; the figure must
be within 2 % of the modelled kernel time at 1 MiB, 64 MiB and 1 GiB with 2, 8 and 16 ranks.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from gputopo.cluster.dist_backend import HOLD_S, DistBackend, group_key, group_time
from gputopo.cluster.launch import LaunchEnv
from tests.helpers.gpu_timeline import Timeline

MIB = 1 << 20
LAUNCH = {"sleep": 4e-6, "record": 2e-6, "allreduce": 15e-6}  # host seconds per call


def kernel_s(size_bytes: int, n: int) -> float:
    """The modelled all_reduce: 8 us of latency plus a ring's bytes at 370 GB/s busbw."""
    return 8e-6 + size_bytes * 2 * (n - 1) / n / 370e9


def lag(rank: int, k: int) -> float:
    """Each rank's CPU late after each wake-up: a base of its own (0, 100 or 200 us: a busier
    host) and 0-200 us more that varies from one wake-up to the next."""
    return (rank % 3) * 100e-6 + ((rank * 7 + k * 3) % 11) * 20e-6


class Store:
    def check(self, keys):
        return False


def rank_backend(gpu, n: int, samples: int) -> DistBackend:
    b = DistBackend.__new__(DistBackend)
    b._init_state()
    b.torch, b.dist, b.fabric = gpu.torch(), SimpleNamespace(), "cuda"
    b.size_bytes, b.samples, b.device = 4, samples, torch.device("cuda", 0)
    b.rank, b.world, b.timeout_s = gpu.rank, n, 60.0
    b.env = LaunchEnv("slurm", gpu.rank, n, 0, 1, "h", 1, f"n{gpu.rank}")
    b._clock, b._sleep = gpu.monotonic, gpu.sleep
    b._deadline = 60.0
    b._pg_store = Store()
    return b


def timed_group(n: int, size_bytes: int, samples: int = 5):
    tl = Timeline(n, cost=lambda numel: kernel_s(4 if numel == 1 else size_bytes, n),
                  launch=LAUNCH, lag=lag, clock_ratio=[1.0 - 0.01 * (r % 3) for r in range(n)])

    def rank(r):
        gpu = tl.ranks[r]
        b = rank_backend(gpu, n, samples)
        return b._time_all_reduce(gpu.pg(n), group_key(1, "all", list(range(n))), torch.empty(16), n)

    recs = tl.run(rank)
    assert all(r["wrong"] == 0 for r in recs)
    return group_time(recs), recs  # the group's time, as _combine takes it


@pytest.mark.parametrize("n", [2, 8, 16])
@pytest.mark.parametrize("size", [MIB, 64 * MIB, 1024 * MIB], ids=["1MiB", "64MiB", "1GiB"])
def test_the_group_s_time_is_the_kernel_s_whatever_each_rank_s_cpu_lag(n, size):
    t, recs = timed_group(n, size)
    assert t == pytest.approx(kernel_s(size, n), rel=0.02), (t, kernel_s(size, n))
    assert not any(r.get("samples_left_out") for r in recs)  # the 1 ms hold covered every launch


def test_a_hold_too_short_for_the_host_is_doubled_and_its_samples_left_out():
    """A host whose launch outlasts the hold: the sample holds launch time, so it is left out of
    the median and the next hold is twice as long."""
    tl = Timeline(2, cost=lambda numel: kernel_s(4 if numel == 1 else 64 * MIB, 2),
                  launch={"sleep": 4e-6, "record": 2e-6, "allreduce": 1.5e-3}, lag=lag)

    def rank(r):
        gpu = tl.ranks[r]
        b = rank_backend(gpu, 2, 5)
        out = b._time_all_reduce(gpu.pg(2), group_key(1, "all", [0, 1]), torch.empty(16), 2)
        return out, b._hold_s, gpu.sleeps

    runs = tl.run(rank)
    (out, hold, sleeps), _ = runs
    assert out["time_s"] == pytest.approx(kernel_s(64 * MIB, 2), rel=0.02)
    # a 1.5 ms launch outlasts the first 1 ms hold: at least one doubling. Whether the 2 ms hold
    # is outlasted too depends on the lag of the wake-up each rank's thread happens to be at,
    # which the threads' order decides (the test asserted a second doubling, and failed at times)
    assert out["samples_left_out"] >= 1 and hold >= 2 * HOLD_S and sleeps[0] < sleeps[-1]
    assert group_time([o for o, _, _ in runs]) == pytest.approx(kernel_s(64 * MIB, 2), rel=0.02)


def test_a_sample_late_on_one_member_is_left_out_on_every_member():
    """Rank 1's hold ended before its launch in sample 0: rank 0's sample 0 looked clean but
    its kernel waited for rank 1's launch too. The group takes, per sample, its slowest member,
    over the samples no member found late."""
    a = {"time_s": 1e-3, "samples_s": [5e-3, 1e-3, 1e-3], "wrong": 0}
    b = {"time_s": 1e-3, "samples_s": [5e-3, 1e-3, 1.1e-3], "late_samples": [0], "wrong": 0}
    assert group_time([a, b]) == pytest.approx(1.05e-3)
    assert group_time([a, dict(b, late_samples=[0, 1, 2])]) is None
    assert group_time([{"time_s": 2e-3}, {"time_s": 1e-3}]) == 2e-3  # records of old: medians


def test_no_clean_sample_means_no_figure():
    """Every sample late (a host slower than the longest hold): the rank records why, and the
    group gives no figure to judge (a slow figure here would call a healthy node slow)."""
    tl = Timeline(2, cost=lambda numel: kernel_s(4 if numel == 1 else MIB, 2),
                  launch={"sleep": 0.0, "record": 0.0, "allreduce": 0.2}, lag=lag)

    def rank(r):
        gpu = tl.ranks[r]
        return rank_backend(gpu, 2, 2)._time_all_reduce(gpu.pg(2), "k", torch.empty(16), 2)

    recs = tl.run(rank)
    assert all("time_s" not in r and "host launch time" in r["launch_in_interval"] for r in recs)
    b = rank_backend(tl.ranks[0], 2, 2)
    b.node_ranks, b.size_bytes = [[0], [1]], MIB
    res = b._combine((0, 1), [0, 1], [dict(r, rank=k, node=f"n{k}") for k, r in enumerate(recs)])
    assert res.busbw_gbps is None and res.na.startswith("not timed: rank 0 (n0): in all 2 sample(s)")
