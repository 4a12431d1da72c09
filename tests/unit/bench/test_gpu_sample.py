"""Issue 49, item 2: one GPU timing routine for a sample (gputopo.bench.gpu_sample.time_sample),
called by the bench's cuda fabric and the cluster's all_reduce alike. torch.cuda is faked: the
fake records, in order, what the host enqueues and waits for."""

from __future__ import annotations

from types import SimpleNamespace

import pytest


class Recorder:
    def __init__(self, passed_start: bool = False):
        self.log = []
        self.passed_start = passed_start

    def torch(self):
        rec = self

        class Event:
            count = 0

            def __init__(self, enable_timing=False):
                Event.count += 1
                self.name = "start" if Event.count == 1 else "end"
                self.t = None

            def record(self, stream=None):
                rec.log.append(f"record {self.name}")
                self.t = 0.0 if self.name == "start" else 0.003

            def query(self):
                rec.log.append(f"query {self.name}")
                return rec.passed_start if self.name == "start" else True

            def synchronize(self):
                rec.log.append(f"synchronize {self.name}")

            def elapsed_time(self, other):
                return (other.t - self.t) * 1e3  # ms

        cuda = SimpleNamespace(
            Event=Event, _sleep=lambda cycles: rec.log.append(f"sleep {cycles}"),
            get_device_properties=lambda d: SimpleNamespace(clock_rate=1_000_000))
        return SimpleNamespace(cuda=cuda)

    def gate(self):
        self.log.append("gate")
        return SimpleNamespace(wait=lambda: self.log.append("gate wait"))


def test_the_routine_holds_gates_starts_runs_checks_ends_and_waits_in_that_order():
    from gputopo.bench.gpu_sample import time_sample

    r = Recorder()
    got = time_sample(r.torch(), 0, 0.001, r.gate, lambda start: r.log.append("operation") or 7)
    assert r.log == ["sleep 1000000", "gate", "gate wait", "record start", "operation",
                     "query start", "record end", "synchronize end"]
    assert got.seconds == pytest.approx(0.003) and not got.late and got.result == 7


def test_the_caller_s_bounded_wait_replaces_synchronize_and_may_abandon_the_sample():
    from gputopo.bench.gpu_sample import time_sample

    r = Recorder(passed_start=True)
    waited = []
    got = time_sample(r.torch(), 0, 0.001, None, lambda start: None, waited.append)
    assert got.late and len(waited) == 1 and "synchronize end" not in r.log
    assert "gate" not in r.log  # one rank: no gate

    class Abandoned(Exception):
        pass

    def give_up(end):
        raise Abandoned

    with pytest.raises(Abandoned):
        time_sample(Recorder().torch(), 0, 0.001, None, lambda start: None, give_up)


def test_the_bench_and_the_cluster_time_a_sample_with_the_one_routine(monkeypatch):
    """Both call the routine their module imported: replaced there, each sample goes through
    the replacement (the cluster passes its bounded poll, the bench none)."""
    import torch

    import gputopo.bench.fabrics.cuda as cuda
    import gputopo.cluster.dist_backend as dist_backend
    from gputopo.bench import gpu_sample
    from gputopo.bench.gpu_sample import GpuSample

    assert cuda.time_sample is gpu_sample.time_sample is dist_backend.time_sample
    calls = []

    def spy(torch_, device, hold_s, gate, operation, wait_end=None):
        calls.append(wait_end is not None)
        operation(None)
        return GpuSample(0.002, False)

    monkeypatch.setattr(cuda, "time_sample", spy)
    monkeypatch.setattr(dist_backend, "time_sample", spy)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: None)
    o = cuda.CudaOps([0], [0], 1, {0: 0})
    monkeypatch.setattr(o, "device", lambda g: torch.device("cpu"))
    monkeypatch.setattr(torch.cuda, "device", lambda d: __import__("contextlib").nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda d=None: None)
    assert o.timed(lambda: None, [0], repeat=2, seed=0, sample=0) == pytest.approx(0.001)

    from tests.unit.cluster.test_cluster_cuda_timing import rank_backend

    class Pg:
        def allreduce(self, tensors):
            for t in tensors:
                t.mul_(2)
            return SimpleNamespace(wait=lambda: None)

    b = rank_backend(SimpleNamespace(torch=lambda: torch, rank=0, monotonic=lambda: 0.0,
                                     sleep=lambda dt: None), 2, 3)
    b.device = torch.device("cpu")
    b._first_call = dist_backend._call  # no set-up thread (its bound is not this test's)
    out = b._time_all_reduce(Pg(), "k", torch.empty(4), 2)
    assert out["time_s"] == pytest.approx(0.002) and out["wrong"] == 0
    assert calls == [False] + [True] * 4  # the bench's sample, the cluster's warm-up and 3
