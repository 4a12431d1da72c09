"""Issue 49, item 1: the one pool of worker processes (gputopo/workers/pool.py) that the bench's
runner and the numerics' workers run on, with real processes (forked: the pool's machinery, not
torch, is under test): messages both ways, a last message read after its sender died, a death
put in words with its exit code and log tail, a send to a dead worker refused, and no process
left after ``stop`` or ``kill``."""

from __future__ import annotations

import faulthandler
import multiprocessing as mp
import os
import signal
import time

import pytest

pytestmark = pytest.mark.slow  # real processes (kept out of `make test-fast`)

from gputopo.workers.outcome import CRASH, KILLED
from gputopo.workers.pool import EXIT, Job, WorkerProcesses


def _echo(conn, log_path: str) -> None:
    """A worker: says it is up in its log, answers every message, dies on "die" after a last
    message, ends on EXIT."""
    with open(log_path, "a", encoding="utf-8") as f:
        f.write(f"worker up pid {os.getpid()}\n")
    while True:
        msg = conn.recv()
        if msg == EXIT:
            os._exit(0)
        if msg == "die":
            conn.send(("last words",))
            os.kill(os.getpid(), signal.SIGKILL)
        conn.send(("echo", msg))


@pytest.fixture
def pool(tmp_path):
    gone = []
    p = WorkerProcesses(mp.get_context("fork"), on_gone=gone.append)
    p.gone = gone  # type: ignore[attr-defined]
    yield p
    p.kill(*list(p.workers))


def _start(pool, tmp_path, *keys):
    return pool.start(_echo, [(k, (str(tmp_path / f"{k}.log"),), str(tmp_path / f"{k}.log")) for k in keys])


def _next_messages(pool, w, seconds: float = 30.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if w in pool.wait(0.5):
            got = list(pool.messages(w))
            if got or pool.dead(w):
                return got
    raise AssertionError("no message within the time limit")


def test_messages_go_both_ways_and_stop_leaves_no_process(pool, tmp_path):
    a, b = _start(pool, tmp_path, "w0", "w1")
    assert [w.key for w in (a, b)] == ["w0", "w1"] and pool.pids == [a.proc.pid, b.proc.pid]
    assert pool.send(a, 1) and pool.send(b, 2)
    assert _next_messages(pool, a) == [("echo", 1)]
    assert _next_messages(pool, b) == [("echo", 2)]
    pool.stop(["w0", "w1"], 10.0)
    assert pool.workers == {} and sorted(pool.gone) == ["w0", "w1"]
    assert a.proc.exitcode == 0 and b.proc.exitcode == 0  # asked, not killed


def test_a_dead_worker_s_last_message_is_read_and_its_death_is_said_with_its_log(pool, tmp_path):
    (w,) = _start(pool, tmp_path, "w0")
    assert pool.send(w, "die")
    got = _next_messages(pool, w)
    assert got == [("last words",)]  # sent before it died: still read
    deadline = time.monotonic() + 30
    while not pool.dead(w) and time.monotonic() < deadline:
        pool.wait(0.5)
        list(pool.messages(w))
    assert pool.dead(w)
    o = pool.died(w, "worker w0")
    # (issue 49 item 2: a SIGKILL death is ``killed``, recorded as a crash)
    assert (o.kind, o.exitcode, o.how) == (KILLED, -signal.SIGKILL, "killed by signal SIGKILL")
    assert o.record_kind == CRASH
    assert o.what == "worker w0 died: killed by signal SIGKILL" and o.dead
    assert f"worker up pid {w.proc.pid}" in o.log_tail
    assert pool.send(w, 3) is False  # its end is closed with it: refused, not blocked
    pool.kill("w0")
    assert pool.workers == {} and pool.gone == ["w0"]


def test_submit_hands_a_job_to_its_workers_with_its_deadline(pool, tmp_path):
    """The one way a job is handed out (the bench's steps, the numerics' and the sim's jobs):
    each of its workers gets its own message and is busy with the job until released; a
    worker found dead is returned at once, and the workers after it are not handed the job."""
    a, b = _start(pool, tmp_path, "w0", "w1")
    (c,) = _start(pool, tmp_path, "w2")  # (forked after them: no copy of its pipe lives on in them)
    deadline = time.monotonic() + 30
    assert pool.submit(Job("p2p:0-1", {"w0": "for rank 0", "w1": "for rank 1"}), deadline) is None
    assert [(w.job, w.deadline) for w in (a, b, c)] == [("p2p:0-1", deadline)] * 2 + [(None, None)]
    assert _next_messages(pool, a) == [("echo", "for rank 0")]
    assert _next_messages(pool, b) == [("echo", "for rank 1")]
    pool.release(["w0", "w1", "gone"])  # (a key no longer there: nothing to release)
    assert [(w.job, w.deadline) for w in (a, b)] == [(None, None)] * 2
    c.proc.kill()
    c.proc.join(10)
    assert pool.submit(Job("7", {"w2": "x", "w0": "y"}), deadline) is c  # its pipe is broken
    assert (c.job, a.job) == ("7", None)  # the dead one holds the job (its crash is the job's)
    assert pool.died(c, "worker w2").exitcode == -signal.SIGKILL


def test_kill_ends_a_worker_that_does_not_answer(pool, tmp_path):
    (w,) = _start(pool, tmp_path, "w0")
    pool.kill("w0")
    assert not w.proc.is_alive() and w.proc.exitcode == -signal.SIGKILL
    assert pool.workers == {} and pool.gone == ["w0"]


def _aborts_at_exit(conn, log_path: str) -> None:
    """A worker that, asked to exit, aborts (gloo's exit-time SIGABRT after its results)."""
    while True:
        msg = conn.recv()
        if msg == EXIT:
            faulthandler.disable()  # (pytest's, inherited: no dump of this abort on the output)
            os.kill(os.getpid(), signal.SIGABRT)
        conn.send(("echo", msg))


def test_a_worker_that_dies_on_its_way_out_or_while_idle_did_not_fail(pool, tmp_path):
    """Issue 49 item 3: the parent's side of the exit-time SIGABRT work-around is the pool's
    ``idle_exit``, which ``stop`` applies too: a worker that ended with no job is joined and
    removed, once, and its exit said as it was (SIGABRT here), never as a failure."""
    log = str(tmp_path / "a.log")
    (a,) = pool.start(_aborts_at_exit, [("a", (log,), log)])
    (b,) = _start(pool, tmp_path, "b")
    assert pool.send(a, 1) and _next_messages(pool, a) == [("echo", 1)]
    exits = pool.stop(["a", "b"], 10.0)
    assert exits == [
        {"worker": "a", "pid": a.proc.pid, "exitcode": -signal.SIGABRT,
         "exit": "killed by signal SIGABRT", "idle": True},
        {"worker": "b", "pid": b.proc.pid, "exitcode": 0, "exit": "exit code 0", "idle": True}]
    assert pool.workers == {} and sorted(pool.gone) == ["a", "b"]
    # one that died with no job between jobs: the same rule, the same record
    (c,) = _start(pool, tmp_path, "c")
    os.kill(c.proc.pid, signal.SIGKILL)
    assert pool.idle_exit(c) == {"worker": "c", "pid": c.proc.pid, "exitcode": -signal.SIGKILL,
                                 "exit": "killed by signal SIGKILL", "idle": True}
    assert pool.workers == {} and pool.gone.count("c") == 1 and not c.proc.is_alive()
