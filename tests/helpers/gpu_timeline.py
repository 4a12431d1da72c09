"""Several ranks' GPUs and CPUs on one timeline (seconds), for the timing tests of the bench's
and the cluster's collectives without a GPU.

Each rank runs in a thread of its own with a CPU clock of its own (time passes there only by
the host costs below and the code's own sleeps), a current stream and NCCL's stream:

- every enqueue costs the host ``launch[what]`` seconds (``sleep``: the spin kernel,
  ``record``: an event, ``allreduce``: an NCCL collective's host call);
- before its first enqueue, and again before its first enqueue after each time it saw the GPU
  reach an event (a ``query()`` that said done, a ``synchronize()``), a rank's CPU is late by
  ``lag(rank, k)`` seconds, ``k`` counting those wake-ups (Python, the scheduler, another
  process on its cores: a poll that notices the GPU is never followed at once by the next call);
- a stream cannot run work before the host enqueued it; the spin kernel lasts its cycles at the
  SM clock the GPU really runs at (``clock_ratio[rank]`` of the peak clock the device
  properties give);
- an all_reduce on NCCL's stream starts on a rank when that rank's current stream (which NCCL's
  waits for) and NCCL's stream are ready and its host call was made; it ends on every member
  ``cost(numel)`` after the last member started (a 1-element one costs what the test says a
  1-element all_reduce costs); ``Work.wait()`` makes the current stream wait for it;
- an event is complete once the rank's CPU clock has reached the moment its stream passed it.

A stream's time may depend on a collective whose other members have not been enqueued yet: it
is computed when asked for, and the asking thread waits (in real time) for the other ranks'
threads to enqueue theirs.
"""

from __future__ import annotations

import contextlib
import threading
from types import SimpleNamespace
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch

PEAK_KHZ = 1_980_000  # H100 SXM's boost clock, as get_device_properties gives it (kHz)
WAIT_S = 60.0  # real seconds a rank waits for the others to enqueue a collective


class Lazy:
    """A moment (seconds) computed when first asked for."""

    def __init__(self, fn: Callable[[], float]):
        self.fn, self.value = fn, None  # type: ignore[var-annotated]

    def __call__(self) -> float:
        if self.value is None:
            self.value = self.fn()
        return self.value


def at(x) -> float:
    return x() if callable(x) else float(x)


def later(*xs) -> Lazy:
    return Lazy(lambda: max(at(x) for x in xs))


class Collective:
    def __init__(self, n: int, cost: float):
        self.n, self.cost = n, cost
        self.ready: Dict[int, Any] = {}
        self.data: Dict[int, torch.Tensor] = {}
        self.cond = threading.Condition()

    def join(self, rank: int, ready, data: Optional[torch.Tensor] = None) -> None:
        with self.cond:
            self.ready[rank] = ready
            if data is not None:
                self.data[rank] = data.clone()
            self.cond.notify_all()

    def all_joined(self) -> None:
        with self.cond:
            if not self.cond.wait_for(lambda: len(self.ready) == self.n, WAIT_S):
                raise RuntimeError(f"only ranks {sorted(self.ready)} of {self.n} enqueued this collective")

    def end(self) -> float:
        self.all_joined()
        return max(at(r) for r in self.ready.values()) + self.cost


