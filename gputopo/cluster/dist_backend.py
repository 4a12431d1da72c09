"""The real cluster backend: this rank's part of `gputopo cluster` over torch.distributed.

Two process groups: the *data* group (NCCL on ``--fabric cuda``, gloo on ``--fabric cpu``)
carries the measured all_reduces; the *control* group (always gloo) carries the gathered facts,
the results and the liveness barrier, so a stuck NCCL communicator never hides who is lost.

After every intra-node or inter-node round each rank appends its own result to its JSONL in the
run folder, then all ranks pass ``monitored_barrier`` on the control group (bounded by
``--timeout``). Rank 0 learns there which ranks did not arrive; a heartbeat counter each rank's
thread bumps in the launcher's TCPStore tells a hung rank (still counting) from a gone one
(crash, killed). The results are then gathered on every rank, so every rank plans the same next
round. When rank 0 itself is lost, :meth:`DistBackend.lost_with_rank0` tells the others so and
the lowest live rank writes (cluster.survivor). Times: CUDA events on ``cuda``, ``perf_counter`` on ``cpu`` (``wall``); a group's time is
its slowest rank's median. torch is imported here and only here in the cluster package.
"""

from __future__ import annotations

import os
import re
import statistics
import threading
import time
from datetime import timedelta
from typing import Any, Dict, List, Optional

from gputopo.bench.runlog import append_jsonl
from gputopo.console import clip
from gputopo.errors import EXIT_USAGE, GputopoError, UsageError

from .launch import LaunchEnv
from .patterns import Group
from .rank_device import choose_device, free_bytes, message_fit_error, shared_gpus
from .rounds import GroupResult, LostRank, RanksLost
from .run_folder import rank_log_path
from .survivor import mark_alive, wait_folder_written

