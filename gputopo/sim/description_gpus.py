"""The GPUs of a machine description: the ``[[gpu]]`` entries (or ``gpu_count``, or the matrix's
GPUs) over ``[defaults]``, as NVML would report them: name and model, bus id, UUID, NUMA node,
CPU affinity, PCIe generation and width, NVLink version, MIG mode, health (health.py) and
NVLink fabric registration (fabric.py).
Their NVLink ports are made by description_nvlinks.py.
"""

from __future__ import annotations

import re
import uuid as uuid_mod
from typing import Any, Dict, List, Optional, Tuple

from gputopo.model.cpu_list import cpu_list_problem, numa_node_problem
from .description_checks import check_unique_uuids, resolve_model
from .description_context import (
    DescContext,
    check_int,
    check_keys,
    check_label,
    check_str,
)
from .fabric import FABRIC_KEYS, parse_fabric
from .health import HEALTH_KEYS, parse_health
from .pci import PciAddress
from .records import GpuDesc

#: Keys of a [[gpu]] entry; [defaults] takes the same but bus_id and uuid (one per GPU).
GPU_KEYS = {"bus_id", "uuid", "name", "numa_node", "cpu_affinity", "pcie_gen", "pcie_width",
            "pcie_gen_current", "pcie_width_current", "pcie_replay", "nvlink_version", "nvlinks",
            "nvlinks_down", "nvlink_errors", "mig", "model"} | HEALTH_KEYS | FABRIC_KEYS
DEFAULT_KEYS = GPU_KEYS - {"bus_id", "uuid"}

