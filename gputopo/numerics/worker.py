"""Worker processes that run the training job where it must run out of this process.

- **DDP** (cpu fabric: gloo; cuda fabric: NCCL): both workers take part, rank r on the pair's
  r-th GPU (cuda) or on the CPU (cpu), each on its contiguous part of the global batch.
- **reference / noise re-runs / DataParallel on cuda**: worker 0 alone, so that a GPU pair that
  hangs (broken peer-to-peer DMA can hang a copy) or kills the process costs a finding, not the run.
- **sim DataParallel / sim DDP** (one worker): the sim fabric's ``hang`` fault really blocks and
  its ``crash`` fault really aborts the process that moves the bytes (bench/fabrics/sim.py), so
  the ways that move bytes through the simulated links run here too, under the same timeout.

The pool is started once per numerics run and reused pair after pair (start-up is ~2 s per
process with torch, docs/architecture.md); a worker that hangs or dies is killed and the pool is restarted
for the next job. Each DDP job gets a fresh process group over a FileStore (no TCP port races).

Exit-time crashes: DDP on gloo occasionally dies with SIGABRT *after* ``destroy_process_group``
(docs/architecture.md). Workers delete the DDP module and collect garbage before destroying the group, and
the parent treats a death after every result was delivered as a clean exit.

The worker's side (its entry point and the jobs it runs) is in worker_main.py.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import queue
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple

from gputopo.workers.outcome import CRASH, JobOutcome, hung, raised
from gputopo.workers.processes import exit_text

from .worker_main import worker_main

#: Seconds a worker may take to start (spawn + import torch) before it counts as hung.
START_TIMEOUT_S = 120.0
#: Seconds a job may take to prepare (its data and sim model: CPU work, no GPU or link touched)
#: before it counts as hung; the job's own timeout counts from then, between signs of progress.
PREPARE_TIMEOUT_S = START_TIMEOUT_S
POLL_S = 0.05


class WorkerFailure(Exception):
    """A job that delivered nothing; ``outcome``: how it ended (gputopo/workers/outcome.py, the
    result type the bench's runner records its steps' failures from too)."""

    def __init__(self, outcome: JobOutcome):
        super().__init__(outcome.what)
        self.outcome = outcome


class WorkerHang(WorkerFailure):
    """A job did not finish within its time limit (the workers were killed)."""


class WorkerCrash(WorkerFailure):
    """A worker process died, or the job raised, before delivering its result."""


class WorkerStartError(RuntimeError):
    """The workers could not start at all (no job ran): a broken environment, not a finding."""


# ----------------------------------------------------------------------------- in the parent


@dataclass
class JobResult:
    """Per rank that ran the job: its payload (losses, final_params list, ...)."""

    payloads: Dict[int, Dict[str, Any]]
    wall_s: float


class WorkerPool:
    """``size`` spawned worker processes (2 for DDP, 1 for the sim) and their queues; restarted
    after a hang or a crash. ``backend``: "gloo", "nccl" or "sim"."""

    def __init__(self, backend: str, threads: int = 1, size: int = 2,
                 log_dir: Optional[str] = None, name: Optional[str] = None,
                 peer_exempt: Iterable[int] = ()):
        self.backend = backend
        self.name = name or backend  # in the log file names (pools side by side differ)
        self.size = size
        self.threads = threads
        self.log_dir = log_dir
        if log_dir:
            os.makedirs(log_dir, exist_ok=True)
        self._ctx = _mp_context()
        self._procs: List[Any] = []
        self._jobs: List[Any] = []
        self._results: Any = None  # the queue every worker answers on, once started
        self._next_id = 0
        self._tmp = tempfile.TemporaryDirectory(prefix="gputopo-numerics-")
        self.starts = 0
        # The peer mappings the live workers hold (gputopo.workers.peer_mappings): a job naming
        # two CUDA devices maps them in every rank that runs it; CUDA allows a device 8 at once
        # on non-NVSwitch systems (``peer_exempt``: the CUDA devices reached through NVSwitch)
        from gputopo.workers.peer_mappings import PeerLedger

        self._peers = PeerLedger(exempt=peer_exempt)
        #: Starts made only to give peer mappings back (not after a hang or a crash).
        self.peer_starts = 0

    # --- lifecycle
    @property
    def restarts(self) -> int:
        """How many times the workers had to be started again after a hang or a crash."""
        return max(0, self.starts - 1 - self.peer_starts)

    def _start(self) -> None:
        from gputopo.workers.processes import start_processes, starting_workers

        self.starts += 1
        # Ctrl-C waits until every worker is started (and so known, to be killed)
        with starting_workers(self._ctx):
            self._results = self._ctx.Queue()
            self._jobs = [self._ctx.Queue() for _ in range(self.size)]
            env = dict(os.environ)
            if self.backend == "nccl":  # the variables that change what runs (bench.worker_env)
                from gputopo.bench.worker_env import worker_env

                env = worker_env(env)[0]
            self._procs = start_processes(
                self._ctx, worker_main,
                [(f"gputopo-numerics-{r}", (r, self._jobs[r], self._results, self.backend,
                                            self.threads, self._log_path(r), os.getpid(), env))
                 for r in range(self.size)])
        ready: Set[int] = set()
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            while len(ready) < self.size:
                msg = self._get(deadline, ranks=tuple(range(self.size)), what="start")
                if msg[0] == "ready":
                    ready.add(msg[2])
        except (WorkerHang, WorkerCrash) as e:
            raise WorkerStartError(f"numerics worker processes could not start: {e}") from None

    def _log_path(self, rank: int) -> Optional[str]:
        if not self.log_dir:
            return None
        return os.path.join(self.log_dir, f"numerics-{self.name}{rank}.{self.starts}.log")

    def log_tail(self, rank: int) -> str:
        """The end of a worker's current log (quoted in crash messages)."""
        path = self._log_path(rank)
        if not path:
            return ""
        try:
            from gputopo.workers.processes import tail

            return tail(path, lines=8, max_chars=1500)
        except ImportError:  # pragma: no cover
            return ""

    def _alive(self) -> bool:
        return len(self._procs) == self.size and all(p.is_alive() for p in self._procs)

    def kill(self) -> None:
        """Stop both workers now (after a hang/crash); the next job starts fresh ones."""
        started = [p for p in self._procs if p.pid is not None]
        for p in started:
            if p.is_alive():
                p.kill()
        for p in started:
            p.join(timeout=5)
        for q in self._jobs:
            # a job its killed worker never read stays in the pipe; one larger than the pipe
            # buffer (the sim description of a big machine) left the queue's feeder thread
            # blocked, and the interpreter waited for it at exit forever
            q.cancel_join_thread()
        self._procs = []
        self._results = None
        self._peers.held.clear()  # (the mappings went with the processes)

    def close(self) -> None:
        """Ask the workers to exit; an exit-time crash here is not a failure (all results are in)."""
        self._ask_exit()
        self._stop_workers()
        self._tmp.cleanup()

    def _ask_exit(self) -> None:
        """Tell each live worker to exit once its current job is done (a None job)."""
        for q, p in zip(self._jobs, self._procs):
            if p.pid is not None and p.is_alive():
                try:
                    q.put(None)
                except (OSError, ValueError):
                    pass

    def _stop_workers(self) -> None:
        """Join the workers asked to exit (killed after 10 s); the pool can start again."""
        started = [p for p in self._procs if p.pid is not None]
        for p in started:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
        self._procs = []
        self._peers.held.clear()

    @staticmethod
    def _job_pairs(job: Dict[str, Any], ranks: Tuple[int, ...]) -> Dict[str, List[Tuple[int, int]]]:
        """The pair of CUDA devices each rank of ``job`` maps (none for a one-GPU job)."""
        devices = job.get("cuda_devices") or []
        if len(devices) != 2 or devices[0] == devices[1]:
            return {}
        return {str(r): [(int(devices[0]), int(devices[1]))] for r in ranks}

    def _retire(self) -> None:
        """Ask the (idle) workers to exit and join them; the next job starts fresh ones."""
        self._ask_exit()
        self._stop_workers()
        self.peer_starts += 1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- jobs
    def _get(self, deadline: float, ranks, what: str, hang: Optional[Callable[[], str]] = None):
        """The next message from a worker; WorkerHang (``hang()`` says why) once ``deadline``
        passes, WorkerCrash when one of ``ranks`` died. Either way the workers are killed."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise WorkerHang(hung(hang() if hang else f"{what}: no answer within the time limit"))
            try:
                return self._results.get(timeout=min(POLL_S * 4, left))
            except queue.Empty:
                dead = [r for r in ranks if r < len(self._procs) and not self._procs[r].is_alive()]
                if dead:
                    codes = {r: self._procs[r].exitcode for r in dead}
                    # A last message may have been queued just before the process died.
                    try:
                        return self._results.get(timeout=0.5)
                    except queue.Empty:
                        pass
                    how = ", ".join(exit_text(c) for c in codes.values())
                    tails = {r: self.log_tail(r) for r in dead}
                    last = " | ".join(line for r in dead for line in tails[r].splitlines()[-3:])
                    self.kill()
                    first = dead[0]
                    raise WorkerCrash(JobOutcome(
                        CRASH, f"{what}: worker process {', '.join(map(str, dead))} died ({how})"
                        + (f"; log: {last}" if last else ""), exitcode=codes[first],
                        log_tail=tails[first], dead=True)) from None

    def run(self, job: Dict[str, Any], ranks: Tuple[int, ...], timeout_s: float) -> JobResult:
        """Run ``job`` on the workers ``ranks`` and wait for all of them. Each rank may take up
        to PREPARE_TIMEOUT_S to prepare (options, data, the sim model: CPU work no fault can
        block, slow on a busy machine), then at most ``timeout_s`` without progress (a training
        step or the result) is a hang. Start-up is not counted either (START_TIMEOUT_S). Raises
        WorkerHang or WorkerCrash; the pool is then restarted lazily."""
        pairs = self._job_pairs(job, ranks)
        if pairs and self._alive() and self._peers.over(pairs):
            # the pair would take a device past CUDA's 8 peer mappings (both workers counted):
            # fresh workers run it, the old ones' mappings gone with them (torch cannot unmap)
            self._retire()
        if not self._alive():
            if self._procs:
                self.kill()
            self._start()
        for key, held in pairs.items():  # (from now on, until the workers end)
            for a, b in held:
                self._peers.hold(key, a, b)
        self._next_id += 1
        job = dict(job, id=self._next_id, timeout_s=timeout_s,
                   store=os.path.join(self._tmp.name, f"store-{self._next_id}"))
        t0 = time.perf_counter()
        for r in ranks:
            self._jobs[r].put(job)
        sent = time.monotonic()
        deadlines = {r: sent + PREPARE_TIMEOUT_S for r in ranks}  # until it says "prepared"
        last_step: Dict[int, Optional[int]] = {}  # rank -> last training step it reported
        payloads: Dict[int, Dict[str, Any]] = {}
        errors: Dict[int, str] = {}

        def late() -> int:
            waiting = [r for r in ranks if r not in payloads and r not in errors]
            return min(waiting, key=lambda r: deadlines[r])

        def why() -> str:
            r = late()
            who = f" (rank {r})" if len(ranks) > 1 else ""
            if r not in last_step:
                return f"{job['kind']}{who}: still preparing after {PREPARE_TIMEOUT_S:g} s"
            step = last_step[r]
            where = ("in its first training step" if step is None or step < 0
                     else f"after at least {step + 1} training step(s)")
            return f"{job['kind']}{who}: no progress for {timeout_s:g} s {where}"

        while len(payloads) + len(errors) < len(ranks):
            kind, jid, rank, payload = self._get(deadlines[late()], ranks, what=job["kind"], hang=why)
            if jid != job["id"] or rank not in deadlines:
                continue  # a stale message from a job that was given up on
            if kind in ("prepared", "beat"):
                last_step[rank] = payload
                deadlines[rank] = time.monotonic() + timeout_s
            elif kind == "result":
                payloads[rank] = payload
            elif kind == "error":
                errors[rank] = payload
        if errors:
            # The other rank may now wait in a collective forever: start afresh next time.
            self.kill()
            raise WorkerCrash(raised("; ".join(f"rank {r}: {e}" for r, e in sorted(errors.items()))))
        return JobResult(payloads=payloads, wall_s=time.perf_counter() - t0)


def _mp_context():
    """The bench runner's multiprocessing context (forkserver with torch preloaded: a worker
    costs a fork, not an interpreter start), or spawn where that is not available."""
    try:
        from gputopo.workers.processes import mp_context

        return mp_context()
    except ImportError:  # pragma: no cover - the bench is part of the package
        return mp.get_context("spawn")


def payload_to_run(payload: Dict[str, Any]):
    """Turn a worker's payload back into a WayRun (final parameters as a float32 numpy array:
    judging them needs no torch in this process)."""
    import numpy as np

    from .verdict import WayRun

    return WayRun(losses=[float(v) for v in payload["losses"]],
                  final_params=np.asarray(payload["final_params"], dtype=np.float32),
                  first_nonfinite_step=payload["first_nonfinite_step"],
                  nonfinite_in=payload["nonfinite_in"], wall_s=payload["wall_s"],
                  extra=dict(payload.get("extra") or {}))


def rank_param_gap(a: Dict[str, Any], b: Dict[str, Any]) -> float:
    """Largest |difference| between two ranks' final parameters (DDP keeps them identical)."""
    gap = 0.0
    for x, y in zip(a["final_params"], b["final_params"]):
        d = abs(x - y)
        if not math.isfinite(d):
            return math.inf
        gap = max(gap, d)
    return gap
