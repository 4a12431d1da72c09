"""The one pool of worker processes that the bench's runner (bench/runner.py) and the numerics'
worker pool (numerics/worker.py, and through it the sim's jobs, numerics/sim_jobs.py) drive.

A worker is a process with a key (``gpu3``, ``sim0``, the numerics' rank ``0``), its log file
and one Pipe to this process; the supervisors speak their own messages over it (the bench's
steps, the numerics' jobs), and ask a worker to end with :data:`EXIT`. The pool starts workers
(:meth:`WorkerProcesses.start`: through :func:`~gputopo.workers.processes.start_processes`,
with Ctrl-C held), hands a job to its workers (:meth:`~WorkerProcesses.submit`: a :class:`Job`
and the deadline by which it must show progress; the one way a bench step, a numerics job and
the sim's jobs are handed out; :meth:`~WorkerProcesses.release` when it is over), hands a
further message to one (:meth:`~WorkerProcesses.send`: False when it is dead), waits for messages and deaths of all of them at once (:meth:`~WorkerProcesses.wait`,
:meth:`~WorkerProcesses.messages`: what a worker sent before it died is still read), says how a
dead worker died (:meth:`~WorkerProcesses.died`, the one place a death is put in words: its exit
code, its log's tail), says that one that ended with no job did not fail
(:meth:`~WorkerProcesses.idle_exit`, the one place of the parent's side of the exit-time SIGABRT
work-around) and ends workers (asked, then killed and joined: no orphan).

Which worker runs what, how progress moves a deadline on, and when a job has hung stay with
the supervisors (the bench's steps, the numerics' jobs); both put how a job ended in the one
result type, outcome.py's ``JobOutcome``, and both make its failure record from it: the one
record of both, model/step_failure.py's ``StepFailure`` (an events.jsonl ``step-failed`` line).
"""

from __future__ import annotations

import multiprocessing.connection as mpc
import time
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from .outcome import JobOutcome, died
from .processes import TAIL_LINES, exit_text, start_processes, starting_workers, tail

#: The message that asks a worker to end once its current work is done (both kinds of worker).
EXIT = ("exit",)


@dataclass(eq=False)  # a worker is itself: compared by identity
class Worker:
    """A worker process as its supervisor knows it: its pipe, its log, whether it said it is
    ready (and what it said: ``info``), and the job it runs (None: idle)."""

    key: str
    proc: BaseProcess
    conn: mpc.Connection
    log_path: str
    ready: bool = False
    info: dict = field(default_factory=dict)
    job: Optional[str] = None
    #: The deadline (``time.monotonic()``) its job was submitted with (:meth:`WorkerProcesses.submit`).
    deadline: Optional[float] = None
    #: Its pipe reached its end (the worker is gone, or going).
    closed: bool = False


@dataclass
class Job:
    """A job for the pool's workers: its ``id`` (a bench step's id, a numerics job's number) and
    the message each of its workers is handed, by worker key, in rank order."""

    id: str
    messages: Dict[str, Any]


