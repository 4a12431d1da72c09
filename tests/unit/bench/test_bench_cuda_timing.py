"""Issue 8, defect 3: CUDA-event timing holds the stream until every run is enqueued, so small
copies time the link, not Python's dispatch. torch.cuda is faked here (no GPU): the fake GPU
records the order in which the host enqueues work, as a stream would execute it."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch

from gputopo.bench.fabrics.cuda import CudaOps


class FakeGpu:
    def __init__(self, hold_expires_early=False):
        self.log = []
        self.hold_expires_early = hold_expires_early

    def install(self, mp):
        gpu = self

        class Event:
            def __init__(self, enable_timing=False):
                self.name = "start" if enable_timing and not any(
                    e == "event start" for e in gpu.log[-3:]) else "event"

            def record(self, stream=None):
                gpu.log.append(f"record {self.name}")

            def query(self):
                return gpu.hold_expires_early

            def synchronize(self):
                gpu.log.append("synchronize")

            def elapsed_time(self, other):
                return 4.0  # ms

        stream = SimpleNamespace(wait_event=lambda e: gpu.log.append("wait"),
                                 wait_stream=lambda s: None, device=torch.device("cuda", 0))
        mp.setattr(torch.cuda, "Event", Event)
        mp.setattr(torch.cuda, "current_stream", lambda d=None: stream)
        mp.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
        mp.setattr(torch.cuda, "synchronize", lambda d=None: None)
        mp.setattr(torch.cuda, "_sleep", lambda cycles: gpu.log.append(f"sleep {cycles}"))
        mp.setattr(torch.cuda, "get_device_properties",
                   lambda d: SimpleNamespace(clock_rate=1_000_000))  # kHz: 1 GHz
        return self


def ops():
    return CudaOps([0, 1], [0, 1], 1, {0: 0, 1: 1})


def test_stream_is_held_before_start_and_runs_are_enqueued_inside(monkeypatch):
    gpu = FakeGpu().install(monkeypatch)
    o = ops()
    t = o.timed(lambda: gpu.log.append("run"), [0, 1], repeat=3, seed=0, sample=0)
    assert t == pytest.approx(4.0 / 1e3 / 3)
    first_sleep = next(k for k, e in enumerate(gpu.log) if e.startswith("sleep"))
    first_record = next(k for k, e in enumerate(gpu.log) if e.startswith("record"))
    assert first_sleep < first_record  # the hold comes before the start event
    assert gpu.log[first_sleep] == "sleep 2000000"  # 2 ms at 1 GHz
    assert gpu.log.count("run") == 3
    facts = o.timing_facts()
    assert "spin kernel" in facts["timing_method"] and "p2pBandwidthLatencyTest" in facts["timing_method"]
    assert "hold_too_short_samples" not in facts


def sample(o, s):
    """One sample as gputopo.bench.spec.take_sample takes it: timed, then combined over ranks."""
    t = o.timed(lambda: None, [0, 1], repeat=1, seed=0, sample=s)
    return o.combine(t, 0, None)


def test_a_hold_that_ends_early_is_recorded_and_doubled(monkeypatch):
    gpu = FakeGpu(hold_expires_early=True).install(monkeypatch)
    o = ops()
    for s in range(2):
        sample(o, s)
    sleeps = [e for e in gpu.log if e.startswith("sleep")]
    assert sleeps == ["sleep 2000000", "sleep 4000000"]
    facts = o.timing_facts()
    assert facts["hold_too_short_samples"] == 2 and "include host launch time" in facts["timing_method"]
    assert facts["hold_too_short_gpus"] == [0]
    assert "hold_too_short_samples" not in o.timing_facts()  # counted per measurement


MIB = 1 << 20


def nvlink_all_reduce_s(size_bytes: int) -> float:
    """The modelled 2-GPU all_reduce: 6 us of latency plus the bytes at 370 GB/s busbw."""
    return 6e-6 + size_bytes / 370e9

def _two_gpu_rank(tl, r):
    """Rank ``r``'s CudaOps of a two-GPU step on the fake timeline ``tl``, and its dist."""
    o = CudaOps([r], [0, 1], 2, {r: 0})
    dist = tl.me().dist()
    o._dist = lambda: dist
    o._sync_device = lambda: torch.device("cpu")
    return o, dist


