#!/usr/bin/env python3
"""The probes `tools/gpu_check.py` runs as its own steps, each in a process of its own:

    versions   the versions of everything the check depends on, as JSON (never fails on one
               missing package: that package's entry says why)
    nccl       one rank, one timed and verified all_reduce through the bench's real collective
               path: a bench worker process (gputopo.bench.worker.bench_worker_main) is started the
               way the runner starts it and handed one step of world size 1; its WorkerState
               builds the process group (NCCL on the cuda fabric, gloo on the cpu fabric) and
               measures `collective.all_reduce` with the same Spec and measure() as every bench
               collective. One rank moves no data between GPUs: the check is that NCCL starts,
               runs a kernel (the all_reduce is an AVG: NCCL's one-rank path runs none for a sum
               in place) and leaves the buffer bit-exact; no bandwidth is said.
    numerics   the numerics' one-GPU reference training (gputopo.numerics.worker_main._run_job,
               kind "reference", the job a numerics worker runs for GPU i of a pair) on the GPU,
               with its batch-halves-swapped re-run, and the same job on the CPU for reference

Each prints one JSON document on stdout (and writes it to --out when given) and exits 0 when
what it checked holds, 1 when not, 3 when it needs CUDA and there is none (nccl/numerics with
--device cuda). Run from the repository root with PYTHONPATH=. (the check does).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Dict, Optional

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

#: Exit code of a probe that needs CUDA where there is none (as gputopo's "no GPU").
NEEDS_CUDA = 3
#: The reduction the one-rank all_reduce asks NCCL for (gputopo/bench/fabrics/cpu.py
#: DistMixin.all_reduce_op): NCCL's one-rank path (src/enqueue.cc ncclLaunchOneRank) runs a
#: kernel only for a pre-multiplied sum, which AVG on float32 is (by 1/1: the input bit for bit);
#: a sum in place is no work at all.
ONE_RANK_NCCL_OP = "avg"
#: Why the one-rank all_reduce says no bandwidth.
NO_BANDWIDTH = "one rank moves no data between GPUs: its time is one GPU's own pass over the buffer, no link's"


def _emit(doc: Dict[str, Any], out: Optional[str]) -> None:
    text = json.dumps(doc, indent=1, sort_keys=True, default=str)
    if out:
        Path(out).write_text(text + "\n", encoding="utf-8")
    print(text, flush=True)


def _dist_version(name: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


# ----------------------------------------------------------------------------- versions


def versions() -> Dict[str, Any]:
    """What this machine runs, each entry a value or {"not_available": why}."""
    doc: Dict[str, Any] = {"python": sys.version.split()[0], "python_executable": sys.executable,
                           "platform": platform.platform(), "cpu_count": os.cpu_count()}
    for dist in ("torch", "nvidia-ml-py", "pandas", "matplotlib", "click", "rich",
                 "prometheus-client", "numpy", "pytest"):
        doc[f"pkg:{dist}"] = _dist_version(dist)
    try:
        import gputopo

        doc["gputopo"] = gputopo.__version__
    except Exception as e:  # noqa: BLE001 - one line in the record, not a failed step
        doc["gputopo"] = {"not_available": f"{type(e).__name__}: {e}"}
    doc["git_commit"] = _git_commit()
    doc.update(_torch_facts())
    doc.update(_nvml_facts())
    return doc


def _git_commit() -> Any:
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"not_available": f"git: {e}"}
    if out.returncode != 0:
        return {"not_available": "not a git checkout (" + (out.stderr.strip().splitlines() or ["?"])[-1] + ")"}
    return out.stdout.strip()


def _torch_facts() -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        return {"torch": {"not_available": f"{type(e).__name__}: {e}"}}
    out["torch"] = torch.__version__
    out["torch_cuda_build"] = torch.version.cuda or {"not_available": "a CPU build of torch"}
    out["cuda_available"] = bool(torch.cuda.is_available())
    if not out["cuda_available"]:
        out["cuda_devices"] = []
        out["nccl"] = {"not_available": "torch sees no CUDA device"}
        return out
    devs = []
    for d in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(d)
        devs.append({"index": d, "name": p.name, "capability": f"{p.major}.{p.minor}",
                     "total_memory_bytes": int(p.total_memory),
                     "multi_processor_count": int(p.multi_processor_count),
                     "pci_bus_id": _torch_bus_id(p, lambda a: a.nvml.lower()),
                     "memory_clock_khz": getattr(p, "memory_clock_rate", None),
                     "memory_bus_width_bits": getattr(p, "memory_bus_width", None)})
    out["cuda_devices"] = devs
    try:
        v = torch.cuda.nccl.version()
        out["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception as e:  # noqa: BLE001
        out["nccl"] = {"not_available": f"{type(e).__name__}: {e}"}
    try:
        out["cudnn"] = torch.backends.cudnn.version()
    except Exception as e:  # noqa: BLE001
        out["cudnn"] = {"not_available": f"{type(e).__name__}: {e}"}
    return out


def _nvml_facts() -> Dict[str, Any]:
    try:
        import pynvml
    except Exception as e:  # noqa: BLE001
        return {"nvml": {"not_available": f"{type(e).__name__}: {e}"}}
    try:
        pynvml.nvmlInit()
    except Exception as e:  # noqa: BLE001
        return {"nvml": {"not_available": f"nvmlInit: {type(e).__name__}: {e}"}}
    try:
        def text(v):
            return v.decode() if isinstance(v, bytes) else str(v)

        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        return {"nvml_driver": text(pynvml.nvmlSystemGetDriverVersion()),
                "nvml_version": text(pynvml.nvmlSystemGetNVMLVersion()),
                "nvml_cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}",
                "nvml_gpu_count": int(pynvml.nvmlDeviceGetCount())}
    except Exception as e:  # noqa: BLE001
        return {"nvml": {"not_available": f"{type(e).__name__}: {e}"}}
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


# ----------------------------------------------------------------------------- nccl (one rank)


def _cuda_usable() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.device_count() > 0


def _bus_id_of_gpu0(scan_path: Optional[str]) -> Optional[str]:
    """NVML GPU 0's PCI bus id from the check's scan (a real one), else CUDA device 0's."""
    if scan_path and Path(scan_path).is_file():
        try:
            doc = json.loads(Path(scan_path).read_text(encoding="utf-8"))
            if not doc.get("simulated"):
                for g in doc.get("gpus") or []:
                    if g.get("nvml_index") == 0 and isinstance(g.get("pci_bus_id"), str):
                        return g["pci_bus_id"]
        except (OSError, ValueError):
            pass
    import torch

    # None when torch gives no bus id: then the worker cannot find the GPU by bus id, and says so
    return _torch_bus_id(torch.cuda.get_device_properties(0), lambda a: a.lspci)


