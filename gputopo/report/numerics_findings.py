"""`nan` / `diverged` findings from the training-numerics records (numerics.jsonl).

Record shape (one per pair and way): ``{"gpus": [i, j], "way": "dp" | "ddp" | "reference",
"verdict": "ok" | "nan" | "diverged", "step": N, ...}``; optional ``losses`` (a list) feeds
the loss-curve plot. The diagnosis compares ways on the same GPUs: DataParallel bad while DDP
is fine points at raw peer copies (the P2P path); both bad points at the GPUs; the reference bad
too points at the model or the learning rate, not the hardware.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Set

from gputopo.model import Finding, Topology

from .causes import REMEDY_AVOID, REMEDY_DDP, REMEDY_GPU_HEALTH, REMEDY_NCCL_P2P, path_facts, peer_path_broken
from .expected import class_of

WAY_NAMES = {"dp": "nn.DataParallel", "ddp": "DistributedDataParallel", "reference": "single-GPU reference"}
BAD_VERDICTS = ("nan", "diverged")
#: Big fields left out of a finding's evidence (they go to plots instead).
_BULKY = ("losses", "reference_losses", "gpus", "way", "verdict", "type", "schema_version", "notes")
#: Small tables of a record kept in the evidence (which transport each way used, the tolerance).
_SMALL_TABLES = ("paths", "tolerance")


def record_gpus(rec: Dict) -> tuple:
    return tuple(sorted(int(g) for g in (rec.get("gpus") or [])))


def _scalar(v) -> bool:
    if isinstance(v, float):
        return math.isfinite(v)
    return isinstance(v, (int, str, bool)) or v is None


def numerics_findings(records: List[Dict], topo: Optional[Topology],
                      corrupt_pairs: Set[tuple] = frozenset()) -> List[Finding]:
    by_gpus: Dict[tuple, Dict[str, Dict]] = {}
    for rec in records:
        by_gpus.setdefault(record_gpus(rec), {})[rec.get("way")] = rec
    # A reference that goes bad itself (on the same GPUs, or a shared one-GPU reference) means
    # the job is unstable: then no way's failure says anything about the interconnect.
    shared_ref_bad = any(r.get("way") == "reference" and r.get("verdict") in BAD_VERDICTS
                         and len(record_gpus(r)) < 2 for r in records)
    out = []
    for rec in records:
        verdict, way = rec.get("verdict"), rec.get("way")
        if verdict not in BAD_VERDICTS:
            continue
        gpus = record_gpus(rec)
        lc = rec.get("link_class") or (str(class_of(topo, gpus)) if class_of(topo, gpus) else None)
        others = by_gpus.get(gpus, {})
        other_way = {"dp": "ddp", "ddp": "dp"}.get(way)
        other = others.get(other_way) if other_way else None
        facts = path_facts(topo, list(gpus), lc)
        evidence = {"way": way, "step": rec.get("step"),
                    **{k: v for k, v in rec.items() if k not in _BULKY and k != "step" and _scalar(v)},
                    **{k: rec[k] for k in _SMALL_TABLES if isinstance(rec.get(k), dict) and rec[k]},
                    **facts.evidence()}
        if other is not None:
            evidence[f"{other_way}_verdict"] = other.get("verdict")
        if gpus in corrupt_pairs:
            evidence["corrupt_copies_on_pair"] = True
        name = WAY_NAMES.get(way, str(way))
        what = "went NaN" if verdict == "nan" else "diverged from the reference"
        step = f" at step {rec['step']}" if rec.get("step") is not None else ""
        who = f"GPUs {','.join(map(str, gpus))}" + (f" ({lc})" if lc else "") if gpus else "reference run"
        msg = f"{who}: {name} loss {what}{step}"
        if other is not None:
            msg += f"; {WAY_NAMES[other_way]} on the same GPUs: {other.get('verdict')}"
        reference_bad = shared_ref_bad or others.get("reference", {}).get("verdict") in BAD_VERDICTS
        if reference_bad and way != "reference":
            cause = "the single-GPU reference goes bad too: the model or learning rate, not the interconnect"
            remedies = ["lower the learning rate or check the model; rerun gputopo's numerics with its defaults"]
        elif way == "reference":
            cause = "the single-GPU reference itself is numerically unstable: the model or learning rate"
            remedies = ["lower the learning rate or check the model"]
        elif way == "dp" and (other is None or other.get("verdict") == "ok"):
            base, host_remedies = peer_path_broken(facts, "corrupting DataParallel's tensors")
            cause = ("nn.DataParallel scatters its inputs and gathers its outputs with raw peer copies"
                     + ("" if other is None else " while DDP on the same GPUs trains fine")
                     + ("; the same pair returned corrupted peer copies" if gpus in corrupt_pairs else "")
                     + f": {base}")
            remedies = [REMEDY_DDP] + [r for r in host_remedies if r != REMEDY_DDP] + [REMEDY_AVOID]
        else:
            cause = ("training goes bad on these GPUs with " + ("both ways" if other is not None and
                     other.get("verdict") in BAD_VERDICTS else name)
                     + ": a GPU fault (memory, ECC) or the collective transport on this path")
            remedies = [REMEDY_GPU_HEALTH, REMEDY_NCCL_P2P]
        severity = "error"
        if way == "reference":
            severity = "warning"  # the job itself is unstable: says nothing about the GPUs
        elif rec.get("expected_difference"):
            severity = "info"  # a difference by design (e.g. BatchNorm statistics per replica)
            msg += f" (expected: {rec['expected_difference']})"
            cause, remedies = f"expected by design: {rec['expected_difference']}", []
        out.append(Finding(verdict, severity, msg, gpus=list(gpus) or None, link_class=lc,
                           evidence=evidence, cause=cause, remedies=list(dict.fromkeys(remedies))))
    return out


def pair_numerics(records: List[Dict]) -> Dict[tuple, Dict[str, str]]:
    """{pair: {way: verdict}} for the per-pair table and heatmap."""
    out: Dict[tuple, Dict[str, str]] = {}
    for rec in records:
        gpus = record_gpus(rec)
        if len(gpus) >= 2 and rec.get("way") in ("dp", "ddp"):
            out.setdefault(gpus, {})[rec["way"]] = str(rec.get("verdict"))
    return out
