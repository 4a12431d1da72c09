"""`gputopo place` output: the ranked GPU sets, the environment lines to use the best one, and
where nn.DataParallel is safe. Text for people, JSON (``schema_version``) for scripts.

CUDA_VISIBLE_DEVICES takes CUDA's numbers (or GPU UUIDs), not nvidia-smi's: CUDA numbers GPUs
fastest first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, so the line sets that too and gives the
positions in PCI bus order (what nvidia-smi shows when every GPU is visible); the UUID form is
order-proof.
"""

from __future__ import annotations

from typing import Dict, List, Optional

from gputopo import SCHEMA_VERSION
from gputopo.model import Topology, is_value
from gputopo.probe.cuda_index import cuda_indices

from .placement import PairState, Placement


def cuda_numbers(topo: Topology) -> Dict[int, Optional[int]]:
    """NVML index -> CUDA index with CUDA_DEVICE_ORDER=PCI_BUS_ID and every GPU visible."""
    gpus = topo.gpus
    idx = cuda_indices([str(g.pci_bus_id) if is_value(g.pci_bus_id) else None for g in gpus],
                       [str(g.uuid) if is_value(g.uuid) else None for g in gpus],
                       [str(g.name) if is_value(g.name) else None for g in gpus],
                       env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    return {g.nvml_index: (i if isinstance(i, int) else None) for g, i in zip(gpus, idx)}


def _class(topo: Topology, a: int, b: int):
    """The pair's link class, or None where the topology has no pairs (an import without --topo)."""
    try:
        return topo.link_class(a, b)
    except KeyError:
        return None


def _is_nvlink(topo: Topology, a: int, b: int) -> bool:
    lc = _class(topo, a, b)
    return bool(lc is not None and lc.is_nvlink)


def env_for(topo: Topology, pl: Placement) -> Dict[str, str]:
    """The environment that runs a job on ``pl``'s GPUs safely."""
    nums = cuda_numbers(topo)
    env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    if all(nums.get(g) is not None for g in pl.gpus):
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(nums[g]) for g in pl.gpus)
    else:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(topo.gpu(g).uuid) for g in pl.gpus)
    if pl.state == "p2p-broken":
        has_nv = any(_is_nvlink(topo, a, b) for k, a in enumerate(pl.gpus) for b in pl.gpus[k + 1:])
        if has_nv:
            env["NCCL_P2P_LEVEL"] = "NVL"  # P2P over NVLink only; PCIe pairs through host memory
        else:
            env["NCCL_P2P_DISABLE"] = "1"
    return env


def uuids_of(topo: Topology, pl: Placement) -> Optional[str]:
    us = [topo.gpu(g).uuid for g in pl.gpus]
    return ",".join(map(str, us)) if all(is_value(u) for u in us) else None


def dp_safe_pairs(topo: Topology, states: Dict[tuple, PairState], usable: List[int]) -> List[tuple]:
    return sorted(p for p, st in states.items() if st.state in ("ok", "degraded") and set(p) <= set(usable))


def dp_sentence(topo: Topology, states, usable: List[int]) -> str:
    """Where nn.DataParallel (raw peer copies between every pair) is safe on this machine."""
    safe = dp_safe_pairs(topo, states, usable)
    allp = sorted(p for p in states if set(p) <= set(usable))
    if not allp:
        return "No GPU pair to place on: nn.DataParallel on one GPU makes no peer copies."
    if safe == allp:
        return ("nn.DataParallel is safe on every pair of the GPUs that can be placed"
                + (f" ({len(usable)} of {len(topo.gpus)})." if len(usable) < len(topo.gpus) else "."))
    if not safe:
        return "nn.DataParallel is safe on no pair here: use DDP (with the NCCL setting above)."
    if all(_is_nvlink(topo, *p) for p in safe):
        listed = " ".join(f"{a},{b}" for a, b in safe[:12]) + (" ..." if len(safe) > 12 else "")
        return (f"nn.DataParallel is safe only on NVLink pairs here ({listed}); elsewhere use DDP, whose "
                "NCCL can route around the broken peer path.")
    unsafe = [p for p in allp if p not in safe]
    by_class: Dict[str, List[tuple]] = {}
    for p in unsafe:
        by_class.setdefault(str(_class(topo, *p) or "class unknown"), []).append(p)
    listed = "; ".join(f"{lc}: " + " ".join(f"{a},{b}" for a, b in ps[:8]) + (" ..." if len(ps) > 8 else "")
                       for lc, ps in by_class.items())
    return (f"nn.DataParallel is safe on {len(safe)} of {len(allp)} pairs; not on {listed}: there use DDP, "
            "whose NCCL can route around the broken peer path.")


