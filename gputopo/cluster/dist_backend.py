"""The real cluster backend: this rank's part of `gputopo cluster` over torch.distributed.

Two kinds of process groups: the *data* groups (NCCL on ``--fabric cuda``, gloo on ``--fabric
cpu``) carry the measured all_reduces; the *control* group (always gloo) carries the gathered
facts, the results and the liveness barrier, so a stuck NCCL communicator never hides who is lost.

A data group is made by its members only, on a store prefix of gputopo's own keyed by round,
kind and ranks (:func:`group_key`), so its name never depends on what else a rank made or failed
to make. Its members first meet at a gate in the store: a member that cannot take part (its
buffer does not fit, a signal stopped it) says so there, and its peers stop waiting at once and
record whose failure they waited on, never an error of their own. Every wait of a round (the
gate, the collective, the per-sample start barrier) is polled from Python against the round's
deadline (``--timeout`` after it started), the group's failure key and the stop flag; on cuda
each sample is timed by the bench's routine (gputopo.bench.gpu_sample.time_sample: hold,
1-element all_reduce on the stream, start event, the all_reduce and its non-blocking ``wait()``,
end event, polled here with ``query()`` against the round's deadline), and a group that passes
the deadline is aborted (:data:`RANK_ENV`). A round's data groups are shut down once every rank reported it
(:meth:`DistBackend._shutdown_round`); the one-GPU-per-node measure keeps its own record.
The calls that may block inside torch or NCCL with no bound of their own (the NCCL
communicator's set-up, made eagerly, and the warm-up's first all_reduce calls, where NCCL
connects) run in a thread polled the same way (:meth:`DistBackend._bounded`): a set-up that
never returns is recorded (``setup_timed_out``) and its thread left to the process's end.

After every intra-node or inter-node round each rank appends its own record to its JSONL in the
run folder, then all ranks pass ``monitored_barrier`` on the control group (bounded by
``--timeout`` plus :data:`BARRIER_MARGIN_S`: every live rank's round ends within ``--timeout``).
Rank 0 learns there which ranks did not arrive; a heartbeat counter each rank's thread bumps in
the launcher's TCPStore tells a hung rank (still counting) from a gone one (crash, killed). The
records are then gathered on every rank, so every rank plans the same next round. SIGTERM and
SIGINT during the rounds set a flag (:meth:`DistBackend.stop_signals`): the rank stops
measuring, tells its group, and the round's gather tells everyone, so the writer names the
stopped rank. When rank 0 itself is lost, :meth:`DistBackend.lost_with_rank0` tells the others
so and the lowest live rank writes (cluster.survivor). Times: CUDA events on ``cuda``,
``perf_counter`` on ``cpu`` (``wall``); a group's time is the median over samples of its
slowest rank's (:func:`group_time`). torch is imported here and only here in the cluster package.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import signal
import statistics
import threading
import time
from datetime import timedelta
from typing import Any, Callable, Dict, Iterator, List, MutableMapping, Optional, Sequence, Union

from gputopo.bench.fabrics.fabric import Fabric, fabric_named
from gputopo.bench.gpu_sample import time_sample
from gputopo.bench.worker_env import apply as apply_env
from gputopo.bench.worker_env import worker_env
from gputopo.console import clip
from gputopo.errors import EXIT_USAGE, GputopoError, UsageError
from gputopo.model.cluster import Group, GroupResult, LostRank
from gputopo.model.collectives import collective
from gputopo.runfolder.cluster import rank_log_path
from gputopo.runfolder.writer import append_jsonl

from .launch import LaunchEnv
from .rank_device import choose_device, free_bytes, message_fit_error, shared_gpus
from .rounds import RanksLost
from .survivor import SETTLE_S, mark_alive, marked_alive, wait_folder_written

HEARTBEAT_S = 1.0
DONE_KEY = "gputopo/written"
#: Why rank 0 is named lost when the store (a launcher's, or rank 0's own) cannot be reached.
STORE_GONE = "the launcher's store is gone with it"
_RANKS_RE = re.compile(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier")
#: Seconds the liveness barrier waits beyond --timeout: each live rank's round ends within
#: --timeout of its start; this covers the ranks' start skew and recording an abandoned group.
BARRIER_MARGIN_S = 10.0
#: Seconds one wait on the group's gate in the store lasts before the clock, the stop flag and
#: the store are looked at again.
GATE_SLICE_S = 0.5
#: Seconds a gloo work's wait() blocks before this rank looks again (it returns the moment the
#: work completes, so the wall time is not rounded to it).
WAIT_SLICE_S = 0.1
#: Seconds between looks at the group's failure key while a collective has not finished.
FAIL_CHECK_S = 0.5
#: Seconds between CUDA event queries: only how soon the CPU notices; the time is the GPU's.
CUDA_POLL_S = 0.0002
#: Seconds the spin kernel before each sample's gate holds the stream at first (the host's
#: enqueue of the gate, the start event and the all_reduce fits in it), doubled after a sample
#: it proved too short for, up to :data:`HOLD_MAX_S`.
HOLD_S = 0.001
HOLD_MAX_S = 0.064
#: Seconds between looks at a set-up step that runs in a thread of its own (the NCCL
#: communicator's creation, the host side of a group's first all_reduces): only how soon the
#: rank notices that it returned; none of it is timed.
SETUP_POLL_S = 0.01
#: Seconds ``abort()`` of a group may take before this rank goes on without it (it runs in a
#: thread of its own: an abort that itself blocks must not hold the rank past the barrier).
ABORT_WAIT_S = 3.0

#: What a cuda-fabric rank sets besides the bench workers' timing variables
#: (gputopo.bench.worker_env.TIMING_ENV: blocking wait, launch blocking, NaN check, NCCL's
#: timing events), whatever the user's environment says: it decides whether a lost peer takes a
#: healthy rank down; run.json keeps all of it (``env_set``, recorded as the bench's
#: ``worker_env``).
RANK_ENV = {
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": (
        "0", "torch's watchdog would tear this rank down at a group's timeout, racing gputopo's "
             "own bounded poll, which aborts the group and names the lost rank instead (torch's "
             "note on aborting a group asks for it off)"),
}
#: The older spelling torch still reads (removed, as the bench removes its legacy names).
_RANK_ENV_LEGACY = {"NCCL_ASYNC_ERROR_HANDLING": "TORCH_NCCL_ASYNC_ERROR_HANDLING"}


def set_rank_env(fabric: Union[str, Fabric], environ: Optional[MutableMapping[str, str]] = None) -> Dict[str, Dict[str, Any]]:
    """Set the bench workers' timing variables and :data:`RANK_ENV` in this process (cuda
    fabric; the cpu fabric's gloo reads none of it), before its CUDA context exists (CUDA reads
    ``CUDA_LAUNCH_BLOCKING`` when it starts), and return what was set as the bench records it:
    ``{name: {"value" (None: removed), "user_value" (None: unset), "why"}}``, for run.json.
    With ``CUDA_LAUNCH_BLOCKING=1`` the timed ``pg.allreduce`` on the main thread blocked until
    the collective ended: a lost peer held a healthy rank outside every bounded poll, and rank 0
    named the healthy rank hung."""
    env = os.environ if environ is None else environ
    if not fabric_named(fabric).real_gpus:
        return {}
    _, record = worker_env(env, RANK_ENV, _RANK_ENV_LEGACY)
    apply_env(env, record)
    return record


class RendezvousError(GputopoError):
    """The ranks never met (exit 2: the launch's settings or network, not gputopo): one line
    naming the rendezvous address, so the user sees which MASTER_ADDR:MASTER_PORT was tried."""

    exit_code = EXIT_USAGE

    def __init__(self, env: LaunchEnv, timeout_s: float, cause: BaseException):
        why = next((ln.strip() for ln in str(cause).splitlines() if ln.strip()), type(cause).__name__)
        super().__init__(
            f"rank {env.rank} of {env.world_size} ({env.node_name}): the ranks did not all meet at the "
            f"rendezvous {env.master_addr}:{env.master_port} within --timeout {timeout_s:g} s ({clip(why, 160)}); "
            "check that every rank was started with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE "
            "and that rank 0's host accepts connections on that port")


class DistBackend:
    _fabric: Fabric

    @property
    def fabric(self) -> Fabric:
        """The fabric its ranks run on (bench/fabrics/fabric.py); set by name or as a Fabric."""
        return self._fabric

    @fabric.setter
    def fabric(self, value: Union[str, Fabric]) -> None:
        self._fabric = fabric_named(value)

    def __init__(self, env: LaunchEnv, fabric: Union[str, Fabric], *, size_bytes: int, samples: int,
                 timeout_s: float):
        # c10d logs each failed connect with a C++ stack (dozens of lines per retry): the one
        # line that matters is ours (a user's own TORCH_CPP_LOG_LEVEL is kept)
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
        import torch
        import torch.distributed as dist

        fabric = fabric_named(fabric)  # (bench/fabrics/fabric.py)
        self.torch, self.dist, self.env, self.fabric = torch, dist, env, fabric
        self.size_bytes, self.samples, self.timeout = size_bytes, samples, timedelta(seconds=timeout_s)
        self.timeout_s = float(timeout_s)
        self.rank, self.world = env.rank, env.world_size
        env.export()
        # before any process group exists: torch reads them when it makes one
        self.env_set = set_rank_env(fabric)
        self.gpu_bus_id: Optional[str] = None
        if fabric.real_gpus:
            # by what this task sees: all the node's GPUs (torchrun) or its own (Slurm binding)
            index, self.gpu_bus_id = choose_device(torch.cuda, env.local_rank, env.local_world_size,
                                                   f"rank {env.rank} ({env.node_name})")
            torch.cuda.set_device(index)
            self.device = torch.device("cuda", index)
        else:
            self.device = torch.device("cpu")
        why = message_fit_error(size_bytes, fabric, free_bytes(torch, fabric, self.device.index),
                                env.local_world_size)
        if why:  # before the rendezvous: every rank of the launch says it and leaves (exit 2)
            raise UsageError(f"rank {env.rank} ({env.node_name}): {why}")
        try:
            dist.init_process_group(backend=fabric.backend, init_method="env://",
                                    rank=env.rank, world_size=env.world_size, timeout=self.timeout)
            # the liveness barrier's bound: a rank that reached it at once (a bye, a group done
            # early) sends to rank 0 under the group's own timeout, and rank 0 arrives up to
            # --timeout later (a group that waited out its round): with --timeout alone, that
            # send timed out first, closed its connection, and rank 0 named every rank lost
            self.control = dist.new_group(backend="gloo",
                                          timeout=self.timeout + timedelta(seconds=BARRIER_MARGIN_S))
            # the data groups meet under gputopo/pg/... in the store torch's own groups use
            self._pg_store: Any = dist.distributed_c10d._get_default_store()
        except (RuntimeError, ValueError, OSError) as e:  # DistStoreError, DistNetworkError...
            raise RendezvousError(env, timeout_s, e) from None
        self._init_state()
        self._start_heartbeat()

    def _init_state(self) -> None:
        """What the rounds keep (also what a test's backend made without __init__ needs)."""
        self.run_dir: Optional[str] = None
        self.node_names: List[str] = []
        self.node_ranks: List[List[int]] = []
        self._store: Optional[Any] = None  # the launcher's TCPStore, once reached
        self._clock: Callable[[], float] = time.monotonic
        self._sleep: Callable[[float], None] = time.sleep
        self._deadline = 0.0
        self._hold_s = HOLD_S  # the spin before each sample's gate (cuda)
        #: the data groups still alive: a round's are shut down once every rank has reported
        #: it (:meth:`_shutdown_round`); those a lost rank may still be in are kept
        self._groups: List[Any] = []
        #: this round's groups: (key, group), in the order they were made
        self._round_groups: List[Any] = []
        #: keys of this rank's groups that it aborted or whose set-up it left running
        self._not_to_shut: set = set()
        #: data groups whose shutdown did not return within :data:`ABORT_WAIT_S`
        self.shutdown_stuck = 0
        #: the first SIGTERM/SIGINT received during the rounds (by name), or None
        self.stop_signal: Optional[str] = None
        #: ranks the last round's gather said were stopped by a signal
        self.stopped: List[LostRank] = []

    # ------------------------------------------------------------------ liveness
    def _start_heartbeat(self) -> None:
        """A thread bumps ``gputopo/hb/<rank>`` in the launcher's store every second."""
        try:
            self._store = self.dist.TCPStore(self.env.master_addr, self.env.master_port,
                                             is_master=False, timeout=self.timeout)
        except Exception:  # noqa: BLE001 - without it a lost rank is reported as hang-or-crash
            self._store = None
            return
        store, key = self._store, f"gputopo/hb/{self.rank}"

        def beat():
            while True:
                try:
                    store.add(key, 1)
                except Exception:  # noqa: BLE001 - the store is gone: the job is ending
                    if self.run_dir:  # say so where the writer looks without the store (_state)
                        mark_alive(self.run_dir, self.rank)
                    return
                time.sleep(HEARTBEAT_S)

        threading.Thread(target=beat, name="gputopo-heartbeat", daemon=True).start()

    def _state(self, ranks: List[int]) -> Dict[int, str]:
        """``hang`` for ranks whose heartbeat still counts, ``crash`` for the others."""
        if self._store is None:
            return {r: "hang" for r in ranks}
        try:
            before = {r: self._store.add(f"gputopo/hb/{r}", 0) for r in ranks}
            time.sleep(3 * HEARTBEAT_S)
            return {r: "hang" if self._store.add(f"gputopo/hb/{r}", 0) > before[r] else "crash"
                    for r in ranks}
        except Exception:  # noqa: BLE001 - the store is gone (its launcher ended)
            if not self.run_dir:
                return {r: "hang" for r in ranks}
            # every live rank's heartbeat thread says so in the run folder when the store goes
            time.sleep(SETTLE_S + HEARTBEAT_S)
            alive = set(marked_alive(self.run_dir))
            return {r: "hang" if r in alive else "crash" for r in ranks}

    def lost_with_rank0(self) -> Optional[List[LostRank]]:
        """After a loss, on a rank other than 0: None while rank 0's heartbeat still counts (it
        writes the folder), else the ranks whose heartbeat stopped, rank 0 first. Without the
        store (it may have died with rank 0) only rank 0 is named: this rank knows no more."""
        others = [r for r in range(self.world) if r != self.rank]
        why = "its heartbeat stopped (killed, or stopped by a signal)"
        try:
            if self._store is None:
                raise RuntimeError("no store")
            before = {r: self._store.add(f"gputopo/hb/{r}", 0) for r in others}
            time.sleep(3 * HEARTBEAT_S)
            stopped = [r for r in others if self._store.add(f"gputopo/hb/{r}", 0) <= before[r]]
        except Exception:  # noqa: BLE001 - the store is gone: its host (rank 0 or its launcher) ended
            stopped, why = [0], STORE_GONE
        if 0 not in stopped:
            return None
        return [LostRank(r, self.node_of(r), "crash", why) for r in sorted(stopped)]

    def written(self) -> None:
        """Rank 0: the run folder is complete (the other ranks may end now)."""
        if self._store is not None:
            try:
                self._store.set(DONE_KEY, "1")
            except Exception:  # noqa: BLE001 - the others then wait out their timeout
                pass

    def wait_written(self) -> None:
        """Other ranks: stay until the run folder is written (bounded by the timeout):
        a rank ending early makes its launcher stop the node's other ranks, rank 0 among them."""
        bound = self.timeout + timedelta(seconds=10)
        t0 = time.monotonic()
        if self._store is not None:
            try:
                self._store.wait([DONE_KEY], bound)
                return
            except Exception:  # noqa: BLE001 - the store is gone: watch the folder instead
                pass
        if self.run_dir is not None:  # the writer may be another rank (rank 0 lost): its run.json
            wait_folder_written(self.run_dir, bound.total_seconds() - (time.monotonic() - t0))

    def node_of(self, rank: int) -> str:
        for name, ranks in zip(self.node_names, self.node_ranks):
            if rank in ranks:
                return name
        return f"rank{rank}"

    @contextlib.contextmanager
    def stop_signals(self) -> Iterator[None]:
        """SIGTERM and SIGINT (main thread only) set :attr:`stop_signal` instead of ending the
        rank: it stops measuring at its next poll, tells its group, and the round's gather tells
        every rank, so whoever writes names it (a launcher that stops the job when one rank is
        lost sends them to the others: they live to write, within its grace)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def on_signal(signum, frame):
            if self.stop_signal is None:
                self.stop_signal = signal.Signals(signum).name

        old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    def _gone(self, ranks: List[int]) -> List[int]:
        """Those of ``ranks`` whose heartbeat stopped (without the store: that did not say they
        live in the run folder); none when nothing can tell."""
        return [r for r, state in self._state(ranks).items() if state == "crash"]

    def _monitored_barrier(self, phase: str) -> None:
        """``monitored_barrier`` in a thread, so that this rank still acts on a stop signal
        meanwhile (torch blocks in C++ until the barrier's timeout, and a launcher stopping the
        job SIGKILLs after its grace, torchrun 30 s): stopped, rank 0 names the ranks whose
        heartbeat stopped and leaves the barrier (RanksLost) to write; another rank leaves it
        when rank 0 is gone or has already written. Otherwise the barrier's own outcome."""
        box: Dict[str, BaseException] = {}

        def run() -> None:
            try:
                self.dist.monitored_barrier(group=self.control, wait_all_ranks=True,
                                            timeout=self.timeout + timedelta(seconds=BARRIER_MARGIN_S))
            except BaseException as e:  # noqa: BLE001 - handed to the main thread
                box["error"] = e

        t = threading.Thread(target=run, name="gputopo-barrier", daemon=True)
        t.start()
        while t.is_alive():
            t.join(GATE_SLICE_S)
            if not (self.stop_signal and t.is_alive()):
                continue
            if self.rank == 0:
                gone = self._gone([r for r in range(1, self.world)])
                if gone and t.is_alive():
                    if self.run_dir:
                        mark_alive(self.run_dir, 0)
                    raise RanksLost([LostRank(r, self.node_of(r), "crash",
                                              f"its heartbeat stopped while rank 0 ({self.stop_signal}: "
                                              "its launcher stopping the job) waited for it")
                                     for r in gone], phase)
            elif self._written_already() or (t.is_alive() and self._gone([0])):
                if self.run_dir:
                    mark_alive(self.run_dir, self.rank)
                raise RanksLost([], phase)
        if "error" in box:
            raise box["error"]

    def _written_already(self) -> bool:
        try:
            return self._store is not None and bool(self._store.check([DONE_KEY]))
        except Exception:  # noqa: BLE001
            return False

    def barrier(self, phase: str) -> None:
        """Every rank alive? RanksLost (rank 0: with the lost ranks named) when not. Bounded by
        --timeout plus :data:`BARRIER_MARGIN_S`: a rank whose group waited on a failed or lost
        peer until the round's deadline still arrives in time, and is not taken for hung."""
        try:
            self._monitored_barrier(phase)
        except RuntimeError as e:
            lost: List[LostRank] = []
            if self.run_dir:  # rank 0 the writer: no other rank takes it for lost
                mark_alive(self.run_dir, self.rank)
            if self.rank == 0:
                m = _RANKS_RE.search(str(e))
                # a peer whose connection broke fails the barrier at once, without the list
                ranks = ([int(x) for x in m.group(1).replace(" ", "").split(",") if x] if m
                         else [r for r in range(1, self.world)])
                states = self._state(ranks)
                if not m:  # keep only the ranks whose heartbeat stopped
                    ranks = [r for r in ranks if states[r] == "crash"] or ranks
                text = (str(e).splitlines() or [""])[0][:300]
                lost = [LostRank(r, self.node_of(r), states[r], text) for r in ranks]
            raise RanksLost(lost, phase) from None

    def gather(self, obj: Any, phase: str) -> List[Any]:
        out: List[Any] = [None] * self.world
        try:
            self.dist.all_gather_object(out, obj, group=self.control)
        except RuntimeError:
            if self.run_dir:
                mark_alive(self.run_dir, self.rank)
            raise RanksLost([], phase) from None
        return out

    # ------------------------------------------------------------------ setup
    def meet(self, facts: Dict[str, Any]) -> List[Dict[str, Any]]:
        """Every rank learns every rank's node name (the node order: by first rank); only rank 0
        receives the facts (fingerprint, topology), which only it judges and writes."""
        mine = {"rank": self.rank, "node": self.env.node_name, "local_rank": self.env.local_rank,
                "gpu_bus_id": self.gpu_bus_id}
        everyone = self.gather(mine, "start-up")
        shared = shared_gpus(everyone)  # every rank sees the same list: all stop alike
        if shared:
            raise UsageError(f"{shared[0]}: give each rank a GPU of its own (torchrun "
                             "--nproc-per-node = GPUs per node, or srun --gpus-per-task=1)")
        for rec in sorted(everyone, key=lambda r: r["rank"]):
            if rec["node"] not in self.node_names:
                self.node_names.append(rec["node"])
                self.node_ranks.append([])
            self.node_ranks[self.node_names.index(rec["node"])].append(rec["rank"])
        box: Optional[List[Any]] = [None] * self.world if self.rank == 0 else None
        try:
            self.dist.gather_object(facts, box, dst=0, group=self.control)
        except RuntimeError:
            raise RanksLost([], "start-up") from None
        for rec in everyone:
            rec["facts"] = box[rec["rank"]] if box is not None else {}
        return everyone

    def share_run_dir(self, run_dir: Optional[str]) -> str:
        box = [run_dir]
        self.dist.broadcast_object_list(box, src=0, group=self.control)
        shared = box[0]
        if shared is None:  # rank 0 always has its folder (cluster.job)
            raise RuntimeError("rank 0 shared no run folder")
        self.run_dir = shared
        return shared

    # ------------------------------------------------------------------ measuring
    def _remaining(self) -> float:
        return self._deadline - self._clock()

    def _check_stop(self) -> None:
        if self.stop_signal:
            raise _Abandoned("stopped", f"rank {self.rank} ({self.env.node_name}) was stopped by "
                                        f"{self.stop_signal}")

    def _publish_failure(self, key: str, text: str) -> None:
        """Tell the group's other members that this rank will not take part (they stop waiting
        for it and say whose failure they waited on)."""
        try:
            self._pg_store.set(f"{key}/failed", text)
            self._pg_store.set(f"{key}/gate", "failed")
        except Exception:  # noqa: BLE001 - the store is gone: the members wait out --timeout
            pass

    def _peer_failure(self, key: str) -> Optional[str]:
        """What a member of the group said when it failed, or None."""
        try:
            if self._pg_store.check([f"{key}/failed"]):
                return bytes(self._pg_store.get(f"{key}/failed")).decode("utf-8", "replace")
        except Exception:  # noqa: BLE001 - the store is gone: nothing known
            pass
        return None

    def _gate(self, key: str, size: int) -> None:
        """Say this member is ready; return once every member is. Raises :class:`_Abandoned`
        when a member failed first, the round's --timeout passed, a signal asked this rank to
        stop, or the store is gone; a member that cannot take part is known here, before
        anyone waits inside torch for it."""
        store = self._pg_store
        try:
            if int(store.add(f"{key}/ready", 1)) >= size:
                store.set(f"{key}/gate", "ready")
        except Exception as e:  # noqa: BLE001
            raise _Abandoned("no_store", f"the launcher's store could not be reached: {_line(e)}") from None
        while True:
            self._check_stop()
            left = self._remaining()
            if left <= 0:
                raise _Abandoned("timed_out", f"not every member of the group was ready within "
                                              f"--timeout {self.timeout_s:g} s")
            t0 = self._clock()
            try:
                store.wait([f"{key}/gate"], timedelta(seconds=min(GATE_SLICE_S, left)))
                break
            except Exception as e:  # noqa: BLE001 - DistStoreError: this slice timed out
                if not isinstance(e, getattr(self.dist, "DistStoreError", ())) \
                        and "timeout" not in str(e).lower():
                    raise _Abandoned("no_store", f"the launcher's store could not be reached: "
                                                 f"{_line(e)}") from None
                if self._clock() - t0 < GATE_SLICE_S / 10:
                    self._sleep(GATE_SLICE_S / 10)
        peer = self._peer_failure(key)
        if peer is not None:
            raise _Abandoned("peer_failed", peer)

    def _make_group(self, key: str, ranks: List[int]) -> Any:
        """The data group of ``ranks``: a backend on a store prefix of gputopo's own, keyed by
        round, kind and ranks, so every member names it alike whatever groups each made or
        failed to make before (torch names a locally synchronised group after how many groups
        this process already has, so one failure used to break every later group of its rank)."""
        dist = self.dist
        store = dist.PrefixStore(f"{key}/pg/", self._pg_store)
        me, size = ranks.index(self.rank), len(ranks)
        pg: Any
        if self.fabric.backend == "nccl":
            from torch._C._distributed_c10d import ProcessGroupNCCL

            opts = ProcessGroupNCCL.Options()
            opts.is_high_priority_stream = False
            # longer than the poll's bound: the poll aborts the group first (and torch's own
            # handling is off, RANK_ENV), so a lost peer never takes this rank down
            opts._timeout = timedelta(seconds=2 * self.timeout_s + BARRIER_MARGIN_S)
            opts.global_ranks_in_group = list(ranks)
            pg = ProcessGroupNCCL(store, me, size, opts)
        else:
            # past the round's deadline (by BARRIER_MARGIN_S / 2): the poll gives up on a member
            # that never came first, recording a timeout; gloo's own timeout, ending first, was
            # raised as this healthy rank's own error (and blamed it); this one only ends the
            # abandoned work, before the liveness barrier's bound
            pg = dist.ProcessGroupGloo(store, me, size, timedelta(
                seconds=max(1.0, self._remaining()) + BARRIER_MARGIN_S / 2))
        # kept until every member has reported the round: a group destroyed while a peer still
        # waits on it breaks the peer's wait
        self._groups.append(pg)
        self._round_groups.append((key, pg))
        return pg

    def _shutdown_round(self) -> None:
        """Free this round's data groups (NCCL: communicator, buffers, proxy threads, IB queue
        pairs, NVLS buffers), called once every rank has reported the round (the gather
        returned): no member waits on them any more. ``shutdown()`` (what
        ``destroy_process_group`` calls) runs in a thread bounded by :data:`ABORT_WAIT_S`, as
        the abort does; one that does not return is counted (``shutdown_stuck``) and left. A
        group this rank aborted (the abort freed it) or whose set-up thread it left running
        (shutting it down would race that thread) is only dropped. Kept after a round whose
        barrier or gather lost a rank (never called then): a lost rank may still be in them,
        and kept groups cost memory, not verdicts. Over a pairwise plan a leader used to hold
        2(N-1)+1 communicators; on tens of nodes later rounds failed with out-of-memory or
        ``ibv_reg_mr`` errors on healthy nodes."""
        done, self._round_groups = self._round_groups, []
        for key, pg in done:
            self._groups = [g for g in self._groups if g is not pg]
            if key in self._not_to_shut:
                continue
            t = threading.Thread(target=_quiet(pg.shutdown), name="gputopo-shutdown", daemon=True)
            t.start()
            t.join(ABORT_WAIT_S)
            if t.is_alive():
                self.shutdown_stuck += 1

    def _abort(self, pg: Any) -> None:
        """NCCL: abort the communicator (its kernels stop waiting for a lost peer, this GPU's
        stream moves on, a communicator still being made stops), waiting at most
        :data:`ABORT_WAIT_S` for it. Gloo: nothing; the abandoned work ends at the group's timeout."""
        if self.fabric.backend != "nccl":
            return
        self._not_to_shut.update(k for k, g in self._round_groups if g is pg)
        t = threading.Thread(target=_quiet(pg.abort), name="gputopo-abort", daemon=True)
        t.start()
        t.join(ABORT_WAIT_S)

    def _thread_context(self) -> Any:
        """What a helper thread enters to act on this rank's GPU as the main thread does: CUDA's
        current device and torch's current stream are per thread (read here, in the main thread:
        NCCL's stream then waits for the stream the main thread filled the buffers on)."""
        if not self.fabric.real_gpus:
            return contextlib.nullcontext()
        cuda, device = self.torch.cuda, self.device
        stream = cuda.current_stream(device)

        @contextlib.contextmanager
        def on_this_gpu() -> Iterator[None]:
            with cuda.device(device), cuda.stream(stream):
                yield

        return on_this_gpu()

    def _bounded(self, fn: Callable[[], Any], key: str, pg: Any, what: str) -> Any:
        """``fn()``'s result, ``fn`` run in a daemon thread while this thread polls it like a
        collective (:meth:`_settle`: the round's deadline, the stop flag, the group's failure
        key; the group aborted when one says to stop). For the calls that may block inside
        torch or NCCL without a bound of their own: the communicator's creation (the unique id
        through the store, ``ncclCommInitRank``: bootstrap, transports) and the host side of
        the group's first all_reduces (NCCL connects its transports on first use). A call that
        never returns raises :class:`_Abandoned` ``setup_timed_out``; its thread is left behind
        (a blocking ``ncclCommInitRank`` cannot be aborted), and the rank ends with ``os._exit``
        (cli/cluster.py), so nothing outlives the process."""
        box: Dict[str, Any] = {}
        done = threading.Event()
        context = self._thread_context()

        def run() -> None:
            try:
                with context:
                    box["value"] = fn()
            except BaseException as e:  # noqa: BLE001 - handed to the polling thread
                box["error"] = e
            finally:
                done.set()

        threading.Thread(target=run, name="gputopo-setup", daemon=True).start()
        try:
            # a short wait on the thread itself, then the poll's sleep (the round's clock)
            self._settle(functools.partial(done.wait, SETUP_POLL_S / 10), key, pg, what,
                         poll_s=SETUP_POLL_S)
        except _Abandoned as a:
            if not done.is_set():  # its thread may still be inside NCCL for this group
                self._not_to_shut.add(key)
            if a.field == "timed_out":
                raise _Abandoned("setup_timed_out", f"{what} did not return within --timeout "
                                                    f"{self.timeout_s:g} s") from None
            raise
        if "error" in box:
            raise box["error"]
        return box.get("value")

    def _connect(self, pg: Any, key: str) -> None:
        """NCCL: make the group's communicator now, bounded (:meth:`_bounded`), instead of
        lazily inside its first all_reduce on the main thread, where a set-up that never ends
        (an IB fabric that never answers, a bootstrap to an unreachable interface) held the rank
        and, with rank 0 among the members, the whole job. ``eager_connect_single_device`` is
        what ``init_process_group(device_id=...)`` calls for the default group. Gloo: its
        constructor connected already, bounded by the group's timeout."""
        if self.fabric.backend == "nccl":
            self._bounded(functools.partial(pg.eager_connect_single_device, self.device), key, pg,
                          "the NCCL communicator set-up")

    def _settle(self, done: Callable[[], bool], key: str, pg: Any, what: str,
                poll_s: Optional[float] = None) -> None:
        """Return once ``done()``. Until then, every poll looks at the round's deadline and the
        stop flag, and every :data:`FAIL_CHECK_S` at the group's failure key; when one says to
        stop waiting, the group is aborted and :class:`_Abandoned` raised. CUDA: ``done`` is an
        event's ``query()``, polled every :data:`CUDA_POLL_S` (the time itself is the GPU's);
        ``poll_s``: the sleep between polls whatever the fabric."""
        if poll_s is None and self.fabric.real_gpus:
            poll_s = CUDA_POLL_S
        next_check = self._clock() + FAIL_CHECK_S
        while not done():
            try:
                self._check_stop()
                now = self._clock()
                if now >= self._deadline:
                    raise _Abandoned("timed_out", f"{what} did not finish within --timeout "
                                                  f"{self.timeout_s:g} s")
                if now >= next_check:
                    next_check = now + FAIL_CHECK_S
                    peer = self._peer_failure(key)
                    if peer is not None:
                        raise _Abandoned("peer_failed", peer)
            except _Abandoned:
                self._abort(pg)
                raise
            if poll_s is not None:
                self._sleep(poll_s)

    def _buffer(self) -> Any:
        """The message: allocated before the group meets, so a rank whose memory is taken says
        so before its peers wait for it."""
        return self.torch.empty(self.size_bytes // 4, dtype=self.torch.float32, device=self.device)

    def _time_all_reduce(self, pg, key: str, x, n: int) -> Dict[str, Any]:
        """``time_s`` (this rank's median over the samples) and ``wrong``. CUDA, per sample
        (gputopo.bench.gpu_sample.time_sample, the routine the bench uses too): a spin kernel that covers
        the host's enqueue of what follows, the gate (a 1-element all_reduce of the group) on
        the stream, the start event, the timed all_reduce, the end event, and one bounded poll
        of the end event: every member's interval starts when the last member's GPU reached the
        gate, so no member times another's CPU lag or its own host launch. A sample whose start
        the GPU had passed before the all_reduce was enqueued (the hold too short for this host)
        is left out of the median (and, through ``late_samples``, on every member:
        :func:`group_time`) and the next hold doubled (:data:`HOLD_MAX_S` at most); when no
        sample was clean, no time (``launch_in_interval``: why). ``samples_s``: every sample."""
        torch = self.torch
        cuda = self.fabric.real_gpus
        one = torch.empty(1, dtype=torch.float32, device=self.device)  # the gate's message
        times: List[float] = []
        late: List[float] = []
        every: List[float] = []
        late_at: List[int] = []
        wrong = 0
        for k in range(self.samples + 1):  # the first is warm-up
            x.fill_(1.0)
            one.fill_(1.0)
            # the warm-up's calls are the group's first all_reduces of each size: NCCL may
            # connect its transports inside them, on this thread, without a bound of its own
            call = self._first_call if k == 0 else _call
            if cuda:
                gate = functools.partial(call, pg, key, [one], "the group's first all_reduce (1 element)")
                got = time_sample(torch, self.device, self._hold_s, gate,
                                  functools.partial(self._enqueue_all_reduce, call, pg, key, x),
                                  functools.partial(self._settle_end, key, pg))
                t, launch = got.seconds, got.late
                if launch and k:
                    self._hold_s = min(2 * self._hold_s, HOLD_MAX_S)
            else:
                # start together: a one-element all_reduce every member must reach, polled
                gate_work = call(pg, key, [one], "the group's first all_reduce (1 element)")
                self._settle(functools.partial(_gloo_done, gate_work), key, pg, "the start barrier")
                t0 = time.perf_counter()
                work = call(pg, key, [x], "the group's first all_reduce of the message")
                self._settle(functools.partial(_gloo_done, work), key, pg, "the all_reduce")
                t = time.perf_counter() - t0
                launch = False
            wrong += int((x != float(n)).sum().item())
            if k:
                (late if launch else times).append(t)
                every.append(t)
                if launch:
                    late_at.append(k - 1)
        # every sample, and those whose hold ended before the launch: the group's time is taken
        # over the samples no member found late (a late member held the others' kernel too)
        out: Dict[str, Any] = {"wrong": wrong, "samples_s": every}
        if late_at:
            out["late_samples"] = late_at
        if times:
            out["time_s"] = statistics.median(times)
        else:
            out["launch_in_interval"] = (
                f"rank {self.rank} ({self.env.node_name}): in all {len(late)} sample(s) the GPU "
                "had started the interval before the host enqueued the all_reduce (its hold, up to "
                f"{self._hold_s * 1e3:g} ms, was too short for this host), so each time includes "
                "host launch time")
        if late and times:
            out["samples_left_out"] = len(late)
        return out

    @staticmethod
    def _enqueue_all_reduce(call: Callable[..., Any], pg: Any, key: str, x: Any, start: Any) -> None:
        """A sample's operation (:func:`time_sample`): the timed all_reduce, then ``wait()``:
        with blocking wait off it only makes the current stream wait for the work's end on
        NCCL's stream (WorkNCCL::synchronizeStream) and returns, so the end event the routine
        records next is behind the collective on the timed stream."""
        call(pg, key, [x], "the group's first all_reduce of the message").wait()

    def _settle_end(self, key: str, pg: Any, end: Any) -> None:
        """A sample's bounded wait for its end event (:func:`time_sample`): :meth:`_settle`
        polling ``end.query``."""
        self._settle(end.query, key, pg, "the all_reduce")

    def _first_call(self, pg: Any, key: str, tensors: List[Any], what: str) -> Any:
        """``pg.allreduce(tensors)`` bounded by the round's deadline (:meth:`_bounded`): the
        warm-up's calls, where NCCL connects (its timed samples call it directly: no thread
        hand-off between their start and end events)."""
        return self._bounded(functools.partial(pg.allreduce, tensors), key, pg, what)

    def _measure(self, key: str, ranks: List[int], rec: Dict[str, Any], prefix: str = "") -> None:
        """One group's all_reduce on this rank, into ``rec``: ``time_s`` and ``wrong``, or why
        not, as facts of this rank: ``error`` (its own: it failed, and told its peers; with
        ``after_peer`` when a member had already said it failed), ``peer_failed`` (a member
        failed: this rank waited for it), ``timed_out``, ``stopped`` or ``no_store``."""
        try:
            self._check_stop()
            x = self._buffer()
            self._gate(key, len(ranks))
            pg = self._make_group(key, ranks)
            self._connect(pg, key)
            rec.update(self._time_all_reduce(pg, key, x, len(ranks)))
        except _Abandoned as a:
            rec[a.field] = prefix + a.text
            if a.field == "stopped":
                self._publish_failure(key, prefix + a.text)
        except Exception as e:  # noqa: BLE001 - recorded as a fact; the barrier names a lost rank
            text = f"{type(e).__name__}: {_line(e)}"
            rec["error"] = prefix + text
            peer = self._peer_failure(key)
            if peer is not None:  # a member had failed first: this error may be its echo
                rec["after_peer"] = prefix + peer
            else:
                self._publish_failure(key, f"rank {self.rank} ({self.env.node_name}): {prefix}{text}")

    def _run_groups(self, groups: List[Group], index: int, phase: str,
                    one_gpu: bool = False) -> List[GroupResult]:
        rank_lists = [sorted(r for k in g for r in self.node_ranks[k]) for g in groups]
        my_group = next((g for g, ranks in zip(groups, rank_lists) if self.rank in ranks), None)
        local: Dict[str, Any] = {"round": index, "phase": phase, "rank": self.rank,
                                 "node": self.env.node_name, "group": list(my_group or [])}
        # every wait of this round ends by this deadline, so every live rank reaches the
        # barrier within --timeout of the round's start (BARRIER_MARGIN_S for the rest)
        self._deadline = self._clock() + self.timeout_s
        ranks = rank_lists[groups.index(my_group)] if my_group is not None else []
        if len(ranks) > 1:
            self._measure(group_key(index, "all", ranks), ranks, local)
        elif ranks:
            local["na"] = "one rank"
        if one_gpu and my_group is not None:
            self._one_gpu(index, my_group, local)
        if self.stop_signal:
            local["stopped_by"] = self.stop_signal
        append_jsonl(rank_log_path(self.run_dir, self.env.node_name, self.rank),
                     {**local, "size_bytes": self.size_bytes, "timing": self._timing,
                      # this round's and any kept from a round a shutdown did not return in
                      "data_groups_alive": len(self._groups), "shutdown_stuck": self.shutdown_stuck})
        self.barrier(phase)
        everyone = self.gather(local, phase)
        self._shutdown_round()  # every rank reported: nobody waits on this round's groups
        self.stopped = [LostRank(r["rank"], r["node"], "stopped", f"stopped by {r['stopped_by']}")
                        for r in everyone if isinstance(r, dict) and r.get("stopped_by")]
        return [self._combine(g, ranks, everyone) for g, ranks in zip(groups, rank_lists)]

    def _one_gpu(self, index: int, my_group: Group, local: Dict[str, Any]) -> None:
        """The group's all_reduce again between one GPU of each node (each node's first rank),
        under what is left of the round's deadline, recorded in ``local["one_gpu"]`` (the keys
        :meth:`_measure` gives), never in the all-GPU fields. A leader whose all-GPU all_reduce
        did not finish tells the others and skips it."""
        leaders = [self.node_ranks[k][0] for k in my_group]
        if self.rank not in leaders or len(leaders) < 2:
            return
        key = group_key(index, "one-gpu", leaders)
        why = next((local[k] for k in ("error", *NOT_MEASURED) if local.get(k)), None)
        if why is not None:
            self._publish_failure(key, f"rank {self.rank} ({self.env.node_name}) measured no one-GPU "
                                       f"all_reduce: its all-GPU one did not finish ({why})")
            return
        sub: Dict[str, Any] = {}
        self._measure(key, leaders, sub)
        # its own record: the all-GPU figure stands whatever happens here (a leaders-only set-up
        # that outlasts what is left of --timeout, a leader's own error); the two used to share
        # fields, and such a leader turned a measured group into a rank error or a slow finding
        local["one_gpu"] = sub

    @property
    def _timing(self) -> str:
        return self.fabric.timing  # cuda-events (cuda), wall (cpu)

    def _combine(self, group: Group, ranks: List[int], everyone: List[Dict[str, Any]]) -> GroupResult:
        """The group's result from its members' records: a member's own error is that rank's
        (``rank_errors``), never its peers'; peers that waited on it measured nothing."""
        recs = [everyone[r] for r in ranks]
        res = GroupResult(nodes=tuple(group), size_bytes=self.size_bytes, timing=self._timing,
                          gpus=len(ranks))
        if len(ranks) < 2:
            res.na = "one GPU: no all_reduce to measure"
            return res
        own = [r for r in recs if r.get("error")]
        if own:
            # blamed: the ranks that failed first; an error after a member's failure was known
            # (a connection it closed...) is said, not blamed
            first = [r for r in own if not r.get("after_peer")] or own
            res.rank_errors = [{"rank": r["rank"], "node": r["node"], "error": r["error"]} for r in first]
            res.error = "; ".join(f"rank {r['rank']} ({r['node']}): {r['error']}"
                                  + (" (after a member failed)" if r not in first else "")
                                  for r in (first + [r for r in own if r not in first])[:3])
            return res
        stuck = [r for r in recs if r.get("setup_timed_out")]
        if stuck and len(stuck) < len(recs):
            # these members' own set-up (the NCCL communicator, a first all_reduce's host call)
            # never returned while the others' did: theirs, as an error of their own; the
            # others only waited for them (a set-up stuck on every member blames nobody: below)
            res.rank_errors = [{"rank": r["rank"], "node": r["node"],
                                "error": f"{r['setup_timed_out']} (the group's other members' did)"}
                               for r in stuck]
            res.error = "; ".join(f"rank {e['rank']} ({e['node']}): {e['error']}" for e in res.rank_errors[:3])
            return res
        late = stuck or [r for r in recs if r.get("timed_out")]
        if late:  # nobody failed, yet the collective did not finish: the group's own trouble
            what = late[0].get("setup_timed_out") or late[0]["timed_out"]
            res.error = (f"rank(s) {', '.join(str(r['rank']) for r in late[:8])} "
                         f"({', '.join(sorted({str(r['node']) for r in late}))}): {what}")
            return res
        waited = next((r[k] for r in recs for k in NOT_MEASURED if r.get(k)), None)
        if waited is not None:
            res.na = f"not measured: {waited}"
            return res
        wrong = sum(r.get("wrong", 0) for r in recs)
        if wrong:
            res.wrong = wrong
            res.error = f"{wrong} wrong elements after all_reduce"
        untimed = next((r["launch_in_interval"] for r in recs if r.get("launch_in_interval")), None)
        if untimed is not None:
            res.na = f"not timed: {untimed}"
        elif any(r.get("time_s") is None for r in recs):
            res.na = "not measured: a member recorded no time"
        if res.na:
            self._combine_one_gpu(res, group, everyone)
            return res
        t = group_time(recs)
        if t is None:
            res.na = ("not timed: in every sample some member's hold ended before it enqueued the "
                      "all_reduce, so each sample includes host launch time")
            self._combine_one_gpu(res, group, everyone)
            return res
        res.time_s = t
        all_reduce = collective("all_reduce")
        res.busbw_gbps = self.size_bytes * all_reduce.busbw_factor(len(ranks)) / t / 1e9
        self._combine_one_gpu(res, group, everyone)
        return res

    def _combine_one_gpu(self, res: GroupResult, group: Group, everyone: List[Dict[str, Any]]) -> None:
        """The one-GPU-per-node figure of an inter-node group from its leaders' ``one_gpu``
        records, into ``res.one_gpu_busbw_gbps`` or, when there is none, why
        (``res.one_gpu_na``); wrong sums there are the group's (``res.wrong``), as corrupt as
        the all-GPU one's. Nothing here touches the all-GPU figure or its error."""
        leaders = [self.node_ranks[k][0] for k in group]
        subs = [everyone[r].get("one_gpu") for r in leaders]
        if len(leaders) < 2 or all(s is None for s in subs):
            return  # an intra-node group, or none of its leaders measured (all-GPU failed)
        wrong = sum(int(s.get("wrong", 0)) for s in subs if s)
        if wrong:
            res.wrong += wrong
            res.error = "; ".join(filter(None, [res.error, f"{wrong} wrong elements after the "
                                                           "one-GPU-per-node all_reduce"]))
        why = min((_one_gpu_why(s, f"rank {r} ({self.node_of(r)})") for r, s in zip(leaders, subs)),
                  key=lambda x: x[0])[1]
        if why is not None:
            res.one_gpu_na = f"not measured: {why}"
            return
        t = group_time([s for s in subs if s])
        if t is None:
            res.one_gpu_na = ("not timed: in every sample some leader's hold ended before it "
                              "enqueued the all_reduce")
            return
        res.one_gpu_busbw_gbps = self.size_bytes * collective("all_reduce").busbw_factor(len(leaders)) / t / 1e9

    def measure_intra(self) -> List[GroupResult]:
        return self._run_groups([(k,) for k in range(len(self.node_names))], 0, "intra-node round")

    def measure_round(self, index: int, groups: List[Group]) -> List[GroupResult]:
        return self._run_groups(groups, index, f"inter-node round {index}", one_gpu=True)


#: A rank record's keys for an all_reduce it did not measure (besides ``error``, its own):
#: ``setup_timed_out``: a set-up step of its own (the NCCL communicator, a first all_reduce's
#: host call) did not return within --timeout.
NOT_MEASURED = ("setup_timed_out", "peer_failed", "timed_out", "stopped", "no_store")


def _call(pg: Any, key: str, tensors: List[Any], what: str) -> Any:
    """``pg.allreduce(tensors)`` on this thread (a timed sample's call)."""
    return pg.allreduce(tensors)


class _Abandoned(Exception):
    """This rank stopped waiting on its group: ``field`` is the rank record's key for why (one
    of :data:`NOT_MEASURED`), ``text`` the words."""

    def __init__(self, field: str, text: str):
        super().__init__(text)
        self.field, self.text = field, text


def group_time(recs: Sequence[Dict[str, Any]]) -> Optional[float]:
    """A group's seconds per all_reduce from its members' records: per sample the slowest
    member's time (the collective ends with it), the median over the samples no member found
    late (``late_samples``: its hold ended before its launch, which held every member's kernel);
    None when every sample was late somewhere. Records without per-sample times: the slowest
    member's median."""
    per: List[List[float]] = [r.get("samples_s") or [] for r in recs]
    if all(per) and len({len(p) for p in per}) == 1:
        late = {i for r in recs for i in r.get("late_samples", ())}
        clean = [max(p[i] for p in per) for i in range(len(per[0])) if i not in late]
        return statistics.median(clean) if clean else None
    return max(r["time_s"] for r in recs)


def _one_gpu_why(sub: Optional[Dict[str, Any]], who: str):
    """(rank, words) of why a leader's one-GPU record gives no time, the lowest rank the most
    telling: its own error first, then its set-up or collective timing out, a peer's failure it
    waited on, a stop, no time at all; (9, None) when it has a time."""
    if sub is None:
        return 5, f"{who} did not measure it: its all-GPU all_reduce did not finish"
    if sub.get("error"):
        return (1 if not sub.get("after_peer") else 4), f"{who}: {sub['error']}"
    for n, k in enumerate(NOT_MEASURED):  # setup_timed_out, peer_failed, timed_out, stopped, no_store
        if sub.get(k):
            return (2 if k.endswith("timed_out") else 6 + (n > 2)), f"{who}: {sub[k]}"
    if sub.get("time_s") is None:
        return 8, f"{who}: " + str(sub.get("launch_in_interval") or "recorded no time")
    return 9, None


def _quiet(fn: Callable[[], Any]) -> Callable[[], None]:
    """``fn`` for a helper thread: an error (a group already aborted or torn down) is dropped."""
    def run() -> None:
        try:
            fn()
        except Exception:  # noqa: BLE001 - nothing to free, or nothing more this rank can do
            pass
    return run


def _line(e: BaseException) -> str:
    return (str(e).splitlines() or [""])[0][:200]


def _gloo_done(work: Any) -> bool:
    """Whether a gloo work has finished, waiting at most :data:`WAIT_SLICE_S` (the wait ends the
    moment it does); raises the work's own error."""
    try:
        work.wait(timedelta(seconds=WAIT_SLICE_S))
        return True
    except Exception:  # "Operation timed out!" while it is still running
        if work.is_completed():
            raise
        return False


def group_key(index: int, kind: str, ranks: Sequence[int]) -> str:
    """A data group's store prefix: the round, what it measures and its ranks, the same on every
    member whatever it did before."""
    digest = hashlib.sha1(",".join(map(str, ranks)).encode(), usedforsecurity=False).hexdigest()[:16]
    return f"gputopo/pg/{index}/{kind}/{len(ranks)}-{digest}"
