"""Issue 49, item 1: one result type for how a job handed to workers ended
(gputopo/workers/outcome.py), which the bench's runner records its steps' failures from and
the numerics' pool raises its hangs and crashes with."""

from __future__ import annotations

import multiprocessing

import pytest

from gputopo.workers.outcome import CRASH, HANG, TRACEBACK_CHARS, JobOutcome, died, hung, raised
from gputopo.workers.pool import Worker


def test_a_dead_worker_s_outcome_keeps_its_exit_code_and_log_tail():
    o = died("worker gpu3 (pid 42)", -9, "line 1\nline 2")
    assert (o.kind, o.what, o.exitcode, o.log_tail) == (
        CRASH, "worker gpu3 (pid 42) died: killed by signal SIGKILL", -9, "line 1\nline 2")
    assert o.failed and o.evidence() == {"exitcode": -9}
    assert died("w", None).evidence() == {"exitcode": None}  # the fact that it was not had


def test_a_worker_that_raised_keeps_its_traceback_s_end_and_a_hang_nothing_more():
    tb = "x" * (TRACEBACK_CHARS + 10) + "RuntimeError: boom"
    o = raised("the worker raised RuntimeError: boom", tb)
    assert o.kind == CRASH and o.evidence() == {"traceback": tb[-TRACEBACK_CHARS:]}
    assert hung("no progress for 5 s").evidence() == {} and hung("x").kind == HANG
    assert not JobOutcome("delivered").failed
    with pytest.raises(ValueError, match="kind must be one of"):
        JobOutcome("oom")


class _Dead:
    """A worker alive when the job is handed out, killed (SIGKILL) before it answers."""

    pid = None
    exitcode = -9

    def __init__(self):
        self.asked = 0

    def is_alive(self):
        self.asked += 1
        return self.asked == 1


def test_the_numerics_pool_raises_its_crash_with_the_same_outcome():
    """A numerics worker the kernel killed: WorkerCrash carries a JobOutcome (the record type
    the bench's runner makes its step failures from), with the exit code, as before in words."""
    from gputopo.numerics.worker import WorkerCrash, WorkerPool

    pool = WorkerPool("sim", size=1)
    parent, worker_end = multiprocessing.Pipe()  # (kept open: the death is the process's)
    pool._procs.workers["0"] = Worker("0", _Dead(), parent, "")
    with pytest.raises(WorkerCrash) as e:
        pool.run({"kind": "sim-dp"}, ranks=(0,), timeout_s=5.0)
    o = e.value.outcome
    assert isinstance(o, JobOutcome) and o.kind == CRASH and o.exitcode == -9 and o.dead
    assert str(e.value) == o.what == "sim-dp: worker process 0 died (killed by signal SIGKILL)"