def _where(pl: Placement, topo: Topology) -> str:
    if pl.worst_pair is None:
        return "one GPU"
    a, b = pl.worst_pair
    txt = f"worst pair {a},{b} {_class(topo, a, b) or '(class unknown)'}"
    if pl.worst_gbps is not None:
        txt += f" {pl.worst_gbps:.3g} GB/s measured"
    if pl.unmeasured:
        txt += f", {pl.unmeasured} pair{'s' if pl.unmeasured > 1 else ''} not measured"
    return txt


def placement_text(topo: Topology, n: int, ranked: List[Placement], states, usable: List[int],
                   notes: List[str], source: str) -> str:
    lines = []
    if topo.simulated:
        lines.append(f"SIMULATED: machine '{topo.machine}' is simulated; advice from its {source}")
    best = ranked[0]
    state = {"ok": "", "degraded": " (degraded: see the notes)",
             "p2p-broken": " (its PCIe peer path is broken or suspect: only with the NCCL setting below, and DDP)"}
    lines.append(f"Best {n} GPU{'s' if n > 1 else ''}: {','.join(map(str, best.gpus))} "
                 f"({_where(best, topo)}){state[best.state]}")
    env = env_for(topo, best)
    lines.append("  export " + " ".join(f"{k}={v}" for k, v in env.items()))
    lines.append("  CUDA_VISIBLE_DEVICES takes CUDA's numbers: with CUDA_DEVICE_ORDER=PCI_BUS_ID they are the "
                 "PCI bus order nvidia-smi shows (when no CUDA_VISIBLE_DEVICES is already set)")
    u = uuids_of(topo, best)
    if u:
        lines.append(f"  or, order-proof: CUDA_VISIBLE_DEVICES={u}")
    nccl = {k: v for k, v in env.items() if k.startswith("NCCL_")}
    lines.append("  NCCL: " + (" ".join(f"{k}={v}" for k, v in nccl.items()) + " (P2P "
                               + ("over NVLink only" if "NCCL_P2P_LEVEL" in nccl else "off")
                               + "; the broken PCIe peer path goes through host memory)"
                               if nccl else "no settings needed"))
    lines.append("  nn.DataParallel: " + ("safe on this set" if best.dataparallel_safe else
                                         "NOT safe on this set (raw peer copies over the broken path): use DDP"))
    for r in best.reasons[:4]:
        lines.append(f"  note: {r}")
    if len(ranked) > 1:
        lines.append("Next best:")
        for k, pl in enumerate(ranked[1:], 2):
            lines.append(f"  {k}. {','.join(map(str, pl.gpus))} ({_where(pl, topo)})"
                         + ("" if pl.state == "ok" else f" [{pl.state}]"))
    lines.append(dp_sentence(topo, states, usable))
    lines += [f"note: {x}" for x in notes]
    return "\n".join(lines)


def placement_json(topo: Topology, n: int, ranked: List[Placement], states, usable: List[int],
                   exclude: List[int], out_gpus: Dict[int, str], notes: List[str], source: str) -> dict:
    return {
        "schema_version": SCHEMA_VERSION, "simulated": topo.simulated, "machine": topo.machine,
        "source": source, "gpus_wanted": n, "exclude": sorted(exclude),
        "left_out": {str(g): why for g, why in sorted(out_gpus.items())},
        "sets": [{"gpus": list(pl.gpus), "state": pl.state, "worst_pair": list(pl.worst_pair) if pl.worst_pair else None,
                  "worst_link_class": pl.worst_class, "worst_gbps": pl.worst_gbps,
                  "pairs_not_measured": pl.unmeasured, "numa_nodes": pl.numa_nodes,
                  "dataparallel_safe": pl.dataparallel_safe, "env": env_for(topo, pl),
                  "uuids": uuids_of(topo, pl), "reasons": pl.reasons} for pl in ranked],
        "dataparallel_safe_pairs": [list(p) for p in dp_safe_pairs(topo, states, usable)],
        "dataparallel": dp_sentence(topo, states, usable),
        "notes": notes,
    }
