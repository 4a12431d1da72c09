"""`nan` / `diverged` findings from the training-numerics records (numerics.jsonl). (The
`hang` / `crash` of a way that produced nothing is its failure record's finding, made by the
one reader of failure records, step_failures.py, as a bench step's is.)

Record shape (one per pair and way): ``{"gpus": [i, j], "way": "dp" | "ddp" | "reference",
"verdict": "ok" | "nan" | "diverged", "step": N, ...}``; optional ``losses`` (a list) feeds
the loss-curve plot. The finding itself (message, evidence, severity) is the numerics' own
(numerics_record.py); the diagnosis added here compares ways on the same GPUs:
DataParallel bad while DDP is fine points at raw peer copies (the P2P path); both bad points at
the GPUs; the reference bad too points at the model or the learning rate, not the hardware. A
hang or crash is a step failure like the bench's: event_findings.py gives it its host facts and cause.
"""

from __future__ import annotations

import dataclasses
from typing import AbstractSet, Dict, List, Optional

from gputopo.model import Finding, Topology
from gputopo.numerics.result import OTHER_WAY, WAY_NAMES, record_gpus
from gputopo.numerics.verdict import BAD_VERDICTS

from .why.causes import REMEDY_AVOID, REMEDY_DDP, REMEDY_GPU_HEALTH, REMEDY_NCCL_P2P, path_facts, peer_path_broken
from gputopo.model.topology import class_of
from .numerics_record import record_finding


def numerics_findings(records: List[Dict], topo: Optional[Topology],
                      corrupt_pairs: AbstractSet[tuple] = frozenset()) -> List[Finding]:
    """The numerics' own findings of the bad records (numerics_record.py), with the host
    facts on their path and the cause and remedies the ways and the host together point at."""
    by_gpus: Dict[tuple, Dict[str, Dict]] = {}
    for rec in records:
        by_gpus.setdefault(record_gpus(rec), {})[str(rec.get("way"))] = rec
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
        f = record_finding(rec, others, lc)
        if f is None:  # (a bad verdict always makes one)
            continue
        other_way = OTHER_WAY.get(str(way))
        other = others.get(other_way) if other_way else None
        facts = path_facts(topo, list(gpus), f.link_class)
        evidence = {**f.evidence, **facts.evidence()}
        if gpus in corrupt_pairs:
            evidence["corrupt_copies_on_pair"] = True
        reference_bad = shared_ref_bad or others.get("reference", {}).get("verdict") in BAD_VERDICTS
        if rec.get("expected_difference") and way != "reference":
            cause, remedies = f"expected by design: {rec['expected_difference']}", []
        elif reference_bad and way != "reference":
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
                     other.get("verdict") in BAD_VERDICTS else WAY_NAMES.get(str(way), str(way)))
                     + ": a GPU fault (memory, ECC) or the collective transport on this path")
            remedies = [REMEDY_GPU_HEALTH, REMEDY_NCCL_P2P]
        out.append(dataclasses.replace(f, evidence=evidence, cause=cause,
                                       remedies=list(dict.fromkeys(remedies))))
    return out


def pair_numerics(records: List[Dict]) -> Dict[tuple, Dict[str, str]]:
    """{pair: {way: verdict}} for the per-pair table and heatmap."""
    out: Dict[tuple, Dict[str, str]] = {}
    for rec in records:
        gpus = record_gpus(rec)
        if len(gpus) >= 2 and rec.get("way") in ("dp", "ddp"):
            out.setdefault(gpus, {})[rec["way"]] = str(rec.get("verdict"))
    return out
