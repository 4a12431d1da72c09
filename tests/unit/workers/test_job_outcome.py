"""Issue 49, item 1: one result type for how a job handed to workers ended
(gputopo/workers/outcome.py), which the bench's runner records its steps' failures from and
the numerics' pool raises its hangs and crashes with."""

from __future__ import annotations

import multiprocessing

import pytest

from gputopo.workers.outcome import (CRASH, HANG, KILLED, OOM, SIGKILL_WHY, TRACEBACK_CHARS,
                                     JobOutcome, died, hung, raised)
from gputopo.workers.pool import Worker


def test_a_dead_worker_s_outcome_keeps_its_exit_code_and_log_tail():
    o = died("worker gpu3 (pid 42)", -9, "line 1\nline 2")
    assert (o.kind, o.what, o.exitcode, o.log_tail) == (
        KILLED, "worker gpu3 (pid 42) died: killed by signal SIGKILL", -9, "line 1\nline 2")
    assert o.failed and o.evidence() == {"exitcode": -9}
    assert died("w", None).evidence() == {"exitcode": None}  # the fact that it was not had


def test_a_sigkill_death_is_killed_said_as_known_and_recorded_as_a_crash():
    """Contract change (issue 49 item 2): a SIGKILL death is its own outcome kind, ``killed``,
    whose cause says only what is known: SIGKILL, the OOM killer one cause, not "out of
    memory". Its record stays a crash (no record or verdict changed)."""
    o = died("worker gpu3 (pid 42)", -9)
    assert o.kind == KILLED and o.why == SIGKILL_WHY == "killed by SIGKILL (the OOM killer is one cause)"
    assert "out of memory" not in (o.what + o.why).lower()
    assert o.record_kind == CRASH
    for code in (-6, 1, None):  # SIGABRT, an exit code, no exit code had: crashes, no cause
        d = died("w", code)
        assert (d.kind, d.why, d.record_kind) == (CRASH, "", CRASH)
    # a log whose last line says out of memory does not make a death an OOM: not known why it died
    assert died("w", 1, "RuntimeError: CUDA error: out of memory").kind == CRASH


def test_a_worker_that_raised_keeps_its_traceback_s_end_and_a_hang_nothing_more():
    tb = "x" * (TRACEBACK_CHARS + 10) + "RuntimeError: boom"
    o = raised("the worker raised RuntimeError: boom", tb)
    assert o.kind == CRASH and o.evidence() == {"traceback": tb[-TRACEBACK_CHARS:]}
    assert hung("no progress for 5 s").evidence() == {} and hung("x").kind == HANG
    assert not JobOutcome("delivered").failed
    assert hung("x").record_kind == HANG and raised("boom").record_kind == CRASH
    with pytest.raises(ValueError, match="kind must be one of"):
        JobOutcome("out-of-memory")


@pytest.mark.parametrize("what,tb", [
    ("the worker raised OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", ""),
    ("rank 0: RuntimeError: CUDA error: out of memory", ""),
    ("the worker raised RuntimeError: boom",
     "Traceback ...\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB"),
])
def test_a_worker_that_reported_it_ran_out_of_memory_is_an_oom_outcome(what, tb):
    """Contract change (issue 49 item 2): ``JobOutcome("oom")`` was invalid; it is now the kind
    the pool sets when a worker's own error says it ran out of memory (torch's
    OutOfMemoryError, CUDA's "out of memory"); its record is still a crash."""
    o = raised(what, tb)
    assert (o.kind, o.what, o.record_kind) == (OOM, what, CRASH) and o.failed
    assert o.why == "the worker reported that it ran out of memory"
    assert JobOutcome("oom").kind == OOM


def test_an_error_that_does_not_say_out_of_memory_stays_a_crash():
    for what in ("the worker raised RuntimeError: NCCL error: unhandled system error",
                 "the worker raised ValueError: memory layout out of range"):
        assert raised(what).kind == CRASH


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
    assert isinstance(o, JobOutcome) and o.kind == KILLED and o.exitcode == -9 and o.dead
    assert o.why == SIGKILL_WHY and o.record_kind == CRASH
    assert str(e.value) == o.what == "sim-dp: worker process 0 died (killed by signal SIGKILL)"


def test_a_numerics_way_s_failure_is_made_from_its_job_s_outcome():
    """Issue 49 item 1 (a step): a way that hung or crashed on the pool is one maker's
    (WayFailed.of) from its JobOutcome: the record kind is the outcome's record_kind (an oom or
    killed job a crash, as before), the message as the numerics wrote it before."""
    from gputopo.numerics.outcome import WayFailed

    h = WayFailed.of("DDP (gloo)", hung("ddp: no progress for 5 s"))
    assert (h.kind, str(h), h.outcome.kind) == ("hang", "DDP (gloo) hung: ddp: no progress for 5 s", HANG)
    k = died("sim-dp: worker process 0", -9)
    c = WayFailed.of("DataParallel", k, " (simulated transfers)", 1.5)
    assert (c.kind, str(c), c.wall_s, c.outcome) == (
        "crash", "DataParallel (simulated transfers): sim-dp: worker process 0 died: killed by "
        "signal SIGKILL", 1.5, k)
    assert WayFailed.of("w", raised("RuntimeError: CUDA error: out of memory")).kind == "crash"
