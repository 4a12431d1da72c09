"""Issues 16 and 33: `gputopo cluster --fabric cuda` on real ranks, without a GPU.

- Timing: ProcessGroupNCCL runs the all_reduce on its own stream; ``work.wait()`` (blocking wait
  off) only makes the current stream wait for it, and the end event recorded next is behind the
  collective. A fake GPU models the two streams' clocks and the CPU's (a fake clock), so an end
  event recorded before ``wait()`` reads ~0, and one recorded after a blocking wait (the CPU
  polling in 1 ms sleeps, ``TORCH_NCCL_BLOCKING_WAIT=1``) reads whole milliseconds.
- Bounded waits: the CPU polls ``query()`` against the round's deadline, the group's failure key
  and the stop flag; on any of them the group is aborted (``ProcessGroupNCCL.abort``) and the
  rank records why, never an error of its own.
- Device choice: a Slurm task bound to one GPU sees ``device_count() == 1``; the rank must drive
  that GPU, whatever its local rank; two ranks of a node on one GPU is a launch error.
"""

from __future__ import annotations

import contextlib
import math
import threading
from types import SimpleNamespace

import pytest
import torch

from gputopo.cluster import dist_backend
from gputopo.cluster.dist_backend import DistBackend, group_key, set_rank_env
from gputopo.cluster.launch import LaunchEnv
from gputopo.cluster.rank_device import choose_device, shared_gpus
from gputopo.errors import NoHardwareError

KERNEL_S = 0.0003  # the fake all_reduce kernel on NCCL's stream: 64 MiB on 8 x H100, about


class Clock:
    """The CPU's clock: time passes only when the code sleeps (or a test says so)."""

    def __init__(self):
        self.t = 0.0
        self.sleeps = 0

    def monotonic(self) -> float:
        return self.t

    def sleep(self, dt: float) -> None:
        self.sleeps += 1
        self.t += dt


class FakeGpu:
    """Two streams' clocks (seconds: the current stream's and NCCL's), on the CPU's timeline: a
    stream cannot run work before the CPU enqueued it, and an event is complete once the CPU's
    clock has reached the moment its stream passed it."""

    def __init__(self, clock: Clock, kernel_s: float = KERNEL_S):
        self.clock, self.kernel_s = clock, kernel_s
        self.current = 0.0
        self.nccl = 0.0
        self.calls = []
        self.queries = 0
        self.aborted = 0
        self.entered = []  # (what, value, thread name) of each device/stream context entered
        self.connected = []  # the devices eager_connect_single_device was given

    def torch(self):
        gpu = self

        class Event:
            def __init__(self, enable_timing=False):
                self.at = None

            def record(self, stream=None):
                gpu.calls.append("record")
                gpu.current = max(gpu.current, gpu.clock.t)
                self.at = gpu.current

            def query(self):
                gpu.queries += 1
                return self.at <= gpu.clock.t

            def elapsed_time(self, other):  # ms, as CUDA
                return (other.at - self.at) * 1e3

        @contextlib.contextmanager
        def device(d):  # torch.cuda.device: CUDA's current device is per thread
            gpu.entered.append(("device", d, threading.current_thread().name))
            yield

        @contextlib.contextmanager
        def stream(s):  # torch.cuda.stream: torch's current stream is per thread
            gpu.entered.append(("stream", s, threading.current_thread().name))
            yield

        def spin(cycles):  # torch.cuda._sleep: cycles of a 1 GHz clock on the current stream
            gpu.calls.append("sleep")
            gpu.current = max(gpu.current, gpu.clock.t) + cycles / 1e9

        return SimpleNamespace(empty=lambda n, dtype, device: torch.empty(n, dtype=dtype),
                               float32=torch.float32,
                               cuda=SimpleNamespace(Event=Event, device=device, stream=stream,
                                                    current_stream=lambda d: f"stream of {d}",
                                                    _sleep=spin, get_device_properties=lambda d:
                                                    SimpleNamespace(clock_rate=1_000_000)))

    def pg(self, n):
        gpu = self

        class Work:
            def __init__(self, done_at):
                self.done_at = done_at

            def wait(self):
                gpu.calls.append("wait")
                if dist_backend.os.environ.get("TORCH_NCCL_BLOCKING_WAIT") == "1":
                    # ProcessGroupNCCL: the CPU polls the work in 1 ms sleeps (kSynchronizeBusyWaitMillis)
                    while gpu.clock.t < self.done_at and gpu.clock.t < 3600:
                        gpu.clock.sleep(0.001)
                # WorkNCCL::synchronizeStream: the current stream waits for NCCL's end
                gpu.current = max(gpu.current, self.done_at)

        class Pg:
            def allreduce(self, tensors):
                gpu.calls.append(f"allreduce {tensors[0].numel()}")
                # NCCL's stream waits for the current stream, then runs the kernel
                gpu.nccl = max(gpu.nccl, gpu.current, gpu.clock.t) + gpu.kernel_s
                if math.isfinite(gpu.nccl):
                    tensors[0].fill_(float(n))
                return Work(gpu.nccl)

            def eager_connect_single_device(self, device):  # Backend's: (device) -> None
                gpu.connected.append(device)

            def abort(self):
                gpu.aborted += 1

        return Pg()


