"""Issue 33 item 6: CUDA allows a device at most 8 peer mappings at once, over every process
(gputopo/workers/peer_mappings.py). On a PCIe box of 10 or 16 GPUs the bench's worker gpu{a} ran
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
import threading
import time
from typing import Dict, List, Set, Tuple

import pytest

from gputopo.bench.options import BenchOptions, all_pairs
from gputopo.workers.peer_mappings import PEER_LIMIT, PEER_LIMIT_KEY, PeerLedger, nvswitch_gpus, peer_limit_record
from gputopo.bench.plan import plan_steps
from gputopo.runfolder.writer import RunLog

TOO_MANY = "RuntimeError: CUDA error: peer mapping resources exhausted"


class FakeDriver:
    """Peer mappings per live process: a process that ran anything on GPUs a and b holds one
    mapping on each; a device past ``limit`` fails the call (and the mapping is not made)."""

    def __init__(self, limit: int = PEER_LIMIT, unlimited: Tuple[int, ...] = ()):
        self.limit = limit
        #: devices with no limit: those of an NVSwitch system (the CUDA guide states the limit
        #: "on non-NVSwitch enabled systems")
        self.unlimited = set(unlimited)
        self.lock = threading.Lock()
        self.live: Dict[object, Set[Tuple[int, int]]] = {}
        self.peak = 0
        self.failures: List[Tuple[str, Tuple[int, int], int]] = []
        self.ran: Dict[Tuple[str, int], Set[Tuple[int, int]]] = {}  # (key, pid) -> pairs

    def count(self, device: int) -> int:
        if device in self.unlimited:
            return 0
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
         step_s: float = 0.0, topo=None, driver=None):
    """Run the plan of every pair of ``topo`` (default: a generated PCIe machine of ``n`` GPUs)
    on the fake driver, the runner given the peer limit and its exemptions as run_bench gives them."""
    import gputopo.bench.runner as runner_mod

    driver = driver or FakeDriver()
    monkeypatch.setattr(runner_mod, "mp_context", lambda: FakeContext(driver, step_s))
    topo = topo or _machine(n)
    n = len(topo.gpus)
    opts = BenchOptions(pairs=all_pairs(range(n)), tests=tests, concurrent=concurrent)
    steps = plan_steps(topo, opts)
    runner = runner_mod.Runner(fabric="cuda", config={}, log=RunLog(tmp_path), timeout_s=30,
                               concurrent=concurrent, peer_limit=PEER_LIMIT,
                               peer_exempt=nvswitch_gpus(topo))
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


# ----------------------------------------------------------------------------- NVSwitch (issue 43, item 7)


def _builtin(name: str):
    from gputopo.sim.description import load_builtin
    from gputopo.sim.scan import scan_description

    return scan_description(load_builtin(name))


def _described(tmp_path, text: str, name: str = "m"):
    from gputopo.sim.description import load_description
    from gputopo.sim.scan import scan_description

    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return scan_description(load_description(str(path)))


def _switched16(tmp_path):
    """16 H100 SXM on NVSwitch (as an HGX 16-GPU system would be), every GPU in clique 0."""
    return _described(tmp_path, 'nvswitch = true\nname = "sw16"\n[defaults]\nname = "NVIDIA H100 80GB HBM3"\n'
                      'nvlinks = 18\nnvlink_version = 4\n' + "[[gpu]]\n" * 16, "sw16")


def _starts(runner) -> int:
    return len(runner.worker_pids)


@pytest.mark.parametrize("which", ["dgx-h100", "dgx-a100", "sw16"])
def test_an_nvswitch_machine_runs_every_pair_in_one_process_per_gpu(tmp_path, monkeypatch, which):
    """Every GPU's peers are reached through NVSwitch (NVML: every NVLink up has an NVSwitch at
    its far end): CUDA's limit of 8 is stated for non-NVSwitch systems only, so the default plan
    (all pairs, every test group) starts one worker per GPU. Before: 16 starts on 8 GPUs, 123 on 16."""
    topo = _switched16(tmp_path) if which == "sw16" else _builtin(which)
    n = len(topo.gpus)
    assert nvswitch_gpus(topo) == list(range(n))
    driver, runner, steps = _run(tmp_path, monkeypatch, n, topo=topo,
                                 driver=FakeDriver(unlimited=tuple(range(n))))
    assert driver.failures == [] and runner.failures == [] and runner.steps_done == len(steps)
    assert _starts(runner) == n and _retired(tmp_path) == []


def test_an_nvswitch_machine_with_a_gpu_off_the_fabric_keeps_the_limit_everywhere(tmp_path, monkeypatch):
    """degraded-nvlink: GPU 5's NVLinks are all down, so its peers reach it over PCIe, and every
    other GPU has a peer (GPU 5) not reached through NVSwitch: the limit holds for all eight, and
    on a driver that enforces it on every device no step fails."""
    topo = _builtin("degraded-nvlink")
    assert nvswitch_gpus(topo) == []
    driver, runner, steps = _run(tmp_path, monkeypatch, 8, topo=topo)
    assert driver.failures == [] and runner.failures == [] and runner.steps_done == len(steps)
    assert 0 < driver.peak <= PEER_LIMIT and _retired(tmp_path)


def test_the_limit_is_skipped_only_for_the_devices_the_ledger_is_told():
    led = PeerLedger(exempt=[0])
    for p in range(1, 9):
        led.hold("gpu0", 0, p)
    assert led.over({"gpu9": [(0, 9)]}) == []  # device 0 not counted; device 9 holds 1
    for k in range(10, 18):
        led.hold(f"gpu{k}", 9, k)
    assert led.over({"gpu0": [(0, 9)]}) == [9]  # device 9 still is


def _switched8(**gpu3) -> str:
    """8 H100 SXM on NVSwitch; GPU 3 with the keys given."""
    extra = "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in gpu3.items())
    return ('nvswitch = true\nname = "sw8"\n[defaults]\nname = "NVIDIA H100 80GB HBM3"\nnvlinks = 18\n'
            'nvlink_version = 4\n' + "".join("[[gpu]]\n" + (extra if k == 3 else "") for k in range(8)))


@pytest.mark.parametrize("text, why", [
    (_switched8(), None),
    # two fabric cliques: GPUs of different cliques reach each other over PCIe
    (_switched8(fabric_clique_id=1), "clique"),
    # a GPU whose fabric registration has not completed reaches no peer over NVLink
    (_switched8(fabric_state="in-progress"), "fabric"),
    (_switched8(fabric_status="NOT_READY"), "fabric failed"),
    # a GPU whose NVLinks are down reaches its peers over PCIe
    (_switched8(nvlinks_down="all"), "links down"),
    # no NVSwitch: NVLink bridges between pairs
    ('extends = "a100-pcie-4gpu-bridged"\nname = "x"\n', "bridges"),
])
def test_the_limit_is_kept_where_a_peer_is_not_reached_through_nvswitch(tmp_path, text, why):
    topo = _described(tmp_path, text)
    assert nvswitch_gpus(topo) == ([] if why else list(range(8))), why


def test_a_gpu_alone_is_no_nvswitch_gpu():
    assert nvswitch_gpus(_builtin("h100-sxm-shared-vm")) == []


def test_run_json_says_which_gpus_the_limit_applied_to(tmp_path, monkeypatch):
    import json

    import gputopo.bench.api as api

    seen: dict = {}

    class Runner:
        def __init__(self, **kw):
            seen.update(kw)
            self.interrupted, self.steps_done = False, 0
            self.measurements, self.failures, self.worker_pids = [], [], []

        def run(self, steps, meanwhile=None):
            pass

    monkeypatch.setattr(api, "Runner", Runner)
    for name, exempt in (("dgx-h100", list(range(8))), ("degraded-nvlink", [])):
        out = tmp_path / name
        opts = BenchOptions(pairs=[(0, 1)], tests=("collectives",), out_dir=str(out), progress=False)
        api.run_bench(_builtin(name), opts, "cuda")
        assert list(seen["peer_exempt"]) == exempt and seen["peer_limit"] == PEER_LIMIT
        rec = json.loads((out / "run.json").read_text())[PEER_LIMIT_KEY]
        assert rec["limit"] == 8 and rec["skipped_for"] == exempt
        assert rec["applied_to"] == [g for g in range(8) if g not in exempt]
        assert (rec["why_skipped"] is None) == (not exempt)
    assert peer_limit_record(_builtin("pcie-4gpu"))["applied_to"] == [0, 1, 2, 3]


# ----------------------------------------------------------------------------- numerics


class FakeNumericsProcess(FakeProcess):
    """A numerics worker (gputopo/numerics/worker_main.py's protocol) as a thread: a job
    naming two CUDA devices maps them in every rank that runs it."""

    def __init__(self, driver: FakeDriver, args):
        super().__init__(driver, 0.0, args)

    def _run(self) -> None:
        conn, rank = self.args[0].real, self.args[1]
        try:
            conn.send(("ready", None, rank, None))
            while not self._killed.is_set():
                if not conn.poll(0.01):
                    continue
                job = conn.recv()
                if job == ("exit",):
                    break
                devs = job.get("cuda_devices") or []
                if len(devs) == 2 and not self.driver.map(self, (f"numerics{rank}", self.pid), *devs):
                    conn.send(("error", job["id"], rank, TOO_MANY))
                    continue
                conn.send(("result", job["id"], rank, {"rank": rank}))
        except (EOFError, OSError):
            pass
        finally:
            self.driver.release(self)
            self.exitcode = 0
            os.close(self._w)


class FakeNumericsContext:
    def __init__(self, driver: FakeDriver):
        self.driver = driver

    def get_start_method(self) -> str:
        return "fake"

    def Pipe(self):
        parent, child = mp.Pipe()
        return parent, _ChildEnd(child)

    def Process(self, target=None, name=None, daemon=None, args=()):
        return FakeNumericsProcess(self.driver, args)


def test_numerics_workers_start_afresh_before_a_ninth_peer(tmp_path, monkeypatch):
    """The jobs _run_cuda gives the NCCL pool for every pair of a 10-GPU box: DataParallel on
    worker 0, DDP on both (gputopo/numerics/run.py)."""
    import gputopo.numerics.worker as nw

    driver = FakeDriver()
    monkeypatch.setattr(nw, "mp_context", lambda: FakeNumericsContext(driver))
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
    monkeypatch.setattr(nw, "mp_context", lambda: FakeNumericsContext(driver))
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


def test_numerics_workers_on_nvswitch_gpus_are_not_started_afresh(tmp_path, monkeypatch):
    """The numerics' pool is told the CUDA devices reached through NVSwitch (issue 43, item 7):
    every pair of 10 such devices runs in the first two workers."""
    import gputopo.numerics.worker as nw

    driver = FakeDriver(unlimited=tuple(range(10)))
    monkeypatch.setattr(nw, "mp_context", lambda: FakeNumericsContext(driver))
    pool = nw.WorkerPool("nccl", log_dir=str(tmp_path), peer_exempt=range(10))
    try:
        for i, j in all_pairs(range(10)):
            pool.run({"kind": "ddp", "cuda_devices": [i, j]}, ranks=(0, 1), timeout_s=10)
    finally:
        pool.close()
    assert driver.failures == [] and pool.starts == 1 and pool.peer_starts == 0