def _torch_bus_id(props: Any, form: Any) -> Optional[str]:
    """A CUDA device's PCI address from torch's properties in ``form`` (of a
    gputopo.model.bus_id.PciAddress), None when torch gives none."""
    from gputopo.model.bus_id import from_torch

    addr = from_torch(props)
    return form(addr) if addr is not None else None


def worker_config(fabric: str, gpus: Dict[int, Dict[str, Optional[str]]], timeout_s: float,
                  env: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """The bench worker's start configuration, as the bench runner makes it
    (gputopo/bench/api.py ``_worker_config``): on the cuda fabric its environment has the
    variables that change what is timed set (gputopo/bench/worker_env.py), so a shell's
    TORCH_NCCL_BLOCKING_WAIT=1 or CUDA_LAUNCH_BLOCKING=1 does not turn every sample into a
    ``hold_too_short`` one here while the bench itself runs without it."""
    from gputopo.bench.worker_env import worker_env

    base = dict(os.environ if env is None else env)
    return {"fabric": fabric, "description": None,
            "env": worker_env(base)[0] if fabric == "cuda" else base,
            "parent_pid": os.getpid(), "threads": 1, "gpus": gpus,
            "pg_timeout_s": max(30.0, timeout_s)}


def one_rank_all_reduce(fabric: str, size_bytes: int, samples: int, warmup: int, log_dir: str,
                        scan_path: Optional[str], timeout_s: float) -> Dict[str, Any]:
    """Start one bench worker as the runner does, give it a collective step of world size 1."""
    from gputopo.bench.plan import Case
    from gputopo.workers.processes import mp_context, starting_workers, stop_forkserver
    from gputopo.bench.worker import bench_worker_main

    gpus: Dict[int, Dict[str, Optional[str]]] = {}
    if fabric == "cuda":
        gpus[0] = {"pci_bus_id": _bus_id_of_gpu0(scan_path)}
    config = worker_config(fabric, gpus, timeout_s)
    Path(log_dir).mkdir(parents=True, exist_ok=True)
    log_path = str(Path(log_dir) / "nccl-one-rank-worker.log")
    ctx = mp_context()
    doc: Dict[str, Any] = {"fabric": fabric, "backend": "nccl" if fabric == "cuda" else "gloo",
                           "world_size": 1, "test": "collective.all_reduce",
                           "size_bytes": size_bytes, "worker_log": log_path, "error": None,
                           "code_path": "gputopo.bench.worker.bench_worker_main -> WorkerState.run_step "
                                        "(its process group of one rank) -> suites.build_spec "
                                        "(suites._collective) -> spec.measure"}
    if fabric == "cuda":  # what the worker ran with, as run.json worker_env records it for bench
        from gputopo.bench.worker_env import worker_env

        doc["worker_env"] = worker_env(os.environ)[1]
    t0 = time.monotonic()
    with starting_workers(ctx):
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=bench_worker_main, name="gputopo-gpu0", daemon=True,
                           args=(child, "gpu0", config, log_path))
        proc.start()
        child.close()
    try:
        deadline = time.monotonic() + timeout_s

        def recv():
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"the worker said nothing for {timeout_s:.0f} s")
                if parent.poll(min(left, 1.0)):
                    return parent.recv()
                if not proc.is_alive():
                    raise RuntimeError(f"the worker died (exit code {proc.exitcode}); see {log_path}")

        msg = recv()
        if msg[0] == "fatal":
            doc.update(error=f"worker could not start ({msg[1]}): {msg[2]}")
            return judged(doc, fabric)  # (verified: false, said as the step's line)
        info = msg[1]
        case = Case("collective.all_reduce", (0,), None, size_bytes)
        step = {"id": "gpu-check-nccl", "group": "collectives", "gpus": [0], "local_gpus": [0],
                "rank": 0, "world": 1, "link_class": None, "shared": False,
                "store": {"host": "127.0.0.1", "port": info.get("store_port"),
                          "prefix": "gpu-check-nccl#1"},
                "cases": [case.to_json()], "warmup": warmup, "samples": samples,
                "latency_repeat": 1}
        parent.send(("step", step))
        while True:
            msg = recv()
            deadline = time.monotonic() + timeout_s  # any message is progress
            if msg[0] == "measurement":
                doc["measurement"] = msg[2]
            elif msg[0] == "error":
                doc["error"] = msg[2]
                break
            elif msg[0] == "done":
                break
        parent.send(("exit",))
        proc.join(10)
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join(5)
        stop_forkserver()
    doc["wall_s"] = round(time.monotonic() - t0, 3)
    return judged(doc, fabric)