class FakeStore:
    """The launcher's store as the group's members use it (set, get, check, add, wait)."""

    def __init__(self, clock: Clock):
        self.clock, self.data, self.later = clock, {}, []

    def set(self, k, v):
        self.data[k] = v.encode() if isinstance(v, str) else v

    def get(self, k):
        return self.data[k]

    def check(self, keys):
        self.clock.t += 1e-4  # a round trip
        for at, k, v in list(self.later):  # another member's write, when its time comes
            if self.clock.t >= at:
                self.set(k, v)
                self.later.remove((at, k, v))
        return all(k in self.data for k in keys)

    def add(self, k, n):
        self.data[k] = str(int(self.data.get(k, b"0")) + n).encode()
        return int(self.data[k])

    def wait(self, keys, timeout):
        if not self.check(keys):
            self.clock.t += timeout.total_seconds()
            raise RuntimeError("wait timeout after ... (DistStoreError)")


def backend(clock: Clock, gpu: FakeGpu, *, timeout_s: float = 30.0, samples: int = 3) -> DistBackend:
    b = DistBackend.__new__(DistBackend)
    b._init_state()
    b.torch, b.dist, b.fabric = gpu.torch(), SimpleNamespace(), "cuda"
    b.size_bytes, b.samples, b.device = 1024, samples, torch.device("cuda", 2)
    b.rank, b.world, b.timeout_s = 0, 2, timeout_s
    b.env = LaunchEnv("slurm", 0, 2, 0, 1, "h", 1, "n0")
    b._clock, b._sleep = clock.monotonic, clock.sleep
    b._deadline = clock.t + timeout_s
    b._pg_store = FakeStore(clock)
    return b


def test_cluster_all_reduce_time_is_the_kernel_not_whole_milliseconds(monkeypatch):
    """A user's TORCH_NCCL_BLOCKING_WAIT=1 is overridden (run.json says so); the time is the
    kernel's 0.3 ms, not the 1 ms the CPU's poll rounded it up to."""
    monkeypatch.setenv("TORCH_NCCL_BLOCKING_WAIT", "1")
    monkeypatch.setenv("NCCL_ASYNC_ERROR_HANDLING", "1")  # the old spelling torch still reads
    # set, then deleted: so monkeypatch restores it (unset) after set_rank_env wrote it; a bare
    # delenv of an unset variable records nothing, and its "0" leaked into later tests
    for name in ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_NAN_CHECK", "TORCH_NCCL_ENABLE_TIMING",
                 "CUDA_LAUNCH_BLOCKING", "NCCL_BLOCKING_WAIT", "NCCL_ENABLE_TIMING"):
        monkeypatch.setenv(name, "unset-below")
        monkeypatch.delenv(name)
    done = set_rank_env("cuda")
    assert dist_backend.os.environ["TORCH_NCCL_BLOCKING_WAIT"] == "0"
    assert dist_backend.os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "0"
    assert "NCCL_ASYNC_ERROR_HANDLING" not in dist_backend.os.environ  # the legacy name: removed
    assert done["TORCH_NCCL_BLOCKING_WAIT"]["user_value"] == "1"
    assert done["TORCH_NCCL_ASYNC_ERROR_HANDLING"]["user_value"] is None
    assert done["NCCL_ASYNC_ERROR_HANDLING"] == {"value": None, "user_value": "1", "why": done[
        "NCCL_ASYNC_ERROR_HANDLING"]["why"]} and "NCCL_BLOCKING_WAIT" not in done
    clock = Clock()
    gpu = FakeGpu(clock)
    out = backend(clock, gpu)._time_all_reduce(gpu.pg(2), "k", torch.empty(256), 2)
    assert out["wrong"] == 0
    assert out["time_s"] == pytest.approx(KERNEL_S, rel=1e-9)  # the end event waits for NCCL's stream
    # the hold, the gate (1 element) waited for on the stream, the start; then the timed one
    assert gpu.calls[:9] == ["sleep", "allreduce 1", "wait", "record", "allreduce 256", "wait", "record",
                             "sleep", "allreduce 1"]


