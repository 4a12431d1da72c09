"""The sim fabric: CPU tensors moved through a simulated machine's link model and faults.

Every transfer really copies the bytes (CPU tensors stand in for GPU memory), then the faults
of the machine description that hit that transfer are applied to the bytes that arrived:
``corrupt`` flips one random bit in a ``rate`` fraction of the elements, ``nan`` writes NaNs,
``hang`` blocks the worker process for ever (the runner's timeout must catch it), ``crash``
kills the worker process (SIGABRT). Detection is never told: the verification loop finds the
wrong bits by comparing with the expected pattern, as on real hardware.

Time is modeled (``timing: "modeled"``): a transfer of n bytes takes
``latency + n / bandwidth`` of its route, where

- route ``p2p`` (peer DMA) uses the pair's ``link_model(i, j)``. A fault's ``factor`` is the
  fraction of throughput left (docs/sim-format.md): ``slow`` multiplies the bandwidth by it, and so does
  ``downtrained`` (a GPU's PCIe link at lower width/generation) on every PCIe route of that GPU
  (not on NVLink). ``link_down`` needs nothing here: the description already reports the pair
  at its PCIe class, whose model is PCIe's. Base rates come from the description rebuilt
  without its downtrained faults, so a lowered width is never counted twice;
- route ``host`` (NCCL's path through host memory for NODE/PHB/SYS pairs, or when P2P is not
  possible) pipelines through pinned host memory: both GPUs' host latencies plus n over the
  slower host link;
- a staged copy (the "P2P disabled" control) is pipelined through pinned host memory, as the
  CUDA driver stages it: both GPUs' host latencies plus n over STAGED_EFFICIENCY of the slower
  host link; ``--self`` tests use ``host_link_model(i)`` / ``device_link_model(i)``.

Transfers issued together (both directions of a bidirectional copy, one ring step) take the
longest of their times. On-device copies (DataParallel's flatten/unflatten) cost
``device_link_model``. Each sample is then multiplied by ``1 + u * JITTER`` with u uniform in
[-1, 1] from a generator seeded by the measurement and the sample number: repeated samples
differ (so median and IQR mean something) but every run of the same plan gives the same numbers.

Which faults hit a transfer: those ``Description.faults_for(i, j, path)`` returns for its
GPUs, kept only when the fault's path is "all" or equals the route; so a ``p2p`` fault hits
peer copies and DataParallel (raw peer copies, which PyTorch uses for any pair CUDA calls
peer-capable) and NCCL collectives only on pairs where NCCL uses P2P (NVLink, PIX, PXB with
P2P status OK, and not ``NCCL_P2P_DISABLE=1``); NODE/PHB/SYS collectives go through the host.
"""

from __future__ import annotations

import os
import random
import sys
import time
import zlib
from typing import Dict, Mapping, Optional, Sequence

import torch

from ..routes import nccl_route
from .base import NCCL_DP_TESTS
from .sim_ring import RingCollectives

#: Relative half-width of the deterministic per-sample jitter of modeled times.
JITTER = 0.02
#: A copy staged through host memory runs at this fraction of the slower host link: the driver
#: pipelines it through pinned buffers, so it is far faster than two host copies in a row. 0.8:
#: healthy PCIe Gen4 x16 machines publish 21.4-22.1 GB/s staged (reference_rates.csv rows
#: a100-pcie-staged, rtx6000ada-amd-staged: p2pBandwidthLatencyTest, P2P=Disabled), 0.80-0.82 of
#: the sim's 26.8 GB/s Gen4 x16 host link.
STAGED_EFFICIENCY = 0.8


class _Link:
    __slots__ = ("gbps", "latency_us")

    def __init__(self, gbps: float, latency_us: float):
        self.gbps, self.latency_us = float(gbps), float(latency_us)

    def seconds(self, nbytes: int) -> float:
        return self.latency_us * 1e-6 + nbytes / (self.gbps * 1e9)


def _as_link(m) -> _Link:
    return _Link(m.gbps, getattr(m, "latency_us", 0.0))


