"""The fabric as an object: what a benchmark runs on, and every property the rest of gputopo
asks of it. The one place that knows the fabrics by name: everything else holds a
:class:`Fabric` (or its name, rebuilt here through :func:`fabric_named`) and asks it.

A frozen dataclass of plain values: it pickles, so it may cross to worker processes (the
worker configuration carries its name; the worker rebuilds it with :func:`fabric_named`).
Importing this module imports no torch (the ops modules are imported by :meth:`Fabric.ops`,
inside workers only).
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, Iterable, Optional, Sequence, Tuple, Union

from gputopo.errors import UsageError
from gputopo.model.measurement import (FIGURES_OF_CPU_PROCESSES, FIGURES_OF_GPUS,
                                       FIGURES_OF_SIMULATED_GPUS, Measurement)


@dataclass(frozen=True)
class Fabric:
    """One fabric. ``name`` is what runs record (run.json's and each measurement's ``fabric``)."""

    name: str
    #: How its time is taken (a measurement's ``timing``): cuda-events, wall or modeled.
    timing: str
    #: torch.distributed backend of its process groups (nccl, gloo), None when it has none.
    backend: Optional[str]
    #: Whether rank 0's worker keeps a TCP store for the process groups of a step.
    needs_store: bool
    #: Workers are a pool of interchangeable processes (``--sim-workers``) that each model a
    #: whole step; otherwise one worker process per GPU it drives, one step at a time.
    pooled: bool
    #: Step groups whose GPUs one worker process drives together (peer copies and DataParallel
    #: on cuda); every other step of several GPUs has one process per GPU. Unused when pooled.
    one_process_groups: FrozenSet[str]
    #: Whether ``--concurrent`` (steps of disjoint GPUs side by side) means anything on it.
    concurrent_allowed: bool
    #: Where its GPU buffers live: "gpu" (device memory; host memory only stages) or "host".
    memory: str
    #: Real GPUs through CUDA: the CUDA-visible check, the worker environment that changes what
    #: is timed, the peer-mapping limit, NCCL's transport log.
    real_gpus: bool
    #: Its times come from a simulated machine's link model (needs a description).
    simulated: bool
    #: CPU processes stand in for the GPUs: its figures are not a GPU link's rate.
    stands_in: bool
    #: module:class of its operations (bench/fabrics/base.py's Ops), built inside a worker.
    ops_class: str

    def __str__(self) -> str:
        return self.name

    @property
    def figures_of(self) -> str:
        """What the figures it measures are of, recorded on each of its measurements
        (``figures_of``, model/measurement.py): the report judges a measurement by it, never by
        the fabric's name."""
        if self.stands_in:
            return FIGURES_OF_CPU_PROCESSES
        return FIGURES_OF_SIMULATED_GPUS if self.simulated else FIGURES_OF_GPUS

    def pool_size(self, sim_workers: Optional[int]) -> int:
        """Worker processes a run keeps: ``sim_workers`` (else up to 4, one per core) when
        pooled, else 1 (workers are per GPU)."""
        if not self.pooled:
            return 1
        if sim_workers:
            return max(1, int(sim_workers))
        return max(1, min(4, os.cpu_count() or 1))

    def layout(self, gpus: Sequence[int], group: str) -> list:
        """GPUs driven by each worker process of a step (of ``gpus``, test group ``group``), in
        rank order."""
        if self.pooled or len(gpus) == 1 or group in self.one_process_groups:
            return [tuple(gpus)]
        return [(g,) for g in gpus]

    def ops(self, local, gpus, world, state: Any):
        """Its operations for one step (inside a worker): ``state`` is the worker's
        (bench/worker.py's WorkerState: the sim's machine model, cuda's device indices)."""
        module, cls = self.ops_class.split(":")
        return getattr(importlib.import_module(module), cls).for_step(local, gpus, world, state)


_P = "gputopo.bench.fabrics."

CUDA = Fabric(name="cuda", timing="cuda-events", backend="nccl", needs_store=True, pooled=False,
              one_process_groups=frozenset({"p2p", "dp"}), concurrent_allowed=True, memory="gpu",
              real_gpus=True, simulated=False, stands_in=False, ops_class=_P + "cuda:CudaOps")
CPU = Fabric(name="cpu", timing="wall", backend="gloo", needs_store=True, pooled=False,
             one_process_groups=frozenset(), concurrent_allowed=True, memory="host",
             real_gpus=False, simulated=False, stands_in=True, ops_class=_P + "cpu:CpuOps")
SIM = Fabric(name="sim", timing="modeled", backend=None, needs_store=False, pooled=True,
             one_process_groups=frozenset(), concurrent_allowed=False, memory="host",
             real_gpus=False, simulated=True, stands_in=False, ops_class=_P + "sim:SimOps")

#: Every fabric, by name, in the order the CLI lists them.
FABRICS: Dict[str, Fabric] = {f.name: f for f in (CUDA, CPU, SIM)}
FABRIC_NAMES: Tuple[str, ...] = tuple(FABRICS)
#: The fabrics whose processes do the work themselves (no link model): a real cluster run's
#: ranks (``gputopo cluster --fabric``; a simulated cluster is ``--sim``).
UNSIMULATED_FABRIC_NAMES: Tuple[str, ...] = tuple(n for n, f in FABRICS.items() if not f.simulated)


def fabric_named(name: Union[str, Fabric]) -> Fabric:
    """The fabric of ``name`` (as ``--fabric`` or a run record writes it; a Fabric passes
    through); UsageError (exit 2) for an unknown one."""
    if isinstance(name, Fabric):
        return name
    f = FABRICS.get(str(name).strip().lower())
    if f is None:
        raise UsageError(f"--fabric: unknown fabric {name!r}; known: {', '.join(FABRIC_NAMES)}")
    return f


def default_fabric(simulated_machine: bool) -> Fabric:
    """The fabric a run without ``--fabric`` uses: sim for a simulated machine, else cuda."""
    return SIM if simulated_machine else CUDA


def recorded_fabric(name: Optional[str]) -> Optional[Fabric]:
    """The fabric a record names (run.json's, a result's), None when it names none gputopo knows
    (an imported tool's run, a damaged record)."""
    return FABRICS.get(str(name or "").strip().lower())


def fill_figures_of(measurements: Iterable[Measurement]) -> None:
    """Give each measurement read from a line written before ``figures_of`` existed what its
    figures are of, from the fabric it names (:func:`figures_of_fabric`), so the report judges
    every measurement by what it records of itself. The report (report/run_folder.py) and a
    resumed bench call it on what they read."""
    for m in measurements:
        if m.figures_of is None:
            m.figures_of = figures_of_fabric(m.fabric)


def figures_of_fabric(name: Optional[str]) -> Optional[str]:
    """What the figures of the fabric a record names are of, the name taken exactly as written
    (an import wrote ``cuda``: real GPUs); None for a name gputopo never wrote (then judged
    against no link's rate, as before the field)."""
    f = FABRICS.get(name) if isinstance(name, str) else None
    return f.figures_of if f is not None else None