def two_ranks_timed(monkeypatch, size_bytes: int, clock_ratio, samples: int = 4):
    """A collective step on two GPUs, one rank (process) each, as the fabric times it: each
    sample timed, then combined over the ranks (gputopo.bench.spec.take_sample)."""
    from tests.helpers.gpu_timeline import Timeline, install_cuda

    tl = Timeline(2, cost=lambda numel: nvlink_all_reduce_s(4 if numel == 1 else size_bytes),
                  launch={"sleep": 4e-6, "record": 2e-6, "allreduce": 15e-6},
                  lag=lambda r, k: (r * 3 + k) % 4 * 50e-6, clock_ratio=clock_ratio)
    install_cuda(monkeypatch, tl)

    def rank(r):
        o, dist = _two_gpu_rank(tl, r)
        o._hold_s = 0.016  # a hold already doubled three times
        buf = torch.ones(8)
        out = []
        for s in range(samples):
            t = o.timed(lambda: dist.all_reduce(buf), [0, 1], repeat=1, seed=0, sample=s)
            out.append(o.combine(t, 0, None)[0])
        return out, o.timing_facts()

    return tl.run(rank)


@pytest.mark.parametrize("size", [MIB, 64 * MIB], ids=["1MiB", "64MiB"])
def test_two_gpus_at_different_clocks_time_the_collective_not_their_holds(monkeypatch, size):
    """Issue 43, item 2: two GPUs whose SMs run 1 % apart end a 16 ms hold (counted in each
    GPU's own clock) 160 us apart; with the start right after the hold the earlier rank's
    interval held that wait, and the sample is the slowest rank's. Now the ranks leave the hold
    through a 1-element all_reduce on the stream: the start is the same GPU moment on both."""
    (times0, facts), (times1, _) = two_ranks_timed(monkeypatch, size, [1.0, 0.99])
    assert times0 == times1
    for t in times0:
        assert t == pytest.approx(nvlink_all_reduce_s(size), rel=0.02)
    assert "hold_too_short_samples" not in facts and "1-element all_reduce" in facts["timing_method"]


def test_the_hold_is_one_length_on_every_rank_as_doubled_together(monkeypatch):
    """Every rank's note of a late sample reaches every rank (combine), so all double alike."""
    from tests.helpers.gpu_timeline import Timeline, install_cuda

    tl = Timeline(2, cost=lambda numel: 1e-5, launch={"allreduce": 1.5e-3}, lag=lambda r, k: 0.0)
    install_cuda(monkeypatch, tl)

    def rank(r):
        o, dist = _two_gpu_rank(tl, r)
        buf = torch.ones(8)
        for s in range(2):
            o.combine(o.timed(lambda: dist.all_reduce(buf), [0, 1], repeat=1, seed=0, sample=s), 0, None)
        return tl.me().sleeps, o.timing_facts()

    (s0, f0), (s1, f1) = tl.run(rank)
    assert s0 == s1 and s0[1] == 2 * s0[0]  # 2 ms, then 4 ms: two 1.5 ms host calls outlasted 2 ms
    assert f0["hold_too_short_samples"] == 1 and f0["hold_too_short_gpus"] == [0, 1]


def test_every_fabric_says_how_it_timed():
    from gputopo.bench.fabrics.cpu import CpuOps
    from gputopo.bench.fabrics.sim import SimOps

    assert CpuOps.timing_method.startswith("wall")
    assert SimOps.timing_method.startswith("modeled")