class Timeline:
    def __init__(self, n: int, *, cost: Callable[[int], float], launch: Dict[str, float],
                 lag: Callable[[int, int], float], clock_ratio: Optional[Sequence[float]] = None):
        self.n, self.cost, self.launch, self.lag = n, cost, launch, lag
        self.clock_ratio = list(clock_ratio or [1.0] * n)
        self._colls: Dict[int, Collective] = {}
        self._lock = threading.Lock()
        self.ranks = [RankGpu(self, r) for r in range(n)]
        self._local = threading.local()

    def collective(self, index: int, numel: int) -> Collective:
        with self._lock:
            if index not in self._colls:
                self._colls[index] = Collective(self.n, self.cost(numel))
            return self._colls[index]

    # ---------------------------------------------------------------- running the ranks
    def me(self) -> "RankGpu":
        return self._local.gpu

    def run(self, fn: Callable[[int], Any]) -> List[Any]:
        """``fn(rank)`` in one thread per rank (the thread's rank is :meth:`me`); the results."""
        out: List[Any] = [None] * self.n
        errors: List[BaseException] = []

        def body(r: int) -> None:
            self._local.gpu = self.ranks[r]
            try:
                out[r] = fn(r)
            except BaseException as e:  # noqa: BLE001 - re-raised below
                errors.append(e)

        threads = [threading.Thread(target=body, args=(r,), name=f"rank-{r}") for r in range(self.n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(5 * WAIT_S)
        if errors:
            raise errors[0]
        return out


class Event:
    def __init__(self, gpu: "RankGpu", enable_timing: bool = False):
        self.gpu, self.at = gpu, None

    def record(self, stream=None) -> None:
        self.gpu.host("record")
        self.at = self.gpu.cur = later(self.gpu.cur, self.gpu.cpu)

    def _seen(self) -> None:  # the CPU noticed the GPU: its next call may come late
        self.gpu.lag_due = True

    def query(self) -> bool:
        done = at(self.at) <= self.gpu.cpu
        if done:
            self._seen()
        return done

    def synchronize(self) -> None:
        self.gpu.cpu = max(self.gpu.cpu, at(self.at))
        self._seen()

    def elapsed_time(self, other: "Event") -> float:  # ms, as CUDA
        return (at(other.at) - at(self.at)) * 1e3


class Work:
    def __init__(self, gpu: "RankGpu", end: Lazy):
        self.gpu, self.end = gpu, end

    def wait(self, timeout=None) -> bool:
        self.gpu.cur = later(self.gpu.cur, self.end)  # WorkNCCL::synchronizeStream
        return True


class RankGpu:
    """One rank's CPU clock and streams (also its fake ``time.monotonic`` / ``time.sleep``)."""

    def __init__(self, tl: Timeline, rank: int):
        self.tl, self.rank = tl, rank
        self.cpu = 0.0
        self.cur: Any = 0.0
        self.nccl: Any = 0.0
        self.calls = 0
        self.wakes = 0  # the times its lag struck
        self.lag_due = True
        self.sleeps: List[int] = []  # the spin kernels' cycles

    def monotonic(self) -> float:
        return self.cpu

    def sleep(self, dt: float) -> None:
        self.cpu += dt

    def host(self, what: str) -> None:
        if self.lag_due:
            self.cpu += self.tl.lag(self.rank, self.wakes)
            self.wakes += 1
            self.lag_due = False
        self.cpu += self.tl.launch.get(what, 0.0)

    def spin(self, cycles: int) -> None:
        self.host("sleep")
        self.sleeps.append(int(cycles))
        seconds = cycles / (PEAK_KHZ * 1000.0 * self.tl.clock_ratio[self.rank])
        prev, cpu = self.cur, self.cpu
        self.cur = Lazy(lambda: max(at(prev), cpu) + seconds)

    def allreduce(self, tensor: torch.Tensor, data: Optional[torch.Tensor] = None) -> Work:
        """Enqueue this rank's next collective (``tensor``'s numel picks its cost)."""
        self.host("allreduce")
        c = self.tl.collective(self.calls, tensor.numel())
        self.calls += 1
        ready = later(self.nccl, self.cur, self.cpu)
        c.join(self.rank, ready, data)
        end = Lazy(c.end)
        self.nccl = end
        return Work(self, end)

    def all_gather(self, outs: List[torch.Tensor], mine: torch.Tensor) -> None:
        """A synchronous all_gather whose result the host reads (``.tolist()``): real data."""
        self.host("allreduce")
        c = self.tl.collective(self.calls, 1)
        self.calls += 1
        c.join(self.rank, later(self.nccl, self.cur, self.cpu), mine)
        c.all_joined()
        for r, o in enumerate(outs):
            o.copy_(c.data[r])
        self.cpu = max(self.cpu, c.end())

    def synchronize(self) -> None:
        self.cpu = max(self.cpu, at(self.cur), at(self.nccl))

    # ---------------------------------------------------------------- a torch for the cluster
    def torch(self) -> SimpleNamespace:
        """What ``DistBackend`` uses of torch (``self.torch``), on this rank."""
        gpu = self

        @contextlib.contextmanager
        def nothing(_):
            yield

        cuda = SimpleNamespace(
            Event=lambda enable_timing=False: Event(gpu, enable_timing), _sleep=gpu.spin,
            get_device_properties=lambda d: SimpleNamespace(clock_rate=PEAK_KHZ),
            device=nothing, stream=nothing, current_stream=lambda d=None: "current stream")
        return SimpleNamespace(empty=lambda n, dtype, device: torch.empty(n, dtype=dtype),
                               float32=torch.float32, cuda=cuda)

    def pg(self, n: int) -> Any:
        """ProcessGroupNCCL as a member of an ``n``-rank group sees it."""
        gpu = self

        class Pg:
            def allreduce(self, tensors):
                work = gpu.allreduce(tensors[0])
                tensors[0].fill_(float(n))  # every member's ones, summed
                return work

            def eager_connect_single_device(self, device):
                pass

            def abort(self):
                pass

        return Pg()

    # ---------------------------------------------------------------- torch.distributed for the bench
    def dist(self) -> SimpleNamespace:
        gpu = self

        def all_reduce(t, op=None, async_op=False):
            work = gpu.allreduce(t)
            if async_op:
                return work
            work.wait()  # a synchronous call: the current stream waits (blocking wait off)
            return None

        return SimpleNamespace(all_reduce=all_reduce, all_gather=gpu.all_gather,
                               ReduceOp=SimpleNamespace(MAX="max", SUM="sum"))


def install_cuda(mp, tl: Timeline) -> None:
    """torch.cuda as each rank's thread sees it (the bench's fabric calls torch.cuda itself)."""

    @contextlib.contextmanager
    def nothing(_):
        yield

    stream = SimpleNamespace(wait_event=lambda e: None, wait_stream=lambda s: None,
                             device=torch.device("cuda", 0))
    mp.setattr(torch.cuda, "Event", lambda enable_timing=False: Event(tl.me(), enable_timing))
    mp.setattr(torch.cuda, "current_stream", lambda d=None: stream)
    mp.setattr(torch.cuda, "device", nothing)
    mp.setattr(torch.cuda, "synchronize", lambda d=None: tl.me().synchronize())
    mp.setattr(torch.cuda, "_sleep", lambda cycles: tl.me().spin(cycles))
    mp.setattr(torch.cuda, "get_device_properties", lambda d: SimpleNamespace(clock_rate=PEAK_KHZ))