class SimModel:
    """Routes, modeled times and faults of one simulated machine description."""

    def __init__(self, desc, env: Optional[Mapping[str, str]] = None):
        self.desc = desc
        self.base = _without_downtrained(desc)
        env = os.environ if env is None else env
        self.nccl_env = {k: v for k, v in env.items() if k.startswith("NCCL_")}
        self._counter = 0
        self._salt = ""
        # The description does not change during a run: a transfer's faults and its route's
        # link are looked up once per (source, destination, route), not on every transfer.
        self._faults: Dict[tuple, list] = {}
        self._links: Dict[tuple, _Link] = {}

    def restart_damage(self, salt: str) -> None:
        """Seed the damage of the transfers that follow from ``salt`` (a measurement's seed and
        sample number) and their order from here, not from what this process ran before: a
        long-lived worker used to carry one counter across steps, so the same plan corrupted
        different elements (other wrong counts, another first bad index) from run to run."""
        self._counter, self._salt = 0, salt

    # ---------------------------------------------------------------- routes
    def link_class(self, i: int, j: int) -> str:
        return str(self.desc.link_class(i, j))

    def peer_ok(self, i: int, j: int) -> bool:
        """CUDA allows peer access when NVML's read/write P2P status is OK (what PyTorch uses)."""
        try:
            st = self.desc.p2p_status(i, j)
        except Exception:
            return True
        return all(st.get(cap, "OK") == "OK" for cap in ("read", "write"))

    def peer_route(self, i: int, j: int) -> str:
        return "p2p" if self.peer_ok(i, j) else "host"

    def nccl_route(self, i: int, j: int, n_gpus: int = 2) -> str:
        """NCCL's route between i and j in a communicator of ``n_gpus`` GPUs on this host's CPU
        (gputopo.bench.routes: P2P up to PXB, up to SYS on AMD with 2 GPUs; NCCL_P2P_* honoured)."""
        return nccl_route(self.link_class(i, j), self.peer_ok(i, j), self.nccl_env,
                          cpu_vendor=self.desc.host.cpu_vendor, n_gpus=n_gpus)

    # ---------------------------------------------------------------- faults
    def faults(self, i: int, j: Optional[int], route: str) -> list:
        """The faults that hit a transfer from ``i`` to ``j`` on ``route`` (read-only list)."""
        key = (i, j, route)
        hit = self._faults.get(key)
        if hit is None:
            try:
                found = self.desc.faults_for(i, j, path=route)
            except (TypeError, ValueError):
                found = self.desc.faults_for(i, j)
            hit = self._faults[key] = [f for f in found if getattr(f, "path", "all") in ("all", route)]
        return hit

    # ---------------------------------------------------------------- links
    def _host(self, g: int, faults=()) -> _Link:
        return _slowed(_as_link(self.base.host_link_model(g)), faults, pcie_of=(g,))

    def _device(self, g: int) -> _Link:
        return _as_link(self.base.device_link_model(g))

    def _pair_link(self, i: int, j: int, faults) -> _Link:
        cap = getattr(self.base, "socket_link_cap", lambda i, j: None)(i, j)
        if cap is not None:
            # a SYS pair: a downtrained GPU lowers the PCIe part, then the CPU interconnect caps
            # it; a slow fault slows what is left
            pcie = _slowed(_as_link(self.base.link_model(i, j, socket_cap=False)),
                           [f for f in faults if f.what == "downtrained"], pcie_of=(i, j))
            return _slowed(_Link(min(pcie.gbps, cap), pcie.latency_us), [f for f in faults if f.what != "downtrained"])
        link = _as_link(self.base.link_model(i, j))
        pcie_of = () if self.link_class(i, j).startswith("NV") else (i, j)
        return _slowed(link, faults, pcie_of=pcie_of)

    def transfer_seconds(self, nbytes: int, src: int, dst: int, route: str, faults) -> float:
        cached = faults is self._faults.get((src, dst, route))  # the list faults() returned
        link = self._links.get((src, dst, route)) if cached else None
        if link is None:
            if route == "p2p":
                link = self._pair_link(src, dst, faults)
            else:
                hs, hd = self._host(src, faults), self._host(dst, faults)
                link = _Link(min(hs.gbps, hd.gbps), hs.latency_us + hd.latency_us)
            if cached:
                self._links[(src, dst, route)] = link
        return link.seconds(nbytes)

    def staged_seconds(self, nbytes: int, src: int, dst: int, faults) -> float:
        hs, hd = self._host(src, faults), self._host(dst, faults)
        return _Link(min(hs.gbps, hd.gbps) * STAGED_EFFICIENCY, hs.latency_us + hd.latency_us).seconds(nbytes)

    def self_seconds(self, kind: str, nbytes: int, g: int, faults) -> float:
        if kind == "d2d":
            return _slowed(self._device(g), faults).seconds(nbytes)
        return self._host(g, faults).seconds(nbytes)

    def model_facts(self, src: int, dst: int, route: str) -> dict:
        try:
            link = _as_link(self.base.link_model(src, dst)) if route == "p2p" else None
        except Exception:
            link = None
        if link is None and dst is not None:
            hs, hd = self._host(src), self._host(dst)
            link = _Link(min(hs.gbps, hd.gbps), hs.latency_us + hd.latency_us)
        return {"gbps": link.gbps, "latency_us": link.latency_us}

    # ---------------------------------------------------------------- bytes
    def hit(self, dst: torch.Tensor, faults, where: str) -> None:
        """Apply the data and process faults to the bytes that just arrived in ``dst``."""
        for f in faults:
            what = f.what
            if what in ("hang", "crash"):
                _process_fault(what, f, where)
            elif what in ("corrupt", "nan"):
                self._counter += 1
                seed = zlib.crc32(f"{f.where}|{what}|{where}|{self._salt}|{self._counter}".encode())
                rate = float(getattr(f, "rate", 0.0) or 0.0)
                _damage(dst, what, rate, seed)