def test_with_blocking_wait_no_sample_is_timed(monkeypatch):
    """The fake models the defect the override removes: with blocking wait the host waits for
    the gate before it enqueues the all_reduce, so the GPU passed the start event first in every
    sample: the rank gives no time (it used to read the CPU's 1 ms poll)."""
    monkeypatch.setenv("TORCH_NCCL_BLOCKING_WAIT", "1")
    clock = Clock()
    gpu = FakeGpu(clock)
    out = backend(clock, gpu)._time_all_reduce(gpu.pg(2), "k", torch.empty(256), 2)
    assert "time_s" not in out and "host launch time" in out["launch_in_interval"]


def test_the_cpu_fabric_sets_nothing(monkeypatch):
    monkeypatch.setenv("TORCH_NCCL_BLOCKING_WAIT", "1")
    assert set_rank_env("cpu") == {} and dist_backend.os.environ["TORCH_NCCL_BLOCKING_WAIT"] == "1"


def _measure(b, gpu):
    rec = {}
    b._make_group = lambda key, ranks: gpu.pg(2)
    b._measure(group_key(1, "all", [0, 1]), [0, 1], rec)
    return rec


def test_a_collective_that_never_finishes_is_aborted_at_the_round_s_deadline(monkeypatch):
    """A peer lost inside the all_reduce: the CPU polls the end event until --timeout after the
    round started, aborts the group (its kernels stop spinning on this GPU) and records a
    timeout, not an error of this rank."""
    monkeypatch.setenv("TORCH_NCCL_BLOCKING_WAIT", "0")
    clock = Clock()
    gpu = FakeGpu(clock, kernel_s=math.inf)
    b = backend(clock, gpu, timeout_s=30.0)
    b._pg_store.set(group_key(1, "all", [0, 1]) + "/gate", "ready")
    rec = _measure(b, gpu)
    assert "error" not in rec and "did not finish within --timeout 30 s" in rec["timed_out"], rec
    assert gpu.aborted == 1
    assert 30.0 <= clock.t < 30.5  # bounded by the deadline, not by torch's own timeout


def test_a_member_s_failure_ends_the_wait_at_once(monkeypatch):
    """A member says it failed (its buffer did not fit) while this rank waits in the all_reduce:
    within FAIL_CHECK_S this rank aborts the group and records whose failure it waited on."""
    monkeypatch.setenv("TORCH_NCCL_BLOCKING_WAIT", "0")
    clock = Clock()
    gpu = FakeGpu(clock, kernel_s=math.inf)
    b = backend(clock, gpu, timeout_s=120.0)
    key = group_key(1, "all", [0, 1])
    b._pg_store.set(key + "/gate", "ready")
    b._pg_store.later.append((2.0, key + "/failed", "rank 1 (n1): RuntimeError: CUDA out of memory"))
    rec = _measure(b, gpu)
    assert rec.get("peer_failed") == "rank 1 (n1): RuntimeError: CUDA out of memory" and "error" not in rec
    assert gpu.aborted == 1 and clock.t < 2.0 + dist_backend.FAIL_CHECK_S + 0.1


def test_a_member_that_failed_before_the_gate_is_known_without_waiting():
    clock = Clock()
    gpu = FakeGpu(clock)
    b = backend(clock, gpu)
    key = group_key(1, "all", [0, 1])
    b._pg_store.set(key + "/failed", "rank 1 (n1): RuntimeError: can't allocate memory")
    b._pg_store.set(key + "/gate", "failed")
    rec = _measure(b, gpu)
    assert "can't allocate memory" in rec["peer_failed"] and gpu.calls == [] and clock.t < 0.01