class WorkerProcesses:
    """The live workers by key, started from ``ctx`` (workers/processes.py's ``mp_context``);
    ``on_gone(key)``: called once a worker's process is gone (its peer mappings with it)."""

    def __init__(self, ctx: Any, on_gone: Optional[Callable[[str], None]] = None):
        self.ctx = ctx
        self.on_gone = on_gone
        self.workers: Dict[str, Worker] = {}
        #: Every pid started, in order.
        self.pids: List[int] = []

    # ------------------------------------------------------------------ start
    def start(self, target: Callable[..., Any],
              workers: Sequence[Tuple[str, Tuple[Any, ...], str]]) -> List[Worker]:
        """Start one process per ``(key, args, log_path)``, running ``target(conn, *args)``
        (``conn``: its end of its pipe), all at once; Ctrl-C waits until their pids are known."""
        with starting_workers(self.ctx):
            pipes = [self.ctx.Pipe() for _ in workers]
            procs = start_processes(self.ctx, target,
                                    [(f"gputopo-{key}", (child,) + tuple(args))
                                     for (key, args, _log), (_parent, child) in zip(workers, pipes)])
            out = []
            for (key, _args, log_path), (parent, child), proc in zip(workers, pipes, procs):
                child.close()  # the worker has its own copy: EOF here once it is gone
                w = Worker(key, proc, parent, log_path)
                self.workers[key] = w
                self.pids.append(proc.pid)
                out.append(w)
        return out

    # ------------------------------------------------------------------ talk
    def submit(self, job: Job, deadline: float) -> Optional[Worker]:
        """Hand ``job`` to its workers: each becomes busy with it (``job``: its id, ``deadline``:
        the ``time.monotonic()`` by which the job must show progress, which its supervisor
        moves on as progress comes) and is sent its message. The first worker found dead (its
        pipe broken; nothing more is sent) is returned, for its supervisor to end the job as a
        crash (:meth:`died`); None: every worker has it."""
        for key, msg in job.messages.items():
            w = self.workers[key]
            w.job, w.deadline = job.id, deadline
            if not self.send(w, msg):
                return w
        return None

    def release(self, keys: Sequence[str]) -> None:
        """The workers ``keys`` (those still there) are done with their job: idle again."""
        for key in keys:
            w = self.workers.get(key)
            if w is not None:
                w.job, w.deadline = None, None

    def send(self, w: Worker, msg: Any) -> bool:
        """Hand ``msg`` to ``w``; False: its pipe is broken (it died)."""
        try:
            w.conn.send(msg)
            return True
        except (OSError, EOFError, ValueError):
            return False

    def wait(self, timeout: float, keys: Optional[Sequence[str]] = None) -> List[Worker]:
        """The workers (of ``keys``, default all) that sent something or died within
        ``timeout`` seconds, each once. (A worker found dead must be ended or left out: its
        process's end stays ready.)"""
        by_obj: Dict[Any, Worker] = {}  # its pipe and its process sentinel (an fd) -> worker
        for w in (self.workers.values() if keys is None else
                  [x for x in (self.workers.get(k) for k in keys) if x is not None]):
            if not w.closed:
                by_obj[w.conn] = w
            if getattr(w.proc, "pid", None) is not None:
                by_obj[w.proc.sentinel] = w
        if not by_obj:
            time.sleep(min(max(0.0, timeout), 0.2))
            return []
        try:
            ready = mpc.wait(list(by_obj), timeout=max(0.0, timeout))
        except (OSError, ValueError):  # one was ended meanwhile by another thread (its pipe closed)
            return []
        out: List[Worker] = []
        for obj in ready:
            w = by_obj[obj]
            if w not in out:
                out.append(w)
        return out

    def messages(self, w: Worker) -> Iterator[Any]:
        """Every message ``w`` has sent so far (those sent before it died included); its pipe's
        end marks it ``closed``."""
        while not w.closed:
            try:
                if not w.conn.poll():
                    return
                msg = w.conn.recv()
            except (EOFError, OSError):
                w.closed = True
                return
            yield msg

    def dead(self, w: Worker) -> bool:
        return w.closed or not w.proc.is_alive()

    def died(self, w: Worker, who: str, lines: int = TAIL_LINES, max_chars: int = 4000) -> JobOutcome:
        """How dead worker ``w`` died (joined first, for its exit code): ``"<who> died: killed
        by signal SIGKILL"``, its exit code and its log's last ``lines``."""
        if w.proc.pid is not None:
            w.proc.join(5)
        return died(who, w.proc.exitcode, tail(w.log_path, lines, max_chars) if w.log_path else "")

    # ------------------------------------------------------------------ end
    def kill(self, *keys: str) -> None:
        """Kill the workers ``keys`` and join them; each leaves :attr:`workers` only once that is
        done, so a Ctrl-C in the middle leaves it there to be killed again."""
        ws = [w for w in (self.workers.get(k) for k in keys) if w is not None]
        for w in ws:
            if w.proc.pid is not None and w.proc.is_alive():
                w.proc.kill()
        for w in ws:
            if w.proc.pid is not None:
                w.proc.join(10)
            self._gone(w)

    def idle_exit(self, w: Worker) -> Dict[str, Any]:
        """Worker ``w`` ended with no job: the one place where the parent's side of the
        exit-time SIGABRT work-around is kept. DDP and process groups on gloo occasionally abort
        at interpreter exit, after every result was delivered (docs/architecture.md), so a
        worker that dies with no job, whatever its exit, is not a failure: it is joined and
        removed (killed first if it is still there), and what is known of its exit returned,
        ``{"worker", "pid", "exitcode", "exit", "idle": True}`` (the bench's ``worker-exit``
        event). A worker that dies while it runs a job is a failure: :meth:`died`."""
        if w.proc.pid is not None:
            w.proc.join(5)
        code = w.proc.exitcode
        out = {"worker": w.key, "pid": w.proc.pid, "exitcode": code, "exit": exit_text(code),
               "idle": True}
        self.kill(w.key)
        return out

    def stop(self, keys: Sequence[str], seconds: float) -> List[Dict[str, Any]]:
        """Ask the workers ``keys`` to exit (:data:`EXIT`), give them ``seconds`` in all to do
        so, then kill and join whatever is left. Each has finished its work, so how it ended
        is :meth:`idle_exit`'s (a death on its way out is not a failure); their exits are
        returned, in ``keys`` order."""
        ws = [w for w in (self.workers.get(k) for k in keys) if w is not None]
        for w in ws:
            if w.proc.pid is not None and w.proc.is_alive():
                self.send(w, EXIT)
        deadline = time.monotonic() + seconds
        for w in ws:
            if w.proc.pid is not None:
                w.proc.join(max(0.0, deadline - time.monotonic()))
        self.kill(*[w.key for w in ws if w.proc.pid is not None and w.proc.is_alive()])
        out = [self.idle_exit(w) for w in ws]
        self.kill(*keys)  # (any of keys not among the live workers: a no-op)
        return out

    def _gone(self, w: Worker) -> None:
        if self.workers.get(w.key) is w:
            del self.workers[w.key]
        if self.on_gone is not None:
            self.on_gone(w.key)
        try:
            w.conn.close()
        except OSError:
            pass
