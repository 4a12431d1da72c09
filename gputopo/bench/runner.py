"""Run the planned steps in long-lived worker processes, with a timeout per step.

Process model: workers are started once per run, in parallel, from a *forkserver* that has
already imported torch, so a worker costs one fork (milliseconds) instead of a fresh
interpreter plus ``import torch`` (about 2 s, docs/architecture.md); start-ups do not grow with pairs.

- cuda and cpu: one worker per GPU (key ``gpuN``); a step goes to the workers of its GPUs
  (:func:`plan.layout`). One step at a time, or with ``concurrent`` every step whose GPUs are
  disjoint from the running ones (that perturbs bandwidth; outputs say so).
- sim: a pool of workers (``simK``), each modeling whole pairs; modeled times do not depend on
  what else runs, so the pool always works in parallel. In runs of fewer than two steps per
  worker, every worker measures each step instead, its cases handed out one at a time to
  whichever worker is free (shares.py).

Failure handling, per step: a worker that sends nothing for ``timeout_s`` is a ``hang``; a
worker that dies (or raises) is a ``crash`` whose record quotes the tail of its log. Either
way the step's workers are killed (SIGKILL, then joined: nothing is left behind), the step is
recorded as done with its failure (a StepFailure, gputopo/model/step_failure.py: the report
makes the finding), and fresh workers are forked for the steps still to run.
An idle worker that dies (e.g. at exit after delivering its results) is simply replaced,
never a failure. Ctrl-C (KeyboardInterrupt in the parent) stops the run; every worker is
killed and joined in ``finally``; what was written stays a valid partial run. Workers (and the
forkserver) never see Ctrl-C themselves: they start with SIGINT blocked (:func:`starting_workers`,
which also holds a Ctrl-C until a starting worker's pid is known). Progress is a measurement, or
a "beat" after each sample and while a case's buffers are prepared.

The worker processes themselves (started, handed a step with its deadline by the pool's
``submit``, talked to over their pipes, waited for, ended, a death put in words) are the
workers package's pool (gputopo/workers/pool.py), which the numerics' workers run on too, with
the peer-mapping ledger (gputopo/workers/peer_mappings.py); this module decides which worker
runs which step, moves a step's deadline on as progress comes, decides when a step has hung,
and records its failure (the one failure record, which a numerics way's failure shares). mp_context, starting_workers, stop_forkserver and tail are re-exported here, where
benchmarks/overhead.py finds them.
"""

from __future__ import annotations

import time
from typing import Callable, Dict, List, Optional, Sequence, Union

from gputopo.errors import NoHardwareError
from gputopo.model import Measurement
from gputopo.model.step_failure import StepFailure
from gputopo.runfolder.writer import RunLog

from gputopo.workers.outcome import JobOutcome, hung, raised
from gputopo.workers.peer_mappings import PeerLedger, step_pairs
from gputopo.workers.pool import EXIT, Job, Worker, WorkerProcesses
from gputopo.workers.processes import (TAIL_LINES, despite_ctrl_c, mp_context,
                                       starting_workers, stop_forkserver, tail)

from .fabrics.fabric import Fabric, fabric_named
from .plan import Step, layout
from .run_records import NullProgress
from .run_records import RunningStep as _Running
from .shares import dealing_order, share_steps

__all__ = ["STARTUP_TIMEOUT_S", "TAIL_LINES", "NullProgress", "Runner", "mp_context",
           "starting_workers", "stop_forkserver", "tail"]

#: Seconds a worker may take to start (fork + set-up) before its step counts as failed.
STARTUP_TIMEOUT_S = 120.0