def test_a_stop_signal_ends_the_wait_and_tells_the_group(monkeypatch):
    monkeypatch.setenv("TORCH_NCCL_BLOCKING_WAIT", "0")
    clock = Clock()
    gpu = FakeGpu(clock, kernel_s=math.inf)
    b = backend(clock, gpu)
    key = group_key(1, "all", [0, 1])
    b._pg_store.set(key + "/gate", "ready")
    orig = clock.sleep

    def sleep(dt):  # SIGTERM arrives 1 s into the wait
        orig(dt)
        if clock.t > 1.0:
            b.stop_signal = "SIGTERM"

    b._sleep = sleep
    rec = _measure(b, gpu)
    assert "stopped by SIGTERM" in rec["stopped"] and gpu.aborted == 1 and clock.t < 1.1
    assert b"stopped by SIGTERM" in b._pg_store.get(key + "/failed")


def test_a_buffer_that_does_not_fit_is_this_rank_s_error_and_its_peers_are_told():
    clock = Clock()
    gpu = FakeGpu(clock)
    b = backend(clock, gpu)

    def no_memory():
        raise RuntimeError("CUDA out of memory. Tried to allocate 1.00 GiB")

    b._buffer = no_memory
    rec = _measure(b, gpu)
    key = group_key(1, "all", [0, 1])
    assert rec["error"].startswith("RuntimeError: CUDA out of memory") and "peer_failed" not in rec
    assert b._pg_store.get(key + "/gate") == b"failed"
    assert b"rank 0 (n0): RuntimeError: CUDA out of memory" in b._pg_store.get(key + "/failed")


class Hang:
    """A torch call that never returns (until the test ends: released then, so no thread stays)."""

    def __init__(self):
        self.release, self.entered = threading.Event(), threading.Event()

    def __call__(self, *args, **kwargs):
        self.entered.set()
        self.release.wait(60)
        raise RuntimeError("released at the end of the test")


def _measure_with_a_call_that_never_returns(monkeypatch, method: str):
    """One group's measurement (``--timeout 5``) whose process group's ``method`` never returns
    until the measurement is over: (what it recorded, the fake GPU, the clock, the hang)."""
    monkeypatch.setenv("TORCH_NCCL_BLOCKING_WAIT", "0")
    clock = Clock()
    gpu = FakeGpu(clock)
    b = backend(clock, gpu, timeout_s=5.0)
    key = group_key(1, "all", [0, 1])
    b._pg_store.set(key + "/gate", "ready")
    pg, hang = gpu.pg(2), Hang()
    setattr(pg, method, hang)
    b._make_group = lambda key, ranks: pg
    rec: dict = {}
    try:
        b._measure(key, [0, 1], rec)
    finally:
        hang.release.set()
    return rec, gpu, clock, hang


def test_an_nccl_communicator_set_up_that_never_returns_ends_at_the_round_s_deadline(monkeypatch):
    """Issue: NCCL made a group's communicator lazily inside its first all_reduce, on the main
    thread; a set-up that never returned (an IB fabric that never answers, a bootstrap to an
    unreachable interface) held the rank, rank 0 among the members held the whole job, and
    nothing was written. Now the communicator is made eagerly (``eager_connect_single_device``,
    the rank's own device), in a thread the rank polls against the round's deadline: at the
    deadline the group is aborted and the rank records that its set-up did not return, its
    own fact (not an error raised, not a peer's failure), and no all_reduce was issued."""
    rec, gpu, clock, hang = _measure_with_a_call_that_never_returns(monkeypatch, "eager_connect_single_device")
    assert hang.entered.is_set() and set(rec) == {"setup_timed_out"}, rec
    assert rec["setup_timed_out"] == "the NCCL communicator set-up did not return within --timeout 5 s"
    assert gpu.aborted == 1 and not [c for c in gpu.calls if c.startswith("allreduce")]
    assert 5.0 <= clock.t < 5.5  # the round's deadline, not torch's (2 x --timeout + 10 s) or never


def test_the_communicator_is_made_for_the_rank_s_device_on_its_stream():
    """The set-up thread enters the rank's device and the main thread's current stream (both are
    per thread in CUDA and torch) before it connects, so the first all_reduce's NCCL stream
    waits for the stream the buffers were filled on."""
    clock = Clock()
    gpu = FakeGpu(clock)
    b = backend(clock, gpu)
    b._pg_store.set(group_key(1, "all", [0, 1]) + "/gate", "ready")
    rec = _measure(b, gpu)
    assert "time_s" in rec and gpu.connected == [torch.device("cuda", 2)]
    setup = [e for e in gpu.entered if e[2] == "gputopo-setup"]
    assert setup[:2] == [("device", torch.device("cuda", 2), "gputopo-setup"),
                         ("stream", "stream of cuda:2", "gputopo-setup")]
    # connect, then the warm-up's two calls in the set-up thread; the timed samples' on this one
    assert len(setup) == 3 * 2


