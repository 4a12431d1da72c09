"""A long-lived worker process: started once per run, fed steps over a pipe.

Protocol (tuples over a multiprocessing Connection):

    parent -> worker   ("step", step_message) | ("exit",)
    worker -> parent   ("ready", {"pid", "store_port"}) | ("fatal", reason, traceback)
                       ("measurement", step_id, Measurement.to_json())   # rank 0
                       ("beat", step_id)      # other ranks; and any rank after a sample
                       ("done", step_id) | ("error", step_id, traceback)

The worker's stdout/stderr go to a log file in the run folder (the runner quotes its tail in a
``crash`` finding). It ignores SIGINT (the parent decides what Ctrl-C does), exits when the
parent process disappears, and leaves with ``os._exit`` so interpreter teardown (gloo's
occasional SIGABRT at exit, docs/architecture.md) can never turn delivered results into a failure.
Each worker hosts a TCPStore server; a step spanning two workers builds its process group on
rank 0's store under a fresh prefix, and destroys it at the end of the step.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
import traceback
from typing import Any, Dict, Tuple

from gputopo.workers.processes import enter_worker, leave, libc

from .fabrics.fabric import fabric_named

#: Reason prefix of a "fatal" message meaning CUDA is not usable (the CLI maps it to exit 3).
NO_CUDA = "no-cuda"
#: Least seconds between two "beat" messages sent within a measurement (after a sample).
BEAT_S = 0.2
#: Longest a case's preparation beats for (seconds 256 MiB takes: seconds; a preparation stuck
#: on a wedged GPU must still end as a hang, this much later).
PREPARE_BEATS_MAX_S = 300.0


def bench_worker_main(conn, key: str, config: dict, log_path: str) -> None:
    """Entry point of a worker process (multiprocessing target)."""
    enter_worker(log_path, config["parent_pid"], config.get("env") or {})
    if fabric_named(config["fabric"]).real_gpus:
        os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        # NCCL's INFO log of this process, to record its transport per pair (nccl_transport.py)
        from .nccl_transport import nccl_debug_env

        os.environ.update(nccl_debug_env(os.environ, log_path))
        config = dict(config, worker_log=log_path)
    print(f"gputopo worker {key} pid {os.getpid()} fabric {config['fabric']}", flush=True)
    try:
        state = WorkerState(config)
    except _NoCuda as e:
        conn.send(("fatal", NO_CUDA, str(e)))
        leave(0)
    except Exception:
        tb = traceback.format_exc()
        print(tb, file=sys.stderr, flush=True)
        conn.send(("fatal", "start", tb))
        leave(1)
    conn.send(("ready", {"pid": os.getpid(), "store_port": state.store_port}))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            break
        if not msg or msg[0] == "exit":
            break
        if msg[0] != "step":
            continue
        step = msg[1]
        try:
            state.run_step(step, conn)
            conn.send(("done", step["id"]))
        except Exception:
            tb = traceback.format_exc()
            if state.nccl_tail is not None:  # NCCL's WARN lines go to its own file: show them here
                tb += state.nccl_tail.warnings()
            print(tb, file=sys.stderr, flush=True)
            try:
                conn.send(("error", step["id"], tb))
            except (OSError, EOFError):
                break
    try:
        state.close()
    finally:
        leave(0)


class _NoCuda(Exception):
    pass


def _reuse_freed_memory() -> None:
    """Let glibc keep freed buffers for reuse instead of returning them to the kernel.

    Why: CPU tensors (the sim and cpu fabrics' "GPU memory") of a MiB or more are mmap'ed by
    malloc and unmapped when freed, so every measurement's fresh buffers were page-faulted in
    and zeroed by the kernel again: a third of a sim worker's CPU time was system time. Reused
    blocks hold old data, which is safe here: outputs are poisoned before every sample and
    before they are released (spec.py). The worker's memory stays at its peak, which the run's
    sizes bound (check_sizes_fit). No effect where mallopt is not glibc's.
    """
    try:
        c = libc()
        m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's malloc.h
        c.mallopt(m_mmap_threshold, 1 << 30)
        c.mallopt(m_trim_threshold, 1 << 30)
    except (OSError, AttributeError):
        pass


class _Beater:
    """One thread, started once per worker, that sends a beat every BEAT_S while armed.

    Why not a thread per case: a sim worker prepares about a thousand cases per run, and
    starting and joining a thread for each cost more than preparing most of them. The beat is
    sent with the lock held, so once :meth:`disarm` returns no beat can follow: only one
    thread ever sends on the pipe at a time."""

    def __init__(self):
        self._cv = threading.Condition()
        self._send = None
        self._until = 0.0
        threading.Thread(target=self._loop, name="gputopo-setup-beat", daemon=True).start()

    def _loop(self) -> None:
        with self._cv:
            while True:
                if self._send is None:
                    self._cv.wait()
                    continue
                self._cv.wait(BEAT_S)
                if self._send is None:
                    continue
                if time.monotonic() >= self._until:
                    self._send = None  # PREPARE_BEATS_MAX_S reached: silence (a wedged GPU)
                    continue
                try:
                    self._send()
                except (OSError, ValueError):
                    self._send = None

    def arm(self, send) -> None:
        with self._cv:
            self._send, self._until = send, time.monotonic() + PREPARE_BEATS_MAX_S
            self._cv.notify()

    def disarm(self) -> None:
        with self._cv:
            self._send = None
            self._cv.notify()


_beater: list = []


def _beating(prepare, send):
    """``prepare`` that sends a beat every BEAT_S while it runs. Preparing a case allocates and
    fills this process's own buffers (no transfer: nothing that can hang on a link), and takes
    seconds at 256 MiB on a busy CPU: without beats a short ``--timeout`` turned a healthy
    pair's set-up into a ``hang``. The beats stop before it returns, and after
    PREPARE_BEATS_MAX_S at most (_Beater)."""

    def run():
        if not _beater:
            _beater.append(_Beater())
        beater = _beater[0]
        beater.arm(send)
        try:
            return prepare()
        finally:
            beater.disarm()

    return run


class WorkerState:
    """What a worker keeps between steps: torch, its store server, the sim model."""

    def __init__(self, config: dict):
        import torch

        self.config = config
        self.fabric = fabric_named(config["fabric"])  # the worker configuration carries its name
        torch.set_num_threads(max(1, int(config.get("threads") or 1)))
        self.store = None
        self.store_port = None
        self._clients: Dict[Tuple[str, int], Any] = {}  # (host, port) -> TCPStore
        self.cuda_index = {}
        self.model = None
        self.nccl_tail = None
        if self.fabric.real_gpus:
            from .nccl_transport import NcclLogTail

            self.nccl_tail = NcclLogTail.for_worker(os.environ, config.get("worker_log", ""))
            if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
                raise _NoCuda("torch sees no usable CUDA device "
                              f"(torch {torch.__version__}, CUDA build {torch.version.cuda})")
            from .fabrics.cuda import resolve_cuda_indices

            self.cuda_index = resolve_cuda_indices(
                {int(k): v for k, v in (config.get("gpus") or {}).items()})
        if self.fabric.memory == "host":
            _reuse_freed_memory()
        if self.fabric.simulated:
            from .fabrics.sim import SimModel

            self.model = SimModel(config["description"], os.environ)
        if self.fabric.needs_store:
            import torch.distributed as dist

            self.store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
            self.store_port = self.store.port

    # ------------------------------------------------------------------ groups
    def _client(self, host: str, port: int):
        import datetime

        import torch.distributed as dist

        if (host, port) not in self._clients:
            self._clients[(host, port)] = dist.TCPStore(
                host, port, is_master=False,
                timeout=datetime.timedelta(seconds=float(self.config.get("pg_timeout_s", 300))))
        return self._clients[(host, port)]

    def _init_group(self, step: dict) -> None:
        import datetime

        import torch.distributed as dist

        st = step["store"]
        store = self.store if step["rank"] == 0 else self._client(st["host"], st["port"])
        if store is None:  # rank 0's own store exists on the cpu and cuda fabrics only
            raise RuntimeError(f"no TCP store for a process group on the {self.fabric} fabric")
        backend = self.fabric.backend
        if backend is None:
            raise RuntimeError(f"the {self.fabric} fabric has no process-group backend")
        if self.fabric.real_gpus:
            import torch

            from .fabrics.cuda import device_of

            torch.cuda.set_device(device_of(self.cuda_index, step["local_gpus"][0]))
        dist.init_process_group(
            backend, store=dist.PrefixStore(st["prefix"], store), rank=step["rank"],
            world_size=step["world"],
            timeout=datetime.timedelta(seconds=float(self.config.get("pg_timeout_s", 300))))

    def _ops(self, step: dict):
        local, gpus, world = step["local_gpus"], step["gpus"], step["world"]
        return self.fabric.ops(local, gpus, world, self)

    # ------------------------------------------------------------------ steps
    def run_step(self, step: dict, conn) -> None:
        from .plan import Case
        from .spec import measure
        from .suites import build_spec

        # A process group for a step of several ranks, and for collectives of one rank too on
        # the fabrics that have one (tools/gpu_check.py's one-rank NCCL all_reduce): without it
        # torch.distributed has no group to run them on. shared: each worker its own cases.
        grouped = not step.get("shared") and (step["world"] > 1 or (
            self.fabric.backend is not None and step.get("group") == "collectives"))
        if grouped and self.nccl_tail is not None:
            self.nccl_tail.mark()
        if grouped:
            self._init_group(step)
        ops = None
        last = [time.monotonic()]

        def beat() -> None:  # progress within a measurement (one per sample, at most 5 a second)
            now = time.monotonic()
            if now - last[0] >= BEAT_S:
                last[0] = now
                conn.send(("beat", step["id"]))

        try:
            ops = self._ops(step)
            for cj in step["cases"]:
                case = Case.from_json(cj)
                spec = build_spec(ops, case, latency_repeat=step["latency_repeat"])
                spec.prepare = _beating(spec.prepare, lambda: conn.send(("beat", step["id"])))
                m = measure(spec, ops, warmup=step["warmup"], samples=step["samples"],
                            link_class=step.get("link_class"), beat=beat)
                del spec
                last[0] = time.monotonic()
                if self.nccl_tail is not None and case.test.startswith("collective.") and step["rank"] == 0:
                    from .nccl_transport import step_transport

                    m.extra["nccl_transport"] = step_transport(self.nccl_tail, step["gpus"])
                if step["rank"] == 0 or step.get("shared"):
                    conn.send(("measurement", step["id"], m.to_json()))
                else:
                    conn.send(("beat", step["id"]))
        finally:
            if ops is not None:
                ops.close()
            del ops
            if grouped:
                # Drop buffers (and any module) before the group goes (docs/architecture.md). Only here:
                # a full collection costs ~0.1 s with torch loaded.
                gc.collect()
                import torch.distributed as dist

                if dist.is_initialized():
                    dist.destroy_process_group()

    def close(self) -> None:
        pass
