"""The cuda fabric: real GPUs, CUDA events, torch.nn.parallel.comm and NCCL.

- Peer copy: ``dst.copy_(src, non_blocking=True)`` across devices, what ``tensor.to(other_gpu)``
  does. PyTorch enables peer access for every pair CUDA allows, so this is peer DMA where
  ``torch.cuda.can_device_access_peer`` says so (recorded as ``peer_access``), else the driver's
  staged copy. Both directions at once: each copy runs on its source device's current stream.
- Staged copy (p2pBandwidthLatencyTest's "P2P disabled" control): device -> pinned host buffer
  on the source's stream, the destination's stream waits for it, host -> device.
- DataParallel: the real ``comm.broadcast_coalesced`` / ``scatter`` / ``gather`` /
  ``reduce_add_coalesced``, as ``nn.DataParallel`` calls them.
- Collectives: NCCL, one process per GPU (``torch.distributed``).

Timing: the sample routine of bench/gpu_sample.py (the cluster's all_reduce uses it too): a spin
kernel (``torch.cuda._sleep``) holds the first device's current stream, then (several ranks) a
1-element all_reduce of the ranks on it, then a start event on it; every other involved
device's stream waits on that event; the runs are
enqueued while the hold lasts (p2pBandwidthLatencyTest's delay kernel), so launch overhead stays
outside the interval; after the operation each device records an event the first stream waits
on, then the end event; ``elapsed_time`` of the pair. Cross-device work is thus fully inside
the interval, and events of one device are compared (CUDA requires it). How each measurement
was timed is recorded as ``extra.timing_method``.

GPUs are NVML indices everywhere in gputopo; ``cuda_index`` maps them to CUDA device indices
(workers run with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; see :func:`resolve_cuda_indices`).
"""

from __future__ import annotations

import os
from typing import Dict, Mapping, Optional, Sequence

import torch

from gputopo.model.bus_id import DeviceKey, from_torch, try_parse

from ..gpu_sample import time_sample
from .base import NCCL_DP_TESTS, Ops
from .cpu import DistMixin


def resolve_cuda_indices(gpus: Mapping[int, dict]) -> Dict[int, int]:
    """NVML index -> CUDA device index of this process, matched by PCI bus id only.

    ``gpus`` maps NVML index -> {"pci_bus_id": str|None, ...} (from the topology). A GPU whose
    bus id matches no CUDA device of this process is left out: it is not visible to CUDA here
    (CUDA_VISIBLE_DEVICES), and guessing a number for it measured another GPU. The parent only
    plans steps on visible GPUs (gputopo.bench.visible); :meth:`CudaOps.device` refuses others.
    """
    by_bus: Dict[DeviceKey, int] = {}
    for d in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(d)
        if " MIG " in f" {getattr(props, 'name', '')} ":
            continue  # a MIG slice ("... MIG 1g.10gb"): its GPU's bus id, but not the whole GPU
        have = from_torch(props)
        if have is not None:
            by_bus.setdefault(have.device_key, d)
    out = {}
    for nvml, info in gpus.items():
        want = try_parse(info.get("pci_bus_id"))
        hit = by_bus.get(want.device_key) if want is not None else None
        if hit is not None:
            out[int(nvml)] = int(hit)
    return out