def test_a_first_all_reduce_whose_host_call_never_returns_is_bounded_too(monkeypatch):
    """NCCL connects a communicator's transports on its first collective of each kind, inside
    the host call (``ncclAllReduce``); that call never returning is bounded the same way."""
    rec, gpu, clock, hang = _measure_with_a_call_that_never_returns(monkeypatch, "allreduce")
    assert rec == {"setup_timed_out": "the group's first all_reduce (1 element) did not return within "
                                      "--timeout 5 s"}, rec
    assert gpu.aborted == 1 and 5.0 <= clock.t < 5.5


def test_a_set_up_that_raises_is_the_rank_s_own_error_and_its_peers_are_told():
    """An NCCL error in the communicator's set-up (an unusable NIC) comes back from the thread
    as this rank's error, and its peers are told at once (they stop waiting for it)."""
    clock = Clock()
    gpu = FakeGpu(clock)
    b = backend(clock, gpu)
    key = group_key(1, "all", [0, 1])
    b._pg_store.set(key + "/gate", "ready")
    pg = gpu.pg(2)

    def nccl_error(device):
        raise RuntimeError("NCCL error in: ProcessGroupNCCL.cpp:1, unhandled system error")

    pg.eager_connect_single_device = nccl_error
    b._make_group = lambda key, ranks: pg
    rec = {}
    b._measure(key, [0, 1], rec)
    assert rec["error"].startswith("RuntimeError: NCCL error in") and "setup_timed_out" not in rec
    assert b"rank 0 (n0): RuntimeError: NCCL error" in b._pg_store.get(key + "/failed")


def test_a_group_s_key_depends_on_its_round_kind_and_ranks_only():
    """Every member names a group alike whatever it made or failed to make before (torch's name
    for a locally synchronised group counted the groups the process already had)."""
    k = group_key(3, "all", [0, 1, 2, 3])
    assert k == group_key(3, "all", [0, 1, 2, 3]) and k.startswith("gputopo/pg/3/all/4-")
    assert len({k, group_key(4, "all", [0, 1, 2, 3]), group_key(3, "one-gpu", [0, 1, 2, 3]),
                group_key(3, "all", [0, 1, 2, 4])}) == 4
    assert len(group_key(1, "all", list(range(8192)))) < 64


def fake_cuda(bus_ids):
    """torch.cuda as a task sees it: the GPUs CUDA_VISIBLE_DEVICES leaves, numbered from 0."""
    def props(i):
        dom, bus, dev = (int(x, 16) for x in bus_ids[i].replace(".", ":").split(":")[:3])
        return SimpleNamespace(pci_domain_id=dom, pci_bus_id=bus, pci_device_id=dev)

    return SimpleNamespace(is_available=lambda: bool(bus_ids), device_count=lambda: len(bus_ids),
                           get_device_properties=props)


NODE = ["0000:1b:00.0", "0000:43:00.0", "0000:52:00.0", "0000:61:00.0"]


def test_torchrun_rank_drives_the_gpu_of_its_local_rank():
    assert choose_device(fake_cuda(NODE), 2, 4) == (2, "0000:52:00.0")


def test_slurm_task_bound_to_one_gpu_drives_the_one_it_sees():
    # srun --gpus-per-task=1: local rank 3 sees only its own GPU, as device 0
    assert choose_device(fake_cuda(["0000:61:00.0"]), 3, 4) == (0, "0000:61:00.0")
    # --gpus-per-task=2: the task's first GPU
    assert choose_device(fake_cuda(NODE[2:]), 1, 2 + 2) == (0, "0000:52:00.0")


def test_a_task_that_sees_no_gpu_is_no_hardware():
    with pytest.raises(NoHardwareError, match="rank 3"):
        choose_device(fake_cuda([]), 3, 4, "rank 3 (node-a)")


def test_two_ranks_of_a_node_on_one_gpu_are_named():
    recs = [{"rank": 0, "node": "a", "gpu_bus_id": NODE[0]},
            {"rank": 1, "node": "a", "gpu_bus_id": NODE[0]},
            {"rank": 2, "node": "b", "gpu_bus_id": NODE[0]},
            {"rank": 3, "node": "b", "gpu_bus_id": NODE[1]}]
    assert shared_gpus(recs) == ["ranks 0, 1 on a all drive GPU 0000:1b:00.0"]
    assert shared_gpus(recs[2:]) == []
    assert shared_gpus([{"rank": 0, "node": "a", "gpu_bus_id": None}] * 2) == []  # cpu fabric