def _factor(f, default: float) -> float:
    """The fraction of throughput a fault leaves (docs/sim-format.md), in (0, 1]."""
    v = getattr(f, "factor", None)
    if v is None:
        return default
    try:
        v = float(v)
    except (TypeError, ValueError):
        return default
    return v if 0 < v <= 1 else default


def _slowed(link: _Link, faults, pcie_of: Sequence[int] = ()) -> _Link:
    """``slow`` faults, and ``downtrained`` faults of a GPU whose PCIe link the route uses."""
    for f in faults:
        if f.what == "slow":
            link = _Link(link.gbps * _factor(f, 0.5), link.latency_us)
        elif f.what == "downtrained" and set(getattr(f, "gpus", ()) or ()) & set(pcie_of):
            link = _Link(link.gbps * _factor(f, 0.5), link.latency_us)
    return link


def _without_downtrained(desc):
    """The description rebuilt without downtrained faults (healthy PCIe rates), when it can be."""
    if not any(getattr(f, "what", "") == "downtrained" for f in getattr(desc, "faults", [])):
        return desc
    try:
        return desc.with_faults([f for f in desc.faults if f.what != "downtrained"])
    except Exception:
        return desc


def _process_fault(what: str, fault, where: str) -> None:
    msg = f"gputopo sim: fault {what} at {getattr(fault, 'where', '?')} hit {where}"
    print(msg, file=sys.stderr, flush=True)
    if what == "hang":
        while True:  # a real hang: only the runner's timeout ends it
            time.sleep(3600)
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file for a simulated crash
    except Exception:
        pass
    os.abort()


def _damage(dst: torch.Tensor, what: str, rate: float, seed: int) -> None:
    flat = dst.view(-1)
    n = flat.numel()
    if n == 0:
        return
    expected = rate * n
    k = int(expected)
    if random.Random(seed).random() < expected - k:
        k += 1
    if what == "nan":
        k = max(1, k)
    if k == 0:
        return
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(n, (k,), generator=gen)
    if what == "nan":
        flat[idx] = float("nan")
        return
    bits = torch.randint(0, 31, (k,), generator=gen, dtype=torch.int32)
    ints = flat.view(torch.int32)
    ints[idx] = ints[idx] ^ torch.bitwise_left_shift(torch.ones_like(bits), bits)