_CPULIST_RE = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
_UUID_RE = re.compile(r"^GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def gpu_entries(ctx: DescContext, data: Dict[str, Any], matrix) -> List[Dict[str, Any]]:
    """The [[gpu]] tables; without any, one empty entry per GPU of the matrix or ``gpu_count``."""
    entries = data.get("gpu")
    if entries is None:
        if matrix is not None:
            n = matrix.gpu_count
            if "gpu_count" in data and data["gpu_count"] != n:
                raise ctx.error(f"gpu_count = {data['gpu_count']!r} but the matrix has {n} GPUs", "gpu_count")
        elif "gpu_count" in data:
            n = check_int(ctx, data["gpu_count"], 1, 4096, "gpu_count")
        else:
            raise ctx.error("no GPUs: add [[gpu]] entries (or a matrix, or gpu_count)", "gpu")
        entries = [{} for _ in range(n)]
    else:
        if not isinstance(entries, list) or not entries:
            raise ctx.error("expected one or more [[gpu]] tables", "gpu")
        n = len(entries)
        if "gpu_count" in data and data["gpu_count"] != n:
            raise ctx.error(f"gpu_count = {data['gpu_count']!r} but there are {n} [[gpu]] entries", "gpu_count")
        if matrix is not None and matrix.gpu_count != n:
            raise ctx.error(f"the matrix has {matrix.gpu_count} GPUs but there are {n} [[gpu]] entries",
                            "matrix")
    return entries


def build_gpus(ctx: DescContext, machine: str, entries: List[Dict[str, Any]], defaults: Dict[str, Any],
               matrix, nvswitch: bool = False) -> Tuple[List[GpuDesc], List[Dict[str, Any]]]:
    """(the GPUs, each GPU's entry over [defaults]: its spec, which the NVLink wiring reads).
    ``nvswitch``: an NVSwitch box, whose Hopper-or-later GPUs are registered with the fabric."""
    gpus: List[GpuDesc] = []
    specs: List[Dict[str, Any]] = []
    seen_bus: Dict[str, int] = {}
    for idx, entry in enumerate(entries):
        key = ("gpu", idx)
        check_keys(ctx, entry, GPU_KEYS, *key)
        spec = dict(defaults)
        spec.update(entry)
        specs.append(spec)

        def where(k, key=key, entry=entry):
            return key + (k,) if k in entry else ("defaults", k)

        name = spec.get("name")
        if name is None:
            raise ctx.error("missing GPU name (set name in [defaults] or in the [[gpu]] entry)", *key, "name")
        name = check_label(ctx, name, *where("name"))
        model, model_key = resolve_model(ctx, name, spec.get("model"), where("name"), where("model"))

        if "bus_id" in spec:
            try:
                addr = PciAddress.parse(check_str(ctx, spec["bus_id"], *key, "bus_id"))
            except ValueError as exc:
                raise ctx.error(str(exc), *key, "bus_id") from None
        else:
            addr = PciAddress(idx // 8, 0x18 + (idx % 8) * 0x18, 0, 0)
        if addr.nvml in seen_bus:
            raise ctx.error(f"bus id {addr.lspci} is also GPU {seen_bus[addr.nvml]}'s", *key, "bus_id")
        seen_bus[addr.nvml] = idx

        if "uuid" in spec:
            uid = check_str(ctx, spec["uuid"], *key, "uuid")
            if not _UUID_RE.match(uid):
                raise ctx.error(f"expected a GPU UUID like \"GPU-1a2b3c4d-...\" (GPU- and 8-4-4-4-12 hex), "
                                f"got {uid!r}", *key, "uuid")
        else:
            uid = "GPU-" + str(uuid_mod.uuid5(uuid_mod.NAMESPACE_URL, f"gputopo-sim/{machine}/{addr.nvml}"))

        numa: Optional[int]
        if "numa_node" in spec:
            v = spec["numa_node"]
            if v == "unsupported":
                numa = None
            else:
                numa = check_int(ctx, v, 0, 1023, *where("numa_node"))
        elif matrix is not None and isinstance(matrix.numa_affinity.get(idx), int):
            numa = matrix.numa_affinity[idx]
            if numa_node_problem(numa):
                raise ctx.error(f"the matrix's NUMA Affinity of GPU {idx}: {numa_node_problem(numa)}",
                                "matrix")
        elif matrix is not None:
            numa = None
        else:
            numa = 0

        if "cpu_affinity" in spec:
            v = spec["cpu_affinity"]
            if v == "unsupported":
                cpus = None
            else:
                cpus = check_str(ctx, v, *where("cpu_affinity")).replace(" ", "")
                why = cpu_list_problem(cpus)
                if why:
                    raise ctx.error(why, *where("cpu_affinity"))
        elif matrix is not None and matrix.cpu_affinity.get(idx):
            cpus = str(matrix.cpu_affinity[idx]).replace(" ", "")
            if not _CPULIST_RE.match(cpus):
                cpus = None
            elif cpu_list_problem(cpus):
                raise ctx.error(f"the matrix's CPU Affinity of GPU {idx}: {cpu_list_problem(cpus)}",
                                "matrix")
        else:
            node = numa or 0
            cpus = f"{node * 32}-{node * 32 + 31}"

        gen_max = check_int(ctx, spec.get("pcie_gen", 4), 1, 6, *where("pcie_gen"))
        width_max = check_int(ctx, spec.get("pcie_width", 16), 1, 32, *where("pcie_width"))
        if width_max not in (1, 2, 4, 8, 12, 16, 32):
            raise ctx.error(f"PCIe width must be 1, 2, 4, 8, 12, 16 or 32 lanes, got {width_max}",
                            *where("pcie_width"))
        gen_cur = check_int(ctx, spec.get("pcie_gen_current", gen_max), 1, gen_max, *where("pcie_gen_current"))
        width_cur = check_int(ctx, spec.get("pcie_width_current", width_max), 1, width_max,
                         *where("pcie_width_current"))
        replay = check_int(ctx, spec.get("pcie_replay", 0), 0, 2**32 - 1, *where("pcie_replay"))
        version = spec.get("nvlink_version", model.nvlink_version)
        if version is not None:
            version = check_int(ctx, version, 1, 6, *where("nvlink_version"))
        mig = spec.get("mig", "disabled" if model.mig_capable else "unsupported")
        if mig not in ("disabled", "enabled", "unsupported"):
            raise ctx.error(f"expected \"disabled\", \"enabled\" or \"unsupported\", got {mig!r}", *where("mig"))
        gpus.append(GpuDesc(index=idx, name=name, uuid=uid, bus_id=addr.nvml, numa_node=numa,
                            cpu_affinity=cpus, pcie_gen=gen_cur, pcie_gen_max=gen_max,
                            pcie_width=width_cur, pcie_width_max=width_max, pcie_replay=replay,
                            pcie_width_healthy=width_cur,
                            nvlink_version=version, mig_mode=None if mig == "unsupported" else mig,
                            health=parse_health(ctx, spec, where, name), model=model_key,
                            fabric=parse_fabric(ctx, spec, where, model, nvswitch)))
    check_unique_uuids(ctx, [(g.uuid, ("gpu", g.index, "uuid")) for g in gpus])
    return gpus, specs