def check_bus_ids(devices: Sequence[int], bus_ids: Sequence[Optional[str]]) -> None:
    """RuntimeError unless CUDA device ``devices[k]`` of this process has PCI bus id
    ``bus_ids[k]`` (None: not checked): the guard that a number computed in the parent still
    names the GPU it was meant to."""
    for d, bus in zip(devices, bus_ids):
        want = try_parse(bus)
        if want is None:
            continue
        have = from_torch(torch.cuda.get_device_properties(int(d)))
        if have is None or have.device_key != want.device_key:
            where = have.device_text if have is not None else "unknown (torch gives no PCI bus id)"
            raise RuntimeError(f"cuda:{d} is PCI {where}, not "
                               f"{bus}: CUDA numbers GPUs differently than expected "
                               f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')})")


def device_of(cuda_index: Mapping[int, int], gpu: int) -> torch.device:
    """The CUDA device of NVML GPU ``gpu`` (from :func:`resolve_cuda_indices`); RuntimeError
    naming it when CUDA cannot see it in this process, never another GPU's number."""
    if gpu not in cuda_index:
        raise RuntimeError(f"GPU {gpu} is not visible to CUDA in this process (no CUDA device "
                           "has its PCI bus id; CUDA_VISIBLE_DEVICES="
                           f"{os.environ.get('CUDA_VISIBLE_DEVICES')})")
    return torch.device("cuda", cuda_index[gpu])


class CudaOps(DistMixin, Ops):
    fabric = "cuda"
    timing = "cuda-events"

    @classmethod
    def for_step(cls, local_gpus, step_gpus, world, state) -> "CudaOps":
        """One step's ops in a worker (fabric.py's Fabric.ops): ``state.cuda_index``."""
        return cls(local_gpus, step_gpus, world, state.cuda_index)

    def __init__(self, local_gpus: Sequence[int], step_gpus: Sequence[int], world: int,
                 cuda_index: Mapping[int, int]):
        Ops.__init__(self, local_gpus, step_gpus)
        self.world = world
        self.cuda_index = dict(cuda_index)

    def device(self, gpu: int) -> torch.device:
        return device_of(self.cuda_index, gpu)

    def _sync_device(self):
        return self.device(self.local_gpus[0])

    def host_empty(self, shape) -> torch.Tensor:
        if isinstance(shape, int):
            shape = (shape,)
        return torch.empty(tuple(shape), dtype=torch.float32, pin_memory=True)

    def peer_access(self, a: int, b: int) -> Optional[bool]:
        if not (self.is_local(a) and self.is_local(b)):
            return None
        return bool(torch.cuda.can_device_access_peer(self.device(a).index, self.device(b).index))

    def peer_route(self, a: int, b: int) -> str:
        return "host" if self.peer_access(a, b) is False else "p2p"

    # ---------------------------------------------------------------- transfers
    def transfers(self, items, route: str = "p2p") -> None:
        for dst, src, _, _ in items:
            if dst is None or src is None:
                raise RuntimeError("cuda peer copies need both GPUs in one process")
        if len(items) == 1:
            dst, src, _, _ = items[0]
            dst.copy_(src, non_blocking=True)  # runs on the source device's current stream
            return
        # Several copies at once (both directions): a cross-device copy_ fences the *current*
        # streams of both devices, which would serialise them; give each copy its own pair of
        # side streams (as p2pBandwidthLatencyTest gives each direction its own stream), fenced
        # against the current streams before and after.
        for k, (dst, src, dst_gpu, src_gpu) in enumerate(items):
            s_src, s_dst = self._side_streams(k, src_gpu, dst_gpu)
            for s in (s_src, s_dst):
                s.wait_stream(torch.cuda.current_stream(s.device))
            with torch.cuda.stream(s_src), torch.cuda.stream(s_dst):
                dst.copy_(src, non_blocking=True)
        for k, (_dst, _src, dst_gpu, src_gpu) in enumerate(items):
            for s in self._side_streams(k, src_gpu, dst_gpu):
                torch.cuda.current_stream(s.device).wait_stream(s)

    def _side_streams(self, k: int, src_gpu: int, dst_gpu: int):
        cache = self.__dict__.setdefault("_streams", {})
        key = (k, src_gpu, dst_gpu)
        if key not in cache:
            cache[key] = (torch.cuda.Stream(self.device(src_gpu)),
                          torch.cuda.Stream(self.device(dst_gpu)))
        return cache[key]

    def staged(self, dst, src, dst_gpu: int, src_gpu: int, stage) -> None:
        sdev, ddev = self.device(src_gpu), self.device(dst_gpu)
        with torch.cuda.device(sdev):
            stage.copy_(src, non_blocking=True)
            ready = torch.cuda.Event()
            ready.record(torch.cuda.current_stream(sdev))
        torch.cuda.current_stream(ddev).wait_event(ready)
        with torch.cuda.device(ddev):
            dst.copy_(stage, non_blocking=True)

    def h2d(self, dst, host_src, gpu: int) -> None:
        with torch.cuda.device(self.device(gpu)):
            dst.copy_(host_src, non_blocking=True)

    def d2h(self, host_dst, src, gpu: int) -> None:
        with torch.cuda.device(self.device(gpu)):
            host_dst.copy_(src, non_blocking=True)

    def d2d(self, dst, src, gpu: int) -> None:
        with torch.cuda.device(self.device(gpu)):
            dst.copy_(src, non_blocking=True)

    # ---------------------------------------------------------------- DataParallel (real)
    def _devs(self, gpus):
        return [self.device(g).index for g in gpus]

    def dp_broadcast_coalesced(self, params, shapes, master, gpus):
        from torch.nn.parallel import comm

        order = [master] + [g for g in gpus if g != master]
        outs = comm.broadcast_coalesced(params[master], self._devs(order))
        return {g: list(outs[k]) for k, g in enumerate(order)}

    def dp_scatter(self, batch, shape, master, gpus):
        from torch.nn.parallel import comm

        pieces = comm.scatter(batch, self._devs(gpus), dim=0)
        return dict(zip(gpus, pieces))

    def dp_gather(self, pieces, shape, master, gpus):
        from torch.nn.parallel import comm

        return comm.gather([pieces[g] for g in gpus], dim=0, destination=self.device(master).index)

    def dp_reduce_add_coalesced(self, grads, shapes, master, gpus):
        from torch.nn.parallel import comm

        order = [master] + [g for g in gpus if g != master]
        return list(comm.reduce_add_coalesced([grads[g] for g in order],
                                              destination=self.device(master).index))

    # ---------------------------------------------------------------- clock
    def sync(self, gpus) -> None:
        for g in gpus:
            if self.is_local(g):
                torch.cuda.synchronize(self.device(g))

    #: The hold's first length, in seconds of GPU clock (doubled whenever it proves too short).
    HOLD_S = 0.002
    #: The longest hold (seconds): a host slower than this per sample is recorded, not waited on.
    HOLD_MAX_S = 1.0
    timing_method = HOLD_METHOD = (
        "cuda-events: the first device's stream is held by a spin kernel (torch.cuda._sleep) "
        "while every run is enqueued, then start/end events bracket only GPU work, as "
        "p2pBandwidthLatencyTest holds its stream with a delay kernel")
    #: This process's hold (seconds), doubled on every rank together (:meth:`_noted`).
    _hold_s: float = HOLD_S
    #: Added to :data:`HOLD_METHOD` for a step of several ranks.
    GATE_METHOD = ("; the ranks leave the hold together through a 1-element all_reduce on the "
                   "stream before the start event (aligned on the GPU, not the CPU)")

    def _gate(self):
        """The ranks' 1-element all_reduce (:func:`gputopo.bench.gpu_sample.aligned_start`), its
        work; None for a step of one process."""
        if self.world <= 1:
            return None
        one = self.__dict__.get("_gate_buf")
        if one is None:  # zeros: the sum stays 0 sample after sample
            one = self._gate_buf = torch.zeros(1, dtype=torch.float32, device=self._sync_device())
        return self._dist().all_reduce(one, async_op=True)

    def _sample_note(self) -> float:
        gpu = self.__dict__.pop("_short_gpu", None)
        return 0.0 if gpu is None else float(gpu + 1)

    def _noted(self, notes) -> None:
        gpus = sorted({int(n) - 1 for n in notes if n > 0})
        if gpus:  # some rank's hold ended early in this sample: the sample holds launch time
            self._hold_short = self.__dict__.get("_hold_short", 0) + 1
            self._short_gpus = sorted(set(self.__dict__.get("_short_gpus", [])) | set(gpus))
            self._hold_s = min(2 * self._hold_s, self.HOLD_MAX_S)

    def timing_facts(self) -> dict:
        short = self.__dict__.pop("_hold_short", 0)
        gpus = self.__dict__.pop("_short_gpus", [])
        facts: dict = {"timing_method": self.HOLD_METHOD + (self.GATE_METHOD if self.world > 1 else "")}
        if short:
            facts["hold_too_short_samples"] = short
            facts["hold_too_short_gpus"] = gpus
            facts["timing_method"] += (f"; in {short} sample(s) the hold ended before every run was "
                                       f"enqueued (on GPU {', '.join(map(str, gpus))}), so those "
                                       "include host launch time")
        return facts

    def timed(self, run, gpus, *, repeat: int, seed: int, sample: int) -> float:
        """Seconds per run of ``run``: CUDA events on the first device's stream, every other
        device's stream fenced inside the interval. The stream is held by a spin kernel until
        every run is enqueued (else small copies would time Python dispatch, not the link); with
        several ranks the start event follows a 1-element all_reduce of the ranks on the stream
        (:func:`gputopo.bench.gpu_sample.time_sample`, the cluster's routine too), so every rank's interval starts when
        the last rank's GPU is ready, whatever each host's lag or each GPU's clock. If the start
        event has already passed when enqueuing ends, the hold was too short: :meth:`combine`
        tells every rank (``hold_too_short_samples``, with the GPUs) and every rank doubles the
        next hold."""
        devs = [self.device(g) for g in gpus if self.is_local(g)] or [self._sync_device()]
        self.sync(self.local_gpus)
        first = torch.cuda.current_stream(devs[0])

        def enqueue(start) -> None:
            for d in devs[1:]:
                torch.cuda.current_stream(d).wait_event(start)
            for _ in range(repeat):
                run()
            for d in devs[1:]:  # every other device's work inside the first stream's interval
                with torch.cuda.device(d):
                    done = torch.cuda.Event()
                    done.record(torch.cuda.current_stream(d))
                first.wait_event(done)

        with torch.cuda.device(devs[0]):
            got = time_sample(torch, devs[0], self._hold_s, self._gate, enqueue)
        if got.late:  # the GPU passed the start event before the last run was enqueued
            self._short_gpu = next((g for g in gpus if self.is_local(g)),
                                   self.local_gpus[0] if self.local_gpus else 0)
        return got.seconds / repeat

    def extra(self, test: str, src, dst) -> dict:
        if test.startswith("self."):
            return {"path": "host" if test != "self.d2d" else "device", "pinned": True}
        if test.startswith("collective."):
            return {"path": "nccl"}
        if test in NCCL_DP_TESTS:  # comm.broadcast_coalesced / reduce_add -> torch.cuda.nccl
            return {"path": "nccl"}
        if test == "p2p.staged":
            return {"path": "host", "pinned": True}
        if src is not None and dst is not None and self.is_local(src) and self.is_local(dst):
            pa = self.peer_access(src, dst)
            return {"peer_access": pa, "path": "p2p" if pa else "host"}
        return {}