HEARTBEAT_S = 1.0
DONE_KEY = "gputopo/written"
#: Why rank 0 is named lost when the store (a launcher's, or rank 0's own) cannot be reached.
STORE_GONE = "the launcher's store is gone with it"
_RANKS_RE = re.compile(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier")


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
    def __init__(self, env: LaunchEnv, fabric: str, *, size_bytes: int, samples: int,
                 timeout_s: float):
        # c10d logs each failed connect with a C++ stack (dozens of lines per retry): the one
        # line that matters is ours (a user's own TORCH_CPP_LOG_LEVEL is kept)
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
        import torch
        import torch.distributed as dist

        self.torch, self.dist, self.env, self.fabric = torch, dist, env, fabric
        self.size_bytes, self.samples, self.timeout = size_bytes, samples, timedelta(seconds=timeout_s)
        self.rank, self.world = env.rank, env.world_size
        env.export()
        self.gpu_bus_id: Optional[str] = None
        if fabric == "cuda":
            # by what this task sees: all the node's GPUs (torchrun) or its own (Slurm binding)
            index, self.gpu_bus_id = choose_device(torch.cuda, env.local_rank, env.local_world_size,
                                                   f"rank {env.rank} ({env.node_name})")
            # a collective with a lost peer raises after the timeout instead of NCCL's watchdog
            # tearing this (healthy) rank down, so the liveness barrier can name the lost one
            os.environ.setdefault("TORCH_NCCL_BLOCKING_WAIT", "1")
            torch.cuda.set_device(index)
            self.device = torch.device("cuda", index)
        else:
            self.device = torch.device("cpu")
        why = message_fit_error(size_bytes, fabric, free_bytes(torch, fabric, self.device.index),
                                env.local_world_size)
        if why:  # before the rendezvous: every rank of the launch says it and leaves (exit 2)
            raise UsageError(f"rank {env.rank} ({env.node_name}): {why}")
        try:
            dist.init_process_group(backend="nccl" if fabric == "cuda" else "gloo", init_method="env://",
                                    rank=env.rank, world_size=env.world_size, timeout=self.timeout)
            self.control = dist.new_group(backend="gloo", timeout=self.timeout)
        except (RuntimeError, ValueError, OSError) as e:  # DistStoreError, DistNetworkError...
            raise RendezvousError(env, timeout_s, e) from None
        self.run_dir: Optional[str] = None
        self.node_names: List[str] = []
        self.node_ranks: List[List[int]] = []
        self._store: Optional[Any] = None  # the launcher's TCPStore, once reached
        self._start_heartbeat()

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
        except Exception:  # noqa: BLE001
            return {r: "hang" for r in ranks}

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

    def barrier(self, phase: str) -> None:
        """Every rank alive? RanksLost (rank 0: with the lost ranks named) when not."""
        try:
            self.dist.monitored_barrier(group=self.control, timeout=self.timeout, wait_all_ranks=True)
        except RuntimeError as e:
            lost: List[LostRank] = []
            if self.rank == 0 and self.run_dir:
                mark_alive(self.run_dir, 0)  # the writer: no other rank takes rank 0 for lost
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
            if self.rank == 0 and self.run_dir:
                mark_alive(self.run_dir, 0)
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
    def _time_all_reduce(self, pg, n: int) -> Dict[str, Any]:
        torch, dist = self.torch, self.dist
        x = torch.empty(self.size_bytes // 4, dtype=torch.float32, device=self.device)
        cuda = self.fabric == "cuda"
        times, wrong = [], 0
        for k in range(self.samples + 1):  # the first is warm-up
            x.fill_(1.0)
            # start together: no rank's time includes waiting for another (on cuda, on this
            # rank's own GPU, not one guessed from its rank)
            dist.barrier(group=pg, **({"device_ids": [self.device.index]} if cuda else {}))
            if cuda:
                torch.cuda.synchronize(self.device)
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()  # NCCL's stream waits for this stream before the collective
                work = dist.all_reduce(x, group=pg, async_op=True)
                # wait() makes the current stream wait for the work's end event on NCCL's own
                # stream (WorkNCCL::synchronizeStream); with TORCH_NCCL_BLOCKING_WAIT it also
                # blocks here, raising when the timeout passes. Only after that is the end
                # event behind the collective: recorded before, it timed nothing.
                work.wait()
                end.record()
                end.synchronize()
                t = start.elapsed_time(end) / 1e3
            else:
                t0 = time.perf_counter()
                dist.all_reduce(x, group=pg)
                t = time.perf_counter() - t0
            wrong += int((x != float(n)).sum().item())
            if k:
                times.append(t)
        return {"time_s": statistics.median(times), "wrong": wrong}

    def _run_groups(self, groups: List[Group], index: int, phase: str,
                    one_gpu: bool = False) -> List[GroupResult]:
        rank_lists = [sorted(r for k in g for r in self.node_ranks[k]) for g in groups]
        my_group = next((g for g, ranks in zip(groups, rank_lists) if self.rank in ranks), None)
        local: Dict[str, Any] = {"round": index, "phase": phase, "rank": self.rank,
                                 "node": self.env.node_name, "group": list(my_group or [])}
        mine = None
        # every rank makes exactly one group per round (a rank left out: a group of itself), so
        # the count torch folds into a locally synchronised group's name stays equal on all ranks
        ranks = rank_lists[groups.index(my_group)] if my_group is not None else [self.rank]
        try:  # only the group's members make it; a lost member stops this (store timeout)
            mine = self._group(ranks)
        except Exception as e:  # noqa: BLE001 - recorded; the barrier below names who is lost
            local["error"] = f"making the group: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
        if mine is not None and my_group is not None:
            n = len(ranks)
            try:
                local.update(self._time_all_reduce(mine, n) if n > 1 else {"na": "one rank"})
            except Exception as e:  # noqa: BLE001 - a peer died or timed out: recorded, then the barrier names it
                local["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        if one_gpu and "error" not in local:
            self._one_gpu(my_group, local)
        append_jsonl(rank_log_path(self.run_dir, self.env.node_name, self.rank),
                     {**local, "size_bytes": self.size_bytes, "timing": self._timing})
        self.barrier(phase)
        everyone = self.gather(local, phase)
        return [self._combine(g, ranks, everyone) for g, ranks in zip(groups, rank_lists)]

    def _one_gpu(self, my_group: Optional[Group], local: Dict[str, Any]) -> None:
        """The group's all_reduce again between one GPU of each node (each node's first rank);
        the other ranks make a group of themselves, to keep the group count equal everywhere."""
        leaders = [self.node_ranks[k][0] for k in my_group] if my_group is not None else []
        ranks = leaders if self.rank in leaders and len(leaders) > 1 else [self.rank]
        try:
            pg = self._group(ranks)
            if len(ranks) > 1:
                local["one_gpu_time_s"] = self._time_all_reduce(pg, len(ranks))["time_s"]
        except Exception as e:  # noqa: BLE001 - recorded; the barrier names a lost rank
            local["error"] = f"one GPU per node: {type(e).__name__}: {str(e).splitlines()[0][:200]}"

    def _group(self, ranks: List[int]):
        """The data group of ``ranks``, made by its members only (``use_local_synchronization``:
        one group per rank and round, not every group of the round on every rank). torch names
        it by its ranks and the number of groups the rank already has."""
        return self.dist.new_group(ranks=list(ranks), timeout=self.timeout,
                                   use_local_synchronization=True,
                                   backend="nccl" if self.fabric == "cuda" else "gloo")

    @property
    def _timing(self) -> str:
        return "cuda-events" if self.fabric == "cuda" else "wall"

    def _combine(self, group: Group, ranks: List[int], everyone: List[Dict[str, Any]]) -> GroupResult:
        recs = [everyone[r] for r in ranks]
        res = GroupResult(nodes=tuple(group), size_bytes=self.size_bytes, timing=self._timing,
                          gpus=len(ranks))
        errors = [f"rank {r['rank']} ({r['node']}): {r['error']}" for r in recs if r.get("error")]
        if len(ranks) < 2:
            res.na = "one GPU: no all_reduce to measure"
        elif errors:
            res.error = "; ".join(errors[:3])
        else:
            t = max(r["time_s"] for r in recs)  # the collective ends with its slowest rank
            res.time_s = t
            res.busbw_gbps = self.size_bytes * 2 * (len(ranks) - 1) / len(ranks) / t / 1e9
            lead = [r["one_gpu_time_s"] for r in recs if r.get("one_gpu_time_s")]
            if len(lead) > 1:
                res.one_gpu_busbw_gbps = self.size_bytes * 2 * (len(lead) - 1) / len(lead) / max(lead) / 1e9
            wrong = sum(r.get("wrong", 0) for r in recs)
            if wrong:
                res.wrong = wrong
                res.error = f"{wrong} wrong elements after all_reduce"
        return res

    def measure_intra(self) -> List[GroupResult]:
        return self._run_groups([(k,) for k in range(len(self.node_names))], 0, "intra-node round")

    def measure_round(self, index: int, groups: List[Group]) -> List[GroupResult]:
        return self._run_groups(groups, index, f"inter-node round {index}", one_gpu=True)
