"""Issue 33 item 6: CUDA allows a device at most 8 peer mappings at once, over every process
(gputopo/bench/peer_mappings.py). On a PCIe box of 10 or 16 GPUs the bench's worker gpu{a} ran
every pair (a, *) in one process and the numerics' worker 0 every DataParallel pair: the ninth
peer of a device failed, reported as a crash on a healthy pair.

The sim fabric has no such limit, so the real runner (and the numerics' worker pool) run here
with fake worker processes (threads) over a fake driver that counts the mappings of every
process alive at once as peer_mappings.py says CUDA does, and fails a step beyond 8, as
cudaErrorTooManyPeers would. The plan is then checked: which worker process ran which pairs.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import os
import queue
import threading
import time
from typing import Dict, List, Set, Tuple

import pytest

from gputopo.bench.options import BenchOptions, all_pairs
from gputopo.bench.peer_mappings import PEER_LIMIT, PeerLedger
from gputopo.bench.plan import plan_steps
from gputopo.runfolder.writer import RunLog

TOO_MANY = "RuntimeError: CUDA error: peer mapping resources exhausted"


class FakeDriver:
    """Peer mappings per live process: a process that ran anything on GPUs a and b holds one
    mapping on each; a device past ``limit`` fails the call (and the mapping is not made)."""

    def __init__(self, limit: int = PEER_LIMIT):
        self.limit = limit
        self.lock = threading.Lock()
        self.live: Dict[object, Set[Tuple[int, int]]] = {}
        self.peak = 0
        self.failures: List[Tuple[str, Tuple[int, int], int]] = []
        self.ran: Dict[Tuple[str, int], Set[Tuple[int, int]]] = {}  # (key, pid) -> pairs

    def count(self, device: int) -> int:
        return sum(1 for pairs in self.live.values() for p in pairs if device in p)

    def map(self, proc, who: Tuple[str, int], a: int, b: int) -> bool:
        pair = (min(a, b), max(a, b))
        with self.lock:
            mine = self.live.setdefault(proc, set())
            if pair in mine:
                return True
            mine.add(pair)
            worst = max(self.count(a), self.count(b))
            if worst > self.limit:
                mine.discard(pair)
                self.failures.append((who[0], pair, worst))
                return False
            self.peak = max(self.peak, worst)
            self.ran.setdefault(who, set()).add(pair)
            return True

    def release(self, proc) -> None:
        with self.lock:
            self.live.pop(proc, None)


class _ChildEnd:
    """The worker's end of the pipe: the runner closes its copy after start (a forked child
    keeps its own); here the thread keeps using it."""

    def __init__(self, conn):
        self.real = conn

    def close(self) -> None:
        pass


class FakeProcess:
    """A bench worker (the protocol of gputopo/bench/worker.py) as a thread: it maps the pair
    of every two-GPU step it is sent (every rank of an NCCL step, the one process of a copy or
    DataParallel step) and gives the mappings back when it ends."""

    pids = itertools.count(900000)

    def __init__(self, driver: FakeDriver, step_s: float, args):
        self.driver, self.step_s, self.args = driver, step_s, args
        self.pid = None
        self.exitcode = None
        self._r, self._w = os.pipe()
        self.sentinel = self._r
        self._killed = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self.pid = next(self.pids)
        self._thread.start()

    def _run(self) -> None:
        end, key, _config, _log = self.args
        conn = end.real
        try:
            conn.send(("ready", {"pid": self.pid, "store_port": None}))
            while not self._killed.is_set():
                if not conn.poll(0.005):
                    continue
                msg = conn.recv()
                if msg[0] == "exit":
                    break
                step = msg[1]
                gpus = step["gpus"]
                if len(gpus) == 2 and not self.driver.map(self, (key, self.pid), *gpus):
                    conn.send(("error", step["id"], TOO_MANY))
                    continue
                time.sleep(self.step_s)
                conn.send(("done", step["id"]))
        except (EOFError, OSError):
            pass
        finally:
            self.driver.release(self)
            self.exitcode = -9 if self._killed.is_set() else 0
            os.close(self._w)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def kill(self) -> None:
        self._killed.set()

    def join(self, timeout=None) -> None:
        if self.pid is not None:
            self._thread.join(timeout)


class FakeContext:
    def __init__(self, driver: FakeDriver, step_s: float = 0.0):
        self.driver, self.step_s = driver, step_s

    def get_start_method(self) -> str:
        return "fake"

    def Pipe(self):
        parent, child = mp.Pipe()
        return parent, _ChildEnd(child)

    def Process(self, target=None, name=None, daemon=None, args=()):
        return FakeProcess(self.driver, self.step_s, args)


def _machine(n: int):
    from gputopo.sim.description import generate_description
    from gputopo.sim.scan import scan_description

    topo = scan_description(generate_description(n))
    assert len(topo.gpus) == n
    return topo


def _run(tmp_path, monkeypatch, n: int, tests=("p2p", "dp", "collectives"), concurrent=False,
         step_s: float = 0.0):
    import gputopo.bench.runner as runner_mod

    driver = FakeDriver()
    monkeypatch.setattr(runner_mod, "mp_context", lambda: FakeContext(driver, step_s))
    topo = _machine(n)
    opts = BenchOptions(pairs=all_pairs(range(n)), tests=tests, concurrent=concurrent)
    steps = plan_steps(topo, opts)
    runner = runner_mod.Runner(fabric="cuda", config={}, log=RunLog(tmp_path), timeout_s=30,
                               concurrent=concurrent, peer_limit=PEER_LIMIT)
    runner.run(steps)
    return driver, runner, steps


def _retired(tmp_path) -> List[dict]:
    import json

    lines = (tmp_path / "events.jsonl").read_text().splitlines() if (tmp_path / "events.jsonl").exists() else []
    return [e for e in map(json.loads, lines) if e.get("type") == "worker-retired"]


@pytest.mark.parametrize("n", [10, 16])
def test_no_device_ever_holds_a_ninth_peer_mapping(tmp_path, monkeypatch, n):
    driver, runner, steps = _run(tmp_path, monkeypatch, n)
    assert driver.failures == []
    assert runner.failures == [] and runner.steps_done == len(steps) == 3 * n * (n - 1) // 2
    assert 0 < driver.peak <= PEER_LIMIT
    # the plan: each worker process ran pairs of at most 8 peers per device, and the copies and
    # DataParallel of a pair ran in its first GPU's worker, as before
    for (key, _pid), pairs in driver.ran.items():
        for d in {g for p in pairs for g in p}:
            assert sum(1 for p in pairs if d in p) <= PEER_LIMIT, (key, d, sorted(pairs))
    owners = {p: {k for (k, _pid), pairs in driver.ran.items() if p in pairs} for p in all_pairs(range(n))}
    assert all(f"gpu{p[0]}" in who for p, who in owners.items())
    gpu0 = [pairs for (k, _pid), pairs in driver.ran.items() if k == "gpu0"]
    assert len(gpu0) >= 2  # gpu0's 9 or 15 peers needed more than one process
    # each fresh worker is said in events.jsonl, with the mappings its predecessor gave back
    retired = _retired(tmp_path)
    assert retired and all(e["why"] == "peer-mappings" and e["limit"] == 8 for e in retired)


def test_concurrent_steps_count_the_mappings_of_every_worker_alive(tmp_path, monkeypatch):
    driver, runner, steps = _run(tmp_path, monkeypatch, 10, concurrent=True, step_s=0.002)
    assert driver.failures == [] and runner.failures == []
    assert runner.steps_done == len(steps) and driver.peak <= PEER_LIMIT


def test_without_the_count_the_ninth_peer_is_a_crash_on_a_healthy_pair(tmp_path, monkeypatch):
    """What the fake stands for: the runner as it was (no count) crashes healthy pairs."""
    import gputopo.bench.runner as runner_mod

    driver = FakeDriver()
    monkeypatch.setattr(runner_mod, "mp_context", lambda: FakeContext(driver))
    opts = BenchOptions(pairs=all_pairs(range(10)), tests=("p2p",))
    runner = runner_mod.Runner(fabric="cuda", config={}, log=RunLog(tmp_path), timeout_s=30)
    runner.run(plan_steps(_machine(10), opts))
    assert driver.failures and {f.kind for f in runner.failures} == {"crash"}


def test_an_eight_gpu_box_copies_in_one_process_per_gpu_as_before(tmp_path, monkeypatch):
    driver, runner, steps = _run(tmp_path, monkeypatch, 8, tests=("p2p", "dp"))
    assert driver.failures == [] and runner.failures == []
    assert sorted(k for k, _pid in driver.ran) == [f"gpu{k}" for k in range(7)]
    assert _retired(tmp_path) == []


def test_the_ledger_ends_idle_workers_done_first_and_waits_for_busy_ones():
    led = PeerLedger()
    for p in range(1, 9):
        led.hold("gpu0", 0, p)  # device 0 at 8
    assert led.count(0) == 8 and led.count(1) == 1
    assert led.over({"gpu9": [(0, 9)]}) == [0]
    assert led.room_for({"gpu9": [(0, 9)]}, idle=["gpu0"], next_use={}) == ["gpu0"]
    assert led.room_for({"gpu9": [(0, 9)]}, idle=[], next_use={}) is None  # gpu0 is busy
    # the step's own worker may be the one to end: it starts again, holding only the new pair
    assert led.room_for({"gpu0": [(0, 9)]}, idle=["gpu0"], next_use={"gpu0": 0}) == ["gpu0"]
    led.hold("gpu1", 1, 0)
    # one mapping over on device 0: the worker no step needs any more goes first
    assert led.room_for({"gpu2": [(0, 2)]}, idle=["gpu0", "gpu1"],
                        next_use={"gpu0": 5}) == ["gpu1", "gpu0"]
    led.drop("gpu0")
    assert led.count(0) == 1 and led.over({"gpu2": [(0, 2)]}) == []


# ----------------------------------------------------------------------------- numerics


class _FakeQueue(queue.Queue):
    def cancel_join_thread(self) -> None:
        pass


class FakeNumericsProcess(FakeProcess):
    """A numerics worker (gputopo/numerics/worker_main.py's protocol) as a thread: a job
    naming two CUDA devices maps them in every rank that runs it."""

    def __init__(self, driver: FakeDriver, args):
        super().__init__(driver, 0.0, args)

    def _run(self) -> None:
        rank, jobs, results = self.args[0], self.args[1], self.args[2]
        try:
            results.put(("ready", None, rank, None))
            while not self._killed.is_set():
                try:
                    job = jobs.get(timeout=0.01)
                except queue.Empty:
                    continue
                if job is None:
                    break
                devs = job.get("cuda_devices") or []
                if len(devs) == 2 and not self.driver.map(self, (f"numerics{rank}", self.pid), *devs):
                    results.put(("error", job["id"], rank, TOO_MANY))
                    continue
                results.put(("result", job["id"], rank, {"rank": rank}))
        finally:
            self.driver.release(self)
            self.exitcode = 0
            os.close(self._w)


class FakeNumericsContext:
    def __init__(self, driver: FakeDriver):
        self.driver = driver

    def get_start_method(self) -> str:
        return "fake"

    def Queue(self):
        return _FakeQueue()

    def Process(self, target=None, name=None, daemon=None, args=()):
        return FakeNumericsProcess(self.driver, args)


def test_numerics_workers_start_afresh_before_a_ninth_peer(tmp_path, monkeypatch):
    """The jobs _run_cuda gives the NCCL pool for every pair of a 10-GPU box: DataParallel on
    worker 0, DDP on both (gputopo/numerics/run.py)."""
    import gputopo.numerics.worker as nw

    driver = FakeDriver()
    monkeypatch.setattr(nw, "_mp_context", lambda: FakeNumericsContext(driver))
    pool = nw.WorkerPool("nccl", log_dir=str(tmp_path))
    try:
        for i, j in all_pairs(range(10)):
            pool.run({"kind": "reference", "cuda_devices": [i]}, ranks=(0,), timeout_s=10)
            pool.run({"kind": "dp-cuda", "cuda_devices": [i, j]}, ranks=(0,), timeout_s=10)
            pool.run({"kind": "ddp", "cuda_devices": [i, j]}, ranks=(0, 1), timeout_s=10)
    finally:
        pool.close()
    assert driver.failures == [] and 0 < driver.peak <= PEER_LIMIT
    assert pool.peer_starts > 0 and pool.restarts == 0  # fresh workers, not after a failure


def test_numerics_pool_without_the_count_crashes_the_ninth_pair(tmp_path, monkeypatch):
    import gputopo.numerics.worker as nw

    driver = FakeDriver()
    monkeypatch.setattr(nw, "_mp_context", lambda: FakeNumericsContext(driver))
    monkeypatch.setattr(PeerLedger, "over", lambda self, extra, without=(): [])
    pool = nw.WorkerPool("nccl", log_dir=str(tmp_path))
    with pytest.raises(nw.WorkerCrash, match="peer mapping"):
        try:
            for j in range(1, 10):
                pool.run({"kind": "dp-cuda", "cuda_devices": [0, j]}, ranks=(0,), timeout_s=10)
        finally:
            pool.close()


def test_the_numerics_notes_say_why_their_workers_started_afresh():
    from types import SimpleNamespace

    from gputopo.numerics.run import _pool_closed

    out = SimpleNamespace(notes=[])
    with _pool_closed(SimpleNamespace(starts=5, peer_starts=4, close=lambda: None), out, "NCCL workers"):
        pass
    assert out.notes == ["NCCL workers started 5 time(s) (4 of them fresh workers so that no GPU "
                         "held more than 8 peer mappings at once, CUDA's limit)"]
