"""The sim fabric's DataParallel and DDP jobs, run ahead on a few worker processes at once.

Why: on the sim every pair's two ways are independent CPU jobs (the one-GPU reference is
computed once for the run), and one worker ran them one after the other while the other cores
sat idle: a third of the demo's wall time. Each worker here is a :class:`WorkerPool` of one
process (so a ``hang`` fault blocks, and a ``crash`` fault kills, only the job that hit it,
under the same per-job timeout), driven by one thread; the jobs are handed out in plan order.
Judging and recording stay in the calling thread, pair after pair in plan order (``train``
waits for the job it needs), so numerics.jsonl and the findings come out as before. Modeled
numerics do not depend on how many jobs run at once (no wall-clock time is judged).
"""

from __future__ import annotations

import concurrent.futures
import os
import queue
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .outcome import Pair, WayFailed
from .result import WAY_NAMES
from .verdict import WayRun

#: Most worker processes the sim's numerics use at once (one per core up to this).
MAX_SIM_WORKERS = 4
#: The reference's training orders (judging.reference_and_tolerance asks for these).
REFERENCE_ORDERS = ("plain", "swapped", "halves")


def sim_workers(jobs: int, cpus: Optional[int] = None) -> int:
    """How many workers: one per core (at most MAX_SIM_WORKERS), never more than there are jobs."""
    return max(1, min(MAX_SIM_WORKERS, cpus or os.cpu_count() or 1, jobs))


class SimJobs:
    """``dp``/``ddp`` jobs of ``pairs`` submitted at once; :meth:`train` gives a way's run."""

    def __init__(self, description: Any, opts, timeout_s: float, log_dir: Optional[str],
                 pairs: Sequence[Pair], ways: Sequence[str], workers: Optional[int] = None):
        from .worker import WorkerPool

        self.description, self.opts, self.timeout_s = description, opts, timeout_s
        todo: List[Tuple[Pair, str]] = [((int(p[0]), int(p[1])), w) for p in pairs
                                         for w in ("dp", "ddp") if w in ways]
        n = workers or sim_workers(len(todo))
        self.pools = [WorkerPool("sim", threads=1, size=1, log_dir=log_dir, name=f"sim{k}")
                      for k in range(n)]
        self._free: "queue.Queue[Any]" = queue.Queue()
        for p in self.pools:
            self._free.put(p)
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=n, thread_name_prefix="gputopo-numerics-sim")
        # The one-GPU reference and its noise re-runs, first, on a worker like the ways: this
        # process then never imports torch (judging is numpy), which was a second of CPU time
        # spent while the bench's workers needed both cores.
        self._reference = self._executor.submit(self._references)
        self._futures: Dict[Tuple[Pair, str], concurrent.futures.Future] = {
            key: self._executor.submit(self._run, *key) for key in todo}

    def reference(self):
        """(reference run, tolerance, per-replica baseline) of the run's options, as
        judging.reference_and_tolerance gives them (computed on a worker)."""
        return self._reference.result()

    def _job(self, job: Dict[str, Any]) -> Dict[str, Any]:
        """Run ``job`` on the next free worker: its payload (WorkerHang, WorkerCrash raised)."""
        pool = self._free.get()
        try:
            return pool.run(job, ranks=(0,), timeout_s=self.timeout_s).payloads[0]
        finally:
            self._free.put(pool)

    def _references(self):
        from .judging import reference_and_tolerance
        from .worker import WorkerCrash, WorkerHang, payload_to_run

        job = {"kind": "cpu-references", "orders": list(REFERENCE_ORDERS), "opts": self.opts.to_json()}
        try:
            payload = self._job(job)
        except (WorkerHang, WorkerCrash) as e:
            raise RuntimeError(f"the one-GPU reference could not be computed: {e}") from e
        runs = {order: payload_to_run(p) for order, p in payload["runs"].items()}
        return reference_and_tolerance(lambda order: runs[order], self.opts)

    @property
    def starts(self) -> int:
        return sum(p.starts for p in self.pools)

    def _run(self, pair: Pair, way: str) -> WayRun:
        from .worker import WorkerCrash, WorkerHang, payload_to_run

        job = {"kind": f"sim-{way}", "pair": list(pair), "description": self.description,
               "opts": self.opts.to_json()}
        t0 = time.perf_counter()  # (judged later: the record keeps how long the way ran)
        try:
            return payload_to_run(self._job(job))
        except (WorkerHang, WorkerCrash) as e:
            raise WayFailed.of(WAY_NAMES[way], e.outcome, " (simulated transfers)",
                               time.perf_counter() - t0) from e

    def train(self, way: str) -> Callable[[Pair], WayRun]:
        """``train(pair)``: the run of ``way`` on ``pair`` (waits for it), or its WayFailed."""
        def train(pair: Pair) -> WayRun:
            key = ((int(pair[0]), int(pair[1])), way)
            future = self._futures.get(key)
            if future is None:  # not among the jobs started ahead: run it now, here
                return self._run(*key)
            return future.result()
        return train

    def kill(self) -> None:
        """Ctrl-C: drop the jobs not started and kill every worker (a running job then ends
        at once as a crash nobody reads)."""
        for f in self._futures.values():
            f.cancel()
        for p in self.pools:
            p.kill()

    def close(self) -> List[str]:
        """Wait for the threads, close the workers; the note on how often they started."""
        self._executor.shutdown(wait=True, cancel_futures=True)
        for p in self.pools:
            p.close()
        return [f"sim workers: {len(self.pools)} at once, started {self.starts} time(s)"]
