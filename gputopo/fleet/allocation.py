"""Which GPUs `gputopo gate` checks: ``--gpus LIST`` or ``--allocated`` (the job's own GPUs).

``--allocated`` reads, in this order, the first of these that is set:

- ``SLURM_JOB_GPUS`` (a Slurm prolog): the node's device numbers of the job's GPUs, comma
  separated: the minor numbers of ``/dev/nvidia<N>`` that gres.conf's ``File=`` names, mapped to
  GPUs through NVML's ``nvmlDeviceGetMinorNumber`` (never taken as NVML or CUDA indices, which
  may differ from them);
- ``CUDA_VISIBLE_DEVICES`` as Slurm sets it for a prolog: the same device numbers, or GPU UUIDs;
- ``NVIDIA_VISIBLE_DEVICES`` (a container: the NVIDIA container toolkit's variable): ``all``,
  GPU UUIDs, or device numbers; inside the container NVML sees only these GPUs, so ``all``
  means every GPU NVML lists.

Every GPU is then known by its NVML index, UUID and PCI bus id; the workers are started with
``CUDA_VISIBLE_DEVICES`` set to the UUIDs (:func:`cuda_visible_uuids`), so CUDA's own ordering
cannot swap two GPUs. A value that names no GPU of the machine, names one twice, or is not a
number or UUID is a UsageError: one line naming the variable and the value (exit 2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional

from gputopo.console import clip
from gputopo.errors import UsageError
from gputopo.model import Topology, is_value

#: The variables --allocated reads, in order.
ALLOCATION_VARS = ("SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")
_UUID_RE = re.compile(r"^GPU-[0-9a-fA-F-]+$")
_NUMBER_RE = re.compile(r"^\d{1,6}$")


@dataclass
class Selection:
    """The GPUs to check (NVML indices, ascending) and where the list came from."""

    gpus: List[int]
    source: str
    notes: List[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"gpus": list(self.gpus), "source": self.source, "notes": list(self.notes)}


def _by_uuid(topo: Topology) -> Dict[str, int]:
    return {str(g.uuid).lower(): g.nvml_index for g in topo.gpus if is_value(g.uuid)}


def _entries(var: str, value: str) -> List[str]:
    parts = [p.strip() for p in value.split(",")]
    if not value.strip() or any(not p for p in parts):
        raise UsageError(f"--allocated: {var}={clip(value)!r}: expected GPUs separated by commas")
    return parts


def _resolve(var: str, value: str, topo: Topology, minors: Mapping[int, int]) -> List[int]:
    """Each entry (a device number or a UUID) to an NVML index."""
    uuids = _by_uuid(topo)
    by_minor = {m: k for k, m in minors.items()}
    out: List[int] = []
    for e in _entries(var, value):
        if _UUID_RE.match(e):
            g = uuids.get(e.lower())
            if g is None:
                raise UsageError(f"--allocated: {var}={clip(value)}: no GPU of this machine has UUID {clip(e)}")
        elif _NUMBER_RE.match(e):
            if not by_minor:
                raise UsageError(f"--allocated: {var}={clip(value)}: the GPUs' device (minor) numbers could "
                                 "not be read from NVML, so device numbers cannot be mapped to GPUs")
            g = by_minor.get(int(e))
            if g is None:
                have = ", ".join(str(m) for m in sorted(by_minor))
                raise UsageError(f"--allocated: {var}={clip(value)}: no GPU has device number {e} "
                                 f"(/dev/nvidia{e}); this machine's are {have}")
        else:
            raise UsageError(f"--allocated: {var}={clip(value)}: {clip(e)!r} is neither a device number "
                             "nor a GPU UUID")
        if g in out:
            raise UsageError(f"--allocated: {var}={clip(value)}: GPU {g} is named twice")
        out.append(g)
    return sorted(out)


def allocated(env: Mapping[str, str], topo: Topology, minors: Mapping[int, int]) -> Selection:
    """The job's GPUs from the first allocation variable set (module docstring)."""
    for var in ALLOCATION_VARS:
        value = env.get(var)
        if value is None:
            continue
        text = value.strip()
        if var == "NVIDIA_VISIBLE_DEVICES":
            low = text.lower()
            if low == "all":
                return Selection([g.nvml_index for g in topo.gpus], f"{var}=all",
                                 ["NVIDIA_VISIBLE_DEVICES=all: every GPU NVML lists in this container"])
            if low in ("", "none", "void"):
                raise UsageError(f"--allocated: {var}={clip(value)!r}: this container was given no GPU")
        return Selection(_resolve(var, text, topo, minors), f"{var}={clip(text, 200)}")
    raise UsageError("--allocated: no allocation found: none of " + ", ".join(ALLOCATION_VARS)
                     + " is set (run it from a Slurm prolog or a GPU container, or name the GPUs with --gpus)")


def selected_gpus(text: str, topo: Topology) -> Selection:
    """``--gpus LIST``: NVML indices and ranges (``0-3,5``), ``all``, or GPU UUIDs."""
    from gputopo.bench.options import parse_gpus

    parts = [p.strip() for p in str(text).split(",")]
    if parts and all(_UUID_RE.match(p) for p in parts if p) and any(parts):
        uuids = _by_uuid(topo)
        out: List[int] = []
        for p in parts:
            g = uuids.get(p.lower())
            if g is None:
                raise UsageError(f"--gpus {clip(text)}: no GPU of this machine has UUID {clip(p)}")
            if g in out:
                raise UsageError(f"--gpus {clip(text)}: GPU {g} is named twice")
            out.append(g)
        return Selection(sorted(out), f"--gpus {clip(text, 200)}")
    return Selection(parse_gpus(text, len(topo.gpus)), f"--gpus {clip(text, 200)}")


def cuda_visible_uuids(topo: Topology, gpus: List[int]) -> Optional[str]:
    """``CUDA_VISIBLE_DEVICES`` for the workers: the UUIDs of ``gpus``; None when one is unknown."""
    out = []
    for g in gpus:
        u = topo.gpu(g).uuid
        if not is_value(u):
            return None
        out.append(str(u))
    return ",".join(out)


def minor_numbers(sim: Optional[str] = None) -> Dict[int, int]:
    """NVML index -> device minor number of this machine's GPUs, or of the simulated machine ``sim``'s
    (gputopo/probe/nvml_minor.py reads them)."""
    from gputopo.probe.nvml_minor import read_minor_numbers
    from gputopo.sim.nvml_door import read_nvml

    return read_nvml(sim, read_minor_numbers)