class Runner:
    def __init__(self, *, fabric: Union[str, Fabric], config: dict, log: RunLog, timeout_s: float,
                 concurrent: bool = False, pool_size: int = 1, progress=None,
                 step_settings: Optional[dict] = None, on_measurement=None,
                 peer_limit: Optional[int] = None, peer_exempt: Sequence[int] = ()):
        self.fabric = fabric_named(fabric)
        self.config = config
        self.log = log
        self.timeout_s = float(timeout_s)
        self.concurrent = concurrent
        self.pool_size = max(1, int(pool_size))
        self.progress = progress or NullProgress()
        self.settings = dict(step_settings or {})
        self.on_measurement = on_measurement
        self.ctx = mp_context()
        self.procs = WorkerProcesses(self.ctx, on_gone=self._gone)
        self.generation: Dict[str, int] = {}
        #: The steps that hung or crashed, as they happened (also in events.jsonl).
        self.failures: List[StepFailure] = []
        self.measurements: List[Measurement] = []
        self.interrupted = False
        self.steps_done = 0
        self._seq = 0
        self._running: Dict[str, _Running] = {}
        self._share = False  # every sim step measured by every worker (shares.py)
        self.delivered_by: Dict[str, int] = {}  # measurements each worker key delivered
        # The peer mappings each live worker holds (gputopo/workers/peer_mappings.py), None: not counted (the
        # cuda fabric counts them: CUDA allows a device 8 at once, over all processes, on
        # non-NVSwitch systems; ``peer_exempt``: the GPUs reached through NVSwitch, not counted)
        self.peers = PeerLedger(peer_limit, exempt=peer_exempt) if peer_limit else None

    # ------------------------------------------------------------------ workers
    @property
    def workers(self) -> Dict[str, Worker]:
        """The live workers by key (the pool's)."""
        return self.procs.workers

    @property
    def worker_pids(self) -> List[int]:
        """Every worker pid started, in order."""
        return self.procs.pids

    def _start_worker(self, key: str) -> Worker:
        gen = self.generation.get(key, 0) + 1
        self.generation[key] = gen
        log_path = str(self.log.worker_log(key, gen))
        from .worker import bench_worker_main

        return self.procs.start(bench_worker_main, [(key, (key, self.config, log_path), log_path)])[0]

    def _kill(self, key: str) -> None:
        """Kill and join worker ``key`` (the pool's :meth:`~WorkerProcesses.kill`)."""
        self.procs.kill(key)

    def _gone(self, key: str) -> None:
        if self.peers is not None:  # its mappings went with its process
            self.peers.drop(key)

    def _pool_keys(self) -> List[str]:
        return [f"sim{k}" for k in range(self.pool_size)]

    def _keys_for(self, step: Step, running: Dict[str, _Running]) -> Optional[List[str]]:
        """Worker keys (rank order) that would run ``step`` now, or None if it must wait."""
        if self.fabric.pooled:
            if self._share:  # one step at a time, on every worker
                return None if running else self._pool_keys()[:max(1, len(step.cases))]
            if len(running) >= self.pool_size:
                return None
            busy = {k for r in running.values() for k in r.keys}
            free = [k for k in self._pool_keys() if k not in busy]
            return free[:1] or None
        ranks = layout(step, self.fabric)
        if running:
            if not self.concurrent:
                return None
            used = {g for r in running.values() for g in r.step.gpus}
            if used & set(step.gpus):
                return None
        return [f"gpu{r[0]}" for r in ranks]

    # ------------------------------------------------------------------ main loop
    def run(self, steps: Sequence[Step], meanwhile: Optional[Callable[[], None]] = None) -> None:
        """Run ``steps``. ``meanwhile()``, when there are steps, is called once the forkserver
        has been started (it imports torch for a second or so, on one core, while this process
        would only wait for it). A Ctrl-C is held until it returns, then interrupts the run: raised
        in its imports it left pandas half imported for the report (exit 4, not 130)."""
        pending = list(steps)
        running: Dict[str, _Running] = {}
        self._running = running
        self._share = share_steps(self.fabric, pending, self.pool_size)
        try:
            if pending and meanwhile is not None:
                with starting_workers(self.ctx):  # the forkserver starts; nothing waits for it
                    meanwhile()
            self._prestart(pending)
            while pending or running:
                self._launch(pending, running)
                self._pump(running)
        except KeyboardInterrupt:
            self.interrupted = True
        finally:
            if despite_ctrl_c(self._shutdown):  # a Ctrl-C during it: interrupted, not failed
                self.interrupted = True

    def _prestart(self, steps: Sequence[Step]) -> None:
        """Fork every worker the plan needs at once, so their set-up overlaps."""
        if not steps:
            return
        if self.fabric.pooled:
            keys = self._pool_keys()[:self.pool_size if self._share else len(steps)]
        else:
            keys = sorted({f"gpu{r[0]}" for s in steps for r in layout(s, self.fabric)},
                          key=lambda k: int(k[3:]))
        for k in keys:
            if k not in self.workers:
                self._start_worker(k)

    def _launch(self, pending: List[Step], running: Dict[str, _Running]) -> None:
        for step in list(pending):
            keys = self._keys_for(step, running)
            if keys is not None and not self._room_for(step, keys, running, pending):
                keys = None  # a busy worker holds the mappings it needs: after that step
            if keys is None:
                if not self.fabric.pooled and not self.concurrent:
                    break  # keep the plan's order
                continue
            pending.remove(step)
            ranks = [tuple(step.gpus)] * len(keys) if self.fabric.pooled else layout(step, self.fabric)
            r = _Running(step, keys, ranks, deadline=time.monotonic() + STARTUP_TIMEOUT_S)
            if self.fabric.pooled and len(keys) > 1:
                r.queue = dealing_order(step.cases)
            running[step.id] = r
            for k in keys:
                if k not in self.workers:
                    self._start_worker(k)
                self.workers[k].job = step.id
        for r in list(running.values()):
            if not r.sent:
                self._try_send(r)

    def _room_for(self, step: Step, keys: List[str], running: Dict[str, _Running],
                  pending: Sequence[Step]) -> bool:
        """Make room for the peer mappings ``step``'s workers will hold, ending idle workers
        whose mappings would take a device past the limit (gputopo/workers/peer_mappings.py); they are then
        counted as held. False: the mappings in the way belong to a running step's workers."""
        if self.peers is None:
            return True
        extra = step_pairs(tuple(step.gpus), keys)
        if not extra or not self.peers.over(extra):
            for k, pairs in extra.items():
                for a, b in pairs:
                    self.peers.hold(k, a, b)
            return True
        busy = {k for r in running.values() for k in r.keys}
        next_use: Dict[str, int] = {k: 0 for k in keys}  # (this step's own: now)
        for n, s in enumerate(x for x in pending if x is not step):
            for rank in layout(s, self.fabric):
                next_use.setdefault(f"gpu{rank[0]}", n + 1)
        idle = [k for k in self.workers if k not in busy]
        ended = self.peers.room_for(extra, idle, next_use)
        if ended is None:
            return False
        over = self.peers.over(extra)
        for k in ended:
            self._retire(k, step, over)
        for k, pairs in extra.items():
            for a, b in pairs:
                self.peers.hold(k, a, b)
        return True

    def _retire(self, key: str, step: Step, devices: List[int]) -> None:
        """End idle worker ``key`` so that its peer mappings are given back before ``step``
        maps its own (its process must be gone first: torch cannot unmap safely)."""
        w = self.workers.get(key)
        if w is None:
            return
        held = sorted(self.peers.held.get(key, ())) if self.peers is not None else []
        self.procs.send(w, EXIT)
        w.proc.join(5)
        self.log.event({"type": "worker-retired", "worker": key, "pid": w.proc.pid,
                        "why": "peer-mappings", "for_step": step.id, "devices": devices,
                        "limit": self.peers.limit if self.peers is not None else None,
                        "held_pairs": [list(p) for p in held]})
        self._kill(key)

    def _try_send(self, r: _Running) -> None:
        ws = [w for w in (self.workers.get(k) for k in r.keys) if w is not None and w.ready]
        if len(ws) < len(r.keys):  # a worker still starting (or to be restarted)
            return
        self._seq += 1
        store = None
        if len(r.keys) > 1 and r.queue is None:
            store = {"host": "127.0.0.1", "port": ws[0].info.get("store_port"),
                     "prefix": f"{r.step.id}#{self._seq}"}
        messages = {}
        for w in ws:
            cases = r.first_cases(w.key)
            if cases is None:  # a shared step with fewer cases than workers: w is done
                self.procs.release([w.key])
                continue
            messages[w.key] = ("step", self._message(r, w, cases, store))
        deadline = time.monotonic() + self.timeout_s
        dead = self.procs.submit(Job(r.step.id, messages), deadline)
        if dead is not None:  # it died since it said ready: the step fails as a crash
            self._worker_died(dead, self._running)
            return
        r.sent = True
        r.deadline = deadline
        if r.done >= set(r.keys):  # a shared step without cases
            self._finish(r, self._running)

    def _message(self, r: _Running, w: Worker, cases, store: Optional[dict]) -> dict:
        """What ``w`` is handed of step ``r``: its ``cases``, its rank, the step's settings."""
        rank = r.keys.index(w.key)
        return {"id": r.step.id, "group": r.step.group, "gpus": list(r.step.gpus),
                "local_gpus": list(r.ranks[rank]), "rank": rank, "world": len(r.keys),
                "store": store, "link_class": r.step.link_class, "shared": r.queue is not None,
                "cases": [c.to_json() for c in cases], **self.settings}

    def _send(self, r: _Running, w: Worker, cases) -> bool:
        """Hand ``w`` one more case of shared step ``r``; False: it had died (the step failed, a crash)."""
        if self.procs.send(w, ("step", self._message(r, w, cases, None))):
            return True
        self._worker_died(w, self._running)
        return False

    def _pump(self, running: Dict[str, _Running]) -> None:
        now = time.monotonic()
        deadlines = [r.deadline for r in running.values()]
        wait_s = max(0.0, min(deadlines) - now) if deadlines else 0.2
        for w in self.procs.wait(min(wait_s, 1.0)):
            if self.workers.get(w.key) is w:
                self._drain(w, running)
        now = time.monotonic()
        for r in list(running.values()):
            if now > r.deadline and r.step.id in running:
                if r.sent:
                    self._fail(r, running, hung(f"no progress for {self.timeout_s:g} s, its worker "
                                                "processes were killed"),
                               self._evidence(r, None))
                else:
                    self._fail(r, running,
                               raised(f"workers did not start within {STARTUP_TIMEOUT_S:g} s"),
                               self._evidence(r, None))

    def _drain(self, w: Worker, running: Dict[str, _Running]) -> None:
        """Read every message the worker has sent; then notice whether it died."""
        for msg in self.procs.messages(w):
            self._handle(w, msg, running)
            if self.workers.get(w.key) is not w:
                return  # killed while handling (its step failed)
        if self.procs.dead(w):
            self._worker_died(w, running)

    def _handle(self, w: Worker, msg, running: Dict[str, _Running]) -> None:
        kind = msg[0]
        if kind == "ready":
            w.ready = True
            w.info = msg[1]
            return
        if kind == "fatal":
            reason, text = msg[1], msg[2]
            if reason == "no-cuda":
                raise NoHardwareError(f"no usable CUDA device for --fabric cuda: {text}")
            r = running.get(w.job) if w.job else None
            if r is not None:
                self._fail(r, running, raised(f"worker {w.key} failed to start", text),
                           self._evidence(r, w))
            else:
                self._kill(w.key)
            return
        step_id = msg[1]
        r = running.get(step_id)
        if r is None:
            return
        if kind == "measurement":
            rec = msg[2]
            self.log.measurement(rec)
            m = Measurement.from_json(rec)
            self.measurements.append(m)
            r.delivered += 1
            r.by_key[w.key] = r.by_key.get(w.key, 0) + 1
            self.delivered_by[w.key] = self.delivered_by.get(w.key, 0) + 1
            r.deadline = time.monotonic() + self.timeout_s
            self.progress.advance(1, r.step.label)
            if self.on_measurement:
                self.on_measurement(m)
        elif kind == "beat":
            r.deadline = time.monotonic() + self.timeout_s
        elif kind == "done":
            case = r.hand_out(w.key)  # a shared step: the free worker takes the next case
            if case is not None:
                self._send(r, w, [case])
                return
            r.done.add(w.key)
            if r.done >= set(r.keys):
                self._finish(r, running)
        elif kind == "error":
            tb = msg[2]
            last = tb.strip().splitlines()[-1] if tb.strip() else "error"
            self._fail(r, running, raised(f"the worker raised {last}", tb), self._evidence(r, w))

    def _worker_died(self, w: Worker, running: Dict[str, _Running]) -> None:
        r = running.get(w.job) if w.job else None
        if r is not None:  # (SIGKILL: one cause the OOM killer, not the link; the report says so)
            self._fail(r, running, self.procs.died(w, f"worker {w.key} (pid {w.proc.pid})"),
                       self._evidence(r, w))
        else:  # idle death (e.g. at exit after its results): the pool's rule, no failure; said
            self.log.event({"type": "worker-exit", **self.procs.idle_exit(w)})

    def _evidence(self, r: _Running, w: Optional[Worker]) -> dict:
        ev = {"step": r.step.id, "test_group": r.step.group,
              "elapsed_s": round(time.monotonic() - r.started, 3),
              "measurements_delivered": r.delivered}
        c = r.current_case(w.key if w is not None else None)
        if c is not None:
            ev["case"] = {"test": c.test, "direction": c.direction, "size_bytes": c.size_bytes}
        logs = [w] if w is not None else [self.workers[k] for k in r.keys if k in self.workers]
        ev["worker_logs"] = [x.log_path for x in logs]
        ev["stderr_tail"] = "\n".join(tail(x.log_path) for x in logs)
        return ev

    def _finish(self, r: _Running, running: Dict[str, _Running]) -> None:
        running.pop(r.step.id, None)
        self.procs.release(r.keys)
        self.log.step_done(r.step.id, "ok", measurements=r.delivered,
                           elapsed_s=round(time.monotonic() - r.started, 3))
        self.steps_done += 1

    def _fail(self, r: _Running, running: Dict[str, _Running], outcome: JobOutcome,
              evidence: dict) -> None:
        """Step ``r`` ended as ``outcome`` (a hang or a crash, an ``oom`` or ``killed`` one
        included, gputopo/workers/outcome.py; recorded as its ``record_kind``):
        its workers killed, its StepFailure recorded with ``evidence`` and the outcome's own."""
        running.pop(r.step.id, None)
        for k in r.keys:
            self._kill(k)
        evidence.update(outcome.evidence())
        failure = StepFailure(kind=outcome.record_kind, step=r.step.id, group=r.step.group,
                              gpus=list(r.step.gpus), link_class=r.step.link_class,
                              what=outcome.what, evidence=evidence)
        self.failures.append(failure)
        self.log.event(failure.to_event())
        self.log.step_done(r.step.id, outcome.record_kind, measurements=r.delivered,
                           elapsed_s=round(time.monotonic() - r.started, 3))
        self.progress.advance(max(0, len(r.step.cases) - r.delivered), r.step.label)
        self.steps_done += 1

    def _shutdown(self) -> None:
        """Ask idle workers to exit, then kill and join whatever is left: no orphans."""
        idle = [] if self.interrupted else [k for k, w in self.workers.items() if w.job is None and w.ready]
        self.procs.stop(idle, 5.0)
        self.procs.kill(*list(self.workers))