def test_a_message_is_checked_against_the_rank_s_free_memory():
    from gputopo.cluster.rank_device import GLOO_BUFFERS, message_fit_error

    gib = 1 << 30
    assert message_fit_error(8 * gib, "cuda", 10 * gib, 8) is None  # one GPU each: ranks do not add up
    why = message_fit_error(16 * gib, "cuda", 10 * gib, 1)
    assert why and "GPU" in why and "10.0 GiB free" in why
    # cpu: the node's ranks share its memory, each with the tensor and gloo's scratch
    assert message_fit_error(gib, "cpu", GLOO_BUFFERS * 4 * gib, 4) is None
    why = message_fit_error(gib, "cpu", GLOO_BUFFERS * 4 * gib - 1, 4)
    assert why and "4 rank(s)" in why and "host memory" in why
    assert message_fit_error(1 << 50, "cpu", None, 1) is None  # unknown: not refused on a guess


def test_free_memory_of_a_cuda_rank_is_the_device_s_free_bytes():
    from gputopo.cluster.rank_device import free_bytes

    seen = []
    cuda = SimpleNamespace(mem_get_info=lambda i: seen.append(i) or (5 << 30, 80 << 30))
    assert free_bytes(SimpleNamespace(cuda=cuda), "cuda", 3) == 5 << 30 and seen == [3]
    broken = SimpleNamespace(mem_get_info=lambda i: (_ for _ in ()).throw(RuntimeError("no")))
    assert free_bytes(SimpleNamespace(cuda=broken), "cuda", 0) is None


def test_a_cuda_rank_runs_with_the_bench_workers_timing_environment(monkeypatch):
    """Issue 43, item 3: a user's CUDA_LAUNCH_BLOCKING=1 (a common debugging setting) made the
    timed pg.allreduce block the main thread until the collective ended, so a lost peer held a
    healthy rank outside every bounded poll; TORCH_NCCL_NAN_CHECK and TORCH_NCCL_ENABLE_TIMING
    put kernels and events inside the interval. Every cuda rank now sets the bench workers'
    variables, before its CUDA context exists (before it picks its GPU), recorded as the bench
    records them."""
    from gputopo.bench.worker_env import TIMING_ENV, worker_env

    for name in ("CUDA_LAUNCH_BLOCKING", "TORCH_NCCL_NAN_CHECK", "TORCH_NCCL_ENABLE_TIMING",
                 "TORCH_NCCL_BLOCKING_WAIT", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ENABLE_TIMING"):
        monkeypatch.setenv(name, "1")
    monkeypatch.setenv("TORCH_CPP_LOG_LEVEL", "FATAL")
    seen = {}

    class Stop(Exception):
        pass

    def choose(cuda, local_rank, local_world, who):  # the rank's first touch of CUDA
        seen.update({k: dist_backend.os.environ.get(k) for k in TIMING_ENV})
        raise Stop()

    monkeypatch.setattr(dist_backend, "choose_device", choose)
    monkeypatch.setattr(LaunchEnv, "export", lambda self: None)
    with pytest.raises(Stop):
        DistBackend(LaunchEnv("slurm", 0, 2, 0, 1, "h", 1, "n0"), "cuda", size_bytes=4, samples=1,
                    timeout_s=5.0)
    assert seen == {k: "0" for k in TIMING_ENV}
    assert "NCCL_ENABLE_TIMING" not in dist_backend.os.environ
    done = set_rank_env("cuda", {"CUDA_LAUNCH_BLOCKING": "1"})
    _, bench = worker_env({"CUDA_LAUNCH_BLOCKING": "1"})
    assert {k: done[k] for k in bench} == bench  # the bench's record, entry for entry
    assert done["TORCH_NCCL_ASYNC_ERROR_HANDLING"]["value"] == "0"
    from gputopo.bench.worker_env import override_line

    # rank 0 says so on stderr, as the bench does (cluster/job.py)
    assert override_line(done, "the cluster's cuda ranks", "env_set") == (
        "gputopo: the cluster's cuda ranks run with CUDA_LAUNCH_BLOCKING=0 (this shell: 1): those "
        "change what is timed (why: run.json env_set)")