def judged(doc: Dict[str, Any], fabric: str) -> Dict[str, Any]:
    """``doc`` with what its measurement says and whether it is ``verified``: bit-exact, timed,
    and on NCCL the all_reduce an AVG (a sum on one rank runs no kernel: proves nothing)."""
    m = doc.get("measurement") or {}
    derived = m.get("derived") or {}
    extra = m.get("extra") or {}
    doc.update(samples_s=m.get("samples_s"), median_s=derived.get("median_s"),
               # one rank moves no byte between GPUs: no bandwidth is said for it (the cpu path's
               # size / time was 198 GB/s of nothing)
               algbw_gbps=None, no_bandwidth=NO_BANDWIDTH, reduce_op=extra.get("reduce_op"),
               wrong=m.get("wrong"), first_bad_index=m.get("first_bad_index"), timing=m.get("timing"),
               timing_method=extra.get("timing_method"), nccl_transport=extra.get("nccl_transport"))
    if m.get("error") and not doc.get("error"):
        doc["error"] = m["error"]
    if m and not doc.get("error") and fabric == "cuda" and doc["reduce_op"] != ONE_RANK_NCCL_OP:
        doc["error"] = (f"the all_reduce was a {doc['reduce_op']}, not an {ONE_RANK_NCCL_OP}: on one rank NCCL "
                        "runs no kernel for it, so a right buffer proves nothing")
    doc["verified"] = bool(m) and not doc.get("error") and m.get("wrong") == 0 and bool(m.get("samples_s"))
    return doc


# ----------------------------------------------------------------------------- numerics reference


