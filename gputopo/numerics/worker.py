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
Its processes are the workers package's pool (gputopo/workers/pool.py: started, handed a job
with its deadline by the pool's ``submit``, talked to over a pipe each, waited for, ended, a
death put in words), as the bench's are; this module decides which ranks run a job, moves its
deadlines on as progress comes, and decides when one has hung.

Exit-time crashes: DDP on gloo occasionally dies with SIGABRT *after* ``destroy_process_group``
(docs/architecture.md). Workers delete the DDP module and collect garbage before destroying the
group and leave with ``os._exit`` (workers/processes.py's ``leave``); a worker that dies on its
way out after every result was delivered is not a failure (the pool's ``idle_exit``, which its
``stop`` applies).

The worker's side (its entry point and the jobs it runs) is in worker_main.py.
"""

from __future__ import annotations

import collections
import math
import os
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable, Deque, Dict, Iterable, List, Optional, Set, Tuple

from gputopo.workers.outcome import CRASH, JobOutcome, hung, raised
from gputopo.workers.pool import Job, WorkerProcesses
from gputopo.workers.processes import mp_context

from .worker_main import numerics_worker_main

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
    """``size`` worker processes (2 for DDP, 1 for the sim) of the workers' pool; restarted
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
        self._procs = WorkerProcesses(mp_context())
        #: Messages read from the workers and not yet handled: (kind, job id, rank, payload).
        self._inbox: Deque[Tuple[Any, ...]] = collections.deque()
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
        self.starts += 1
        self._inbox.clear()
        env = dict(os.environ)
        if self.backend == "nccl":  # the variables that change what runs (bench.worker_env)
            from gputopo.bench.worker_env import worker_env

            env = worker_env(env)[0]
        self._procs.start(numerics_worker_main, [
            (str(r), (r, self.backend, self.threads, self._log_path(r), os.getpid(), env),
             self._log_path(r) or "") for r in range(self.size)])
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

    def _alive(self) -> bool:
        ws = self._procs.workers
        return len(ws) == self.size and all(w.proc.is_alive() for w in ws.values())

    def kill(self) -> None:
        """Stop both workers now (after a hang/crash); the next job starts fresh ones."""
        self._procs.kill(*list(self._procs.workers))
        self._inbox.clear()
        self._peers.held.clear()  # (the mappings went with the processes)

    def close(self) -> None:
        """Ask the workers to exit; an exit-time crash here is not a failure (all results are in)."""
        self._stop_workers()
        self._tmp.cleanup()

    def _stop_workers(self) -> None:
        """Ask the workers to exit once their current job is done, join them (killed after
        10 s); the pool can start again."""
        self._procs.stop(list(self._procs.workers), 10.0)
        self._inbox.clear()
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
            if self._inbox:
                return self._inbox.popleft()
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise WorkerHang(hung(hang() if hang else f"{what}: no answer within the time limit"))
            for w in self._procs.wait(min(POLL_S * 4, left), keys=[str(r) for r in ranks]):
                self._inbox.extend(self._procs.messages(w))
            if self._inbox:
                continue
            found = [self._procs.workers.get(str(r)) for r in ranks]
            ws = [w for w in found if w is not None]
            if len(ws) < len(found):  # ended meanwhile by another thread (Ctrl-C: SimJobs.kill)
                self.kill()
                raise WorkerCrash(raised(f"{what}: its worker processes were ended"))
            dead = [w for w in ws if self._procs.dead(w)]
            for w in dead:  # what it sent before it died is still read
                self._inbox.extend(self._procs.messages(w))
            if dead and not self._inbox:
                deaths = [self._procs.died(w, f"worker process {w.key}", lines=8, max_chars=1500)
                          for w in dead]
                how = ", ".join(d.how for d in deaths)
                last = " | ".join(line for d in deaths for line in d.log_tail.splitlines()[-3:])
                kinds = {d.kind for d in deaths}  # killed only when every one died of SIGKILL
                kind = next(iter(kinds)) if len(kinds) == 1 else CRASH
                self.kill()
                raise WorkerCrash(JobOutcome(
                    kind, f"{what}: worker process {', '.join(w.key for w in dead)} died ({how})"
                    + (f"; log: {last}" if last else ""), exitcode=deaths[0].exitcode,
                    log_tail=deaths[0].log_tail, dead=True, how=how,
                    why=deaths[0].why if kind == deaths[0].kind else ""))

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
        # (one that died meanwhile is a crash, found below)
        first = time.monotonic() + PREPARE_TIMEOUT_S  # until it says "prepared"
        self._procs.submit(Job(str(job["id"]), {str(r): job for r in ranks}), first)
        deadlines = {r: first for r in ranks}
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
        self._procs.release([str(r) for r in ranks])
        return JobResult(payloads=payloads, wall_s=time.perf_counter() - t0)


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