class SimOps(RingCollectives):
    fabric = "sim"
    timing = "modeled"
    needs_warmup = False  # modeled time has no warm-up effect
    memory_on_host = True

    @classmethod
    def for_step(cls, local_gpus, step_gpus, world, state) -> "SimOps":
        """One step's ops in a worker (fabric.py's Fabric.ops): ``state.model``, the machine."""
        if state.model is None:  # set in the worker's __init__ for the sim fabric
            raise RuntimeError("the sim fabric's worker has no machine model")
        return cls(local_gpus, step_gpus, state.model)

    def __init__(self, local_gpus: Sequence[int], step_gpus: Sequence[int], model: SimModel):
        super().__init__(local_gpus, step_gpus)
        self.model = model
        self._region = 0.0

    def device(self, gpu: int) -> torch.device:
        return torch.device("cpu")

    def peer_route(self, a: int, b: int) -> str:
        return self.model.peer_route(a, b)

    def peer_access(self, a: int, b: int) -> Optional[bool]:
        return self.model.peer_ok(a, b)

    def collective_route(self) -> str:
        i, j = self.step_gpus[:2]
        return self.model.nccl_route(i, j, n_gpus=len(self.step_gpus))

    # ---------------------------------------------------------------- transfers
    def transfers(self, items, route: str = "p2p") -> None:
        longest = 0.0
        for dst, src, dst_gpu, src_gpu in items:
            dst.copy_(src)
            faults = self.model.faults(src_gpu, dst_gpu, route)
            self.model.hit(dst, faults, f"{route} {src_gpu}->{dst_gpu}")
            longest = max(longest, self.model.transfer_seconds(
                dst.numel() * dst.element_size(), src_gpu, dst_gpu, route, faults))
        self._region += longest

    def local_cost(self, gpu: int, nbytes: int) -> None:
        self._region += self.model.self_seconds("d2d", nbytes, gpu, ())

    def staged(self, dst, src, dst_gpu: int, src_gpu: int, stage) -> None:
        faults = self.model.faults(src_gpu, dst_gpu, "host")
        stage.copy_(src)
        dst.copy_(stage)
        self.model.hit(dst, faults, f"staged {src_gpu}->host->{dst_gpu}")
        self._region += self.model.staged_seconds(dst.numel() * 4, src_gpu, dst_gpu, faults)

    def _self_copy(self, kind: str, dst, src, gpu: int) -> None:
        faults = self.model.faults(gpu, None, "host" if kind != "d2d" else "device")
        dst.copy_(src)
        self.model.hit(dst, faults, f"{kind} on {gpu}")
        self._region += self.model.self_seconds(kind, dst.numel() * 4, gpu, faults)

    def h2d(self, dst, host_src, gpu: int) -> None:
        self._self_copy("h2d", dst, host_src, gpu)

    def d2h(self, host_dst, src, gpu: int) -> None:
        self._self_copy("d2h", host_dst, src, gpu)

    def d2d(self, dst, src, gpu: int) -> None:
        self._self_copy("d2d", dst, src, gpu)

    # ---------------------------------------------------------------- clock
    timing_method = "modeled: the link model's time for the bytes moved, with 2 % jitter"

    def timed(self, run, gpus, *, repeat: int, seed: int, sample: int) -> float:
        self._region = 0.0
        self.model.restart_damage(f"{seed}.{sample}")
        for _ in range(repeat):
            run()
        u = random.Random(seed * 1_000_003 + sample).uniform(-1.0, 1.0)
        return self._region / repeat * (1.0 + JITTER * u)

    def extra(self, test: str, src: Optional[int], dst: Optional[int]) -> dict:
        if test.startswith("self."):
            return {"path": "host" if test != "self.d2d" else "device"}
        i, j = self.step_gpus[:2]
        if test.startswith("collective."):
            from ..nccl_transport import modeled_transport

            route = self.collective_route()
            return {"path": route, "healthy_model": self.model.model_facts(i, j, route),
                    "nccl_transport": modeled_transport(route, self.step_gpus)}
        if test in NCCL_DP_TESTS:  # torch.cuda.nccl under DataParallel: NCCL's route
            route = self.collective_route()
            return {"path": "nccl", "nccl_route": route,
                    "healthy_model": self.model.model_facts(i, j, route)}
        a, b = (src, dst) if src is not None and dst is not None else (i, j)
        route = "host" if test == "p2p.staged" else self.peer_route(a, b)
        return {"path": route, "peer_access": self.peer_access(a, b),
                "healthy_model": self.model.model_facts(a, b, route)}