def reference_training(device: str) -> Dict[str, Any]:
    """The numerics' reference job (one device, the whole batch) on ``device``, its swapped-halves
    re-run there (the reduction-order noise the tolerance is made of), and, when ``device`` is a
    GPU, the same plain job on the CPU."""
    import dataclasses

    import torch

    from gputopo.numerics.job import NumericsOptions
    from gputopo.numerics.worker_main import _run_job

    if device.startswith("cuda"):
        # as a numerics worker on the nccl backend does: TF32 would swamp fp32's noise
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    opts = dataclasses.asdict(NumericsOptions())
    runs: Dict[str, Any] = {}
    places = [(device, "plain"), (device, "swapped")] + ([("cpu", "plain")] if device != "cpu" else [])
    for dev, order in places:
        job = {"id": f"{dev}-{order}", "kind": "reference", "opts": opts, "device": dev, "order": order}
        payload = _run_job(0, job, "nccl" if dev.startswith("cuda") else "gloo")
        runs[f"{dev}:{order}"] = {k: payload[k] for k in ("losses", "first_nonfinite_step", "nonfinite_in",
                                                         "wall_s")}
    main = runs[f"{device}:plain"]
    losses = main["losses"]
    doc: Dict[str, Any] = {"device": device, "job": opts, "runs": runs,
                           "code_path": "gputopo.numerics.worker_main._run_job (kind 'reference') -> "
                                        "ways.train_reference"}
    finite = main["first_nonfinite_step"] is None and all(map(_finite, losses))
    doc["loss_first"], doc["loss_last"] = (losses[0], losses[-1]) if losses else (None, None)
    doc["finite"] = finite
    doc["learned"] = bool(losses) and finite and losses[-1] < losses[0]
    doc["swapped_max_rel_dev"] = _max_rel_dev(losses, runs[f"{device}:swapped"]["losses"])
    if "cpu:plain" in runs and device != "cpu":
        doc["gpu_vs_cpu_max_rel_dev"] = _max_rel_dev(losses, runs["cpu:plain"]["losses"])
    doc["ok"] = doc["learned"]
    return doc


def _finite(x) -> bool:
    import math

    return isinstance(x, (int, float)) and math.isfinite(x)


def _max_rel_dev(a, b) -> Optional[float]:
    pairs = [(x, y) for x, y in zip(a, b) if _finite(x) and _finite(y)]
    if not pairs or len(a) != len(b):
        return None
    return max(abs(x - y) / max(abs(y), 1e-12) for x, y in pairs)


# ----------------------------------------------------------------------------- CLI


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper()
    return int(t[:-1]) * units[t[-1]] if t and t[-1] in units else int(t)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("versions")
    v.add_argument("--out")
    n = sub.add_parser("nccl")
    n.add_argument("--fabric", choices=("auto", "cuda", "cpu"), default="auto")
    n.add_argument("--size", default="64M")
    n.add_argument("--samples", type=int, default=5)
    n.add_argument("--warmup", type=int, default=1)
    n.add_argument("--log-dir", default=".")
    n.add_argument("--scan")
    n.add_argument("--timeout", type=float, default=60.0)
    n.add_argument("--out")
    r = sub.add_parser("numerics")
    r.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    r.add_argument("--out")
    a = ap.parse_args(argv)
    if a.cmd == "versions":
        _emit(versions(), a.out)
        return 0
    if a.cmd == "nccl":
        fabric = a.fabric
        if fabric != "cpu" and not _cuda_usable():
            if fabric == "cuda":
                print("needs CUDA: torch sees no usable CUDA device", file=sys.stderr)
                return NEEDS_CUDA
            fabric = "cpu"
        try:
            doc = one_rank_all_reduce(fabric, _size(a.size), a.samples, a.warmup, a.log_dir, a.scan,
                                      a.timeout)
        except Exception:  # noqa: BLE001 - the traceback is the step's record
            traceback.print_exc()
            return 1
        _emit(doc, a.out)
        return 0 if doc["verified"] else 1
    device = a.device
    if device != "cpu" and not _cuda_usable():
        if device == "cuda":
            print("needs CUDA: torch sees no usable CUDA device", file=sys.stderr)
            return NEEDS_CUDA
        device = "cpu"
    elif device != "cpu":
        device = "cuda:0"
    doc = reference_training(device)
    _emit(doc, a.out)
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
