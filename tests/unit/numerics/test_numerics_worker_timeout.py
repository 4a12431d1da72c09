"""The numerics worker pool's timeout counts seconds without progress, after preparation.

Under load (2 CI cores shared with other jobs) a healthy sim pair's DataParallel job took more
than a 3 s ``--timeout`` from the moment it was sent (building its data and sim model, then 50
steps) and was reported as a ``hang`` of healthy GPUs: a wrong verdict. The workers now say
"prepared" and then beat after training steps; preparation has the start-up allowance, and a
hang is ``timeout_s`` without a sign of progress, as in the bench runner.

The parent's side is driven here by a thread standing in for a worker (the timing is the
parent's); the last test runs a real worker whose whole job is longer than its timeout.
"""

from __future__ import annotations

import multiprocessing
import threading
import time

import pytest

from gputopo.numerics.worker import WorkerHang, WorkerPool
from gputopo.workers.pool import Worker


class _Proc:
    pid = None
    exitcode = None

    def is_alive(self):
        return True


def _pool_driven_by(script):
    """A one-worker pool whose worker is a thread on the worker's end of its pipe: it takes the
    job and plays ``script``, a list of (seconds to wait, message kind, step) answered with the
    job's id. Returns the pool and the worker's end."""
    pool = WorkerPool("sim", size=1)
    parent, child = multiprocessing.Pipe()
    pool._procs.workers["0"] = Worker("0", _Proc(), parent, "")

    def worker():
        job = child.recv()
        for wait_s, kind, payload in script:
            time.sleep(wait_s)
            child.send((kind, job["id"], 0, payload))

    threading.Thread(target=worker, daemon=True).start()
    return pool, child


def test_slow_preparation_and_a_long_job_that_progresses_are_not_a_hang():
    """Preparing for 2x the timeout, then training for 3x the timeout with a step every
    tenth of it: the job's result comes back (before: a hang after 1 s)."""
    timeout_s = 1.0
    script = [(2 * timeout_s, "prepared", -1)]
    script += [(timeout_s / 10, "beat", k) for k in range(30)]
    script += [(timeout_s / 10, "result", {"losses": [1.0]})]
    pool, _ = _pool_driven_by(script)
    t0 = time.monotonic()
    res = pool.run({"kind": "sim-dp"}, ranks=(0,), timeout_s=timeout_s)
    assert res.payloads == {0: {"losses": [1.0]}}
    assert time.monotonic() - t0 > 3 * timeout_s  # the job really was longer than its timeout


@pytest.mark.parametrize("script, words", [
    ([(0.05, "prepared", -1)], "in its first training step"),
    ([(0.05, "prepared", -1), (0.05, "beat", 0), (0.05, "beat", 4)],
     "after at least 5 training step(s)"),
])
def test_silence_after_preparation_is_a_hang_within_the_timeout(script, words):
    """A worker that stops reporting steps is a hang once ``timeout_s`` passed since its last
    sign of progress (not sooner), and the message says how far it got."""
    timeout_s = 1.0
    pool, _ = _pool_driven_by(script)
    t0 = time.monotonic()
    with pytest.raises(WorkerHang) as e:
        pool.run({"kind": "sim-dp"}, ranks=(0,), timeout_s=timeout_s)
    waited = time.monotonic() - t0
    assert waited >= timeout_s + sum(w for w, _, _ in script) - 0.05
    assert waited < 60  # bounded: far below the start-up/preparation allowance
    assert f"sim-dp: no progress for {timeout_s:g} s {words}" == str(e.value)


def test_stale_messages_of_an_earlier_job_do_not_count_as_progress():
    pool, worker_end = _pool_driven_by([(0.05, "prepared", -1)])
    worker_end.send(("beat", 999, 0, 7))  # another job's: ignored
    with pytest.raises(WorkerHang, match="in its first training step"):
        pool.run({"kind": "sim-ddp"}, ranks=(0,), timeout_s=0.5)


@pytest.mark.slow
def test_a_real_sim_job_longer_than_its_timeout_finishes_when_it_progresses(tmp_path):
    """A real worker process and a healthy pair: 1,000 training steps take longer in all than
    the 1 s timeout (seconds on a quiet CPU, more under load), and each step milliseconds."""
    from gputopo.numerics import validate_options
    from gputopo.sim.description import load_description

    desc = load_description("pcie-4gpu")
    opts = validate_options(steps=1000)
    with WorkerPool("sim", threads=1, size=1, log_dir=str(tmp_path)) as pool:
        job = {"kind": "sim-dp", "pair": [2, 3], "description": desc, "opts": opts.to_json()}
        res = pool.run(job, ranks=(0,), timeout_s=1.0)
    assert len(res.payloads[0]["losses"]) == 1000
    assert res.wall_s > 1.0, "the job was not longer than its timeout: the test proves nothing"


def test_a_job_whose_workers_are_killed_by_another_thread_ends_at_once():
    """Ctrl-C during the sim's jobs: the main thread kills every pool (SimJobs.kill) while a
    job waits in its own thread. The job must end at once as a crash (nobody reads it), not
    wait out its timeout: the run's close waits for that thread (before: the command hung)."""
    from gputopo.numerics.worker import WorkerCrash

    pool, _ = _pool_driven_by([(0.05, "prepared", -1)])
    got = []

    def job():
        t0 = time.monotonic()
        try:
            pool.run({"kind": "sim-dp"}, ranks=(0,), timeout_s=60.0)
        except WorkerCrash as e:
            got.append((time.monotonic() - t0, str(e)))

    t = threading.Thread(target=job, daemon=True)
    t.start()
    time.sleep(0.5)
    pool.kill()
    t.join(30)
    assert not t.is_alive() and len(got) == 1
    assert got[0][0] < 10 and got[0][1] == "sim-dp: its worker processes were ended"
