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


class OtherRank:
    """torch.distributed as rank 0 of a two-rank step sees it: rank 1 (driving GPU 7) wants
    ``hold_s`` and its hold ends early in the samples listed in ``short_in``."""

    def __init__(self, hold_s, short_in=()):
        self.hold_s, self.short_in, self.sample, self.ops = hold_s, set(short_in), 0, []
        self.ReduceOp = SimpleNamespace(MAX="max", SUM="sum")

    def all_reduce(self, t, op="sum"):
        self.ops.append(op)
        if op == "max":
            t.fill_(max(float(t.item()), self.hold_s))

    def all_gather(self, outs, mine):
        outs[0].copy_(mine)
        outs[1].copy_(torch.tensor([mine[0].item(), 0, -1, 8.0 if self.sample in self.short_in else 0],
                                   dtype=torch.float64))
        self.sample += 1


def two_rank_ops(monkeypatch, other):
    o = CudaOps([3], [3, 7], 2, {3: 0})
    monkeypatch.setattr(o, "_dist", lambda: other)
    monkeypatch.setattr(o, "_sync_device", lambda: torch.device("cpu"))
    return o


def test_ranks_agree_on_one_hold_per_sample(monkeypatch):
    """Rank 1 already holds 8 ms: rank 0 must hold as long, or its NCCL kernel would start
    6 ms early and spin inside its timed interval, waiting for rank 1's."""
    gpu = FakeGpu().install(monkeypatch)
    other = OtherRank(hold_s=0.008)
    o = two_rank_ops(monkeypatch, other)
    sample(o, 0)
    assert [e for e in gpu.log if e.startswith("sleep")] == ["sleep 8000000"]  # 8 ms at 1 GHz
    assert other.ops[0] == "max"  # agreed before the sample, not after


def test_every_ranks_early_release_is_recorded_and_doubles_the_hold(monkeypatch):
    gpu = FakeGpu().install(monkeypatch)  # this rank's own hold never ends early
    other = OtherRank(hold_s=0.002, short_in={0})
    o = two_rank_ops(monkeypatch, other)
    for s in range(2):
        sample(o, s)
    # rank 1 was late in sample 0: both ranks hold twice as long in sample 1
    assert [e for e in gpu.log if e.startswith("sleep")] == ["sleep 2000000", "sleep 4000000"]
    facts = o.timing_facts()
    assert facts["hold_too_short_samples"] == 1 and facts["hold_too_short_gpus"] == [7]


def test_every_fabric_says_how_it_timed():
    from gputopo.bench.fabrics.cpu import CpuOps
    from gputopo.bench.fabrics.sim import SimOps

    assert CpuOps.timing_method.startswith("wall")
    assert SimOps.timing_method.startswith("modeled")
