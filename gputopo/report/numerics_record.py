"""The findings a numerics record makes (a line of numerics.jsonl, as a dict): ``nan`` /
``diverged`` with the way and the step, ``hang`` / ``crash`` (the finding of its failure record,
step_failures.py's, the one reader of them); and the run's chaotic-job warning.

Judging lives in gputopo.report (house rule: measuring code returns measurements). A numerics
run's own findings (:func:`numerics_run_findings`, with a quick cause where the ways alone tell
it) are what its caller shows at its end; numerics_findings.py builds on the same findings from
the run folder, adding the host facts and the analysed cause. No torch.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Mapping, Optional

from gputopo.model import Finding
from gputopo.model.finding_kinds import family
from gputopo.model.finding import where_text
from gputopo.model.step_failure import numerics_failure, numerics_record_evidence
from gputopo.numerics.outcome import NumericsRun
from gputopo.numerics.result import OTHER_WAY, WAY_NAMES, NumericsResult, record_gpus
from gputopo.numerics.verdict import BAD_VERDICTS, FAILED_VERDICTS

from .step_failures import step_failure_finding


def record_finding(rec: Mapping[str, Any], others: Mapping[str, Mapping[str, Any]],
                   link_class: Optional[str] = None) -> Optional[Finding]:
    """The finding ``rec`` makes, if any, without a cause. ``others``: the records of the other
    ways on the same GPUs by way (the DP finding names DDP's verdict, and vice versa);
    ``link_class``: the pair's class when the record names none.

    Severity: ``error``, but ``warning`` for the one-GPU reference (the job itself is unstable:
    that says nothing about the GPUs) and ``info`` for a record marked ``expected_difference``
    (a difference by design, e.g. BatchNorm statistics per replica)."""
    verdict, way = rec.get("verdict"), rec.get("way")
    if verdict not in BAD_VERDICTS + FAILED_VERDICTS:
        return None
    gpus = record_gpus(rec)
    lc = rec.get("link_class") or link_class
    if verdict in FAILED_VERDICTS:  # its failure record, read by the one reader of them all
        return step_failure_finding(dataclasses.replace(numerics_failure(rec), link_class=lc))
    who = where_text(gpus, lc) if gpus else "reference run"
    name = WAY_NAMES.get(str(way), str(way))
    evidence: Dict[str, Any] = numerics_record_evidence(rec)
    what = "loss/gradient went NaN/Inf" if verdict == "nan" else "loss diverged from the reference"
    step = f" from step {rec['step']}" if rec.get("step") is not None else ""
    first_dev = rec.get("first_deviation_step")
    if verdict == "diverged" and isinstance(first_dev, int) and rec.get("step") not in (None, first_dev):
        step += f" (off by more than the tolerance from step {first_dev})"
    msg = f"{who}: {name} {what}{step}"
    other_way = OTHER_WAY.get(str(way))
    other = others.get(other_way) if other_way else None
    if other is not None and other_way is not None:
        evidence[f"{other_way}_verdict"] = other.get("verdict")
        msg += f"; {WAY_NAMES[other_way]} on the same GPUs: {other.get('verdict')}"
    severity = "error"
    if way == "reference":
        severity = "warning"
    elif rec.get("expected_difference"):
        severity = "info"
        msg += f" (expected: {rec['expected_difference']})"
    return Finding(verdict, severity, msg, gpus=list(gpus) or None, link_class=lc, evidence=evidence)


#: Reduction-order noise above this (relative loss) means the job itself is chaotic at these
#: settings (normal fp32 noise of this job is ~1e-7): divergence then says little.
CHAOTIC_NOISE = 1e-4


def chaotic_findings(out: NumericsRun) -> List[Finding]:
    """A ``noisy`` warning when re-running the reference with only the summation order changed
    moves the loss more than CHAOTIC_NOISE: then divergence says little."""
    found = []
    for scope, tol in out.tolerances.items():
        if tol.noise_loss_rel > CHAOTIC_NOISE:
            where = "" if scope == "run" else f" (GPUs {scope})"
            found.append(Finding(
                "noisy", "warning",
                f"numerics{where}: re-running the one-GPU job with only the fp32 summation order "
                f"changed moves the loss by {tol.noise_loss_rel:.1e} (relative): the job is "
                f"chaotic at lr {out.options.lr:g}, so the tolerance is wide and only NaN/Inf "
                "are meaningful; lower --lr",
                evidence={"test": "numerics", "noise_loss_rel": tol.noise_loss_rel,
                          "tolerance_loss_rel": tol.loss_rel, "lr": out.options.lr},
                remedies=["lower --lr"]))
    return found


def numerics_run_findings(out: NumericsRun) -> List[Finding]:
    """A numerics run's own findings, as its records came in: each record's (:func:`finding_for`,
    against the records on the same GPUs before it; a DataParallel nan/diverged one again once
    DDP's record names DDP's verdict), then the chaotic-job warning."""
    found: List[Finding] = []
    for n, rec in enumerate(out.results):
        before = out.results[:n]
        f = finding_for(rec, {r.way: r for r in before if r.gpus == rec.gpus})
        if f is not None:
            found.append(f)
        if rec.way != "ddp":
            continue
        for k, old in enumerate(found):  # a DP finding made before DDP ran can now name DDP's verdict
            if old.gpus == list(rec.gpus) and old.evidence.get("way") == "dp" and family(old.kind) == "numerics":
                dp = next(r for r in before if r.gpus == rec.gpus and r.way == "dp")
                found[k] = finding_for(dp, {"ddp": rec}) or old
    return found + chaotic_findings(out)


def finding_for(rec: NumericsResult, others: Dict[str, NumericsResult]) -> Optional[Finding]:
    """The finding a record makes, if any (record_finding): nan/diverged (with way and step), hang,
    crash; with a quick cause where the ways alone tell it (the report adds the host's)."""
    f = record_finding(rec.to_json(), {way: o.to_json() for way, o in others.items()})
    if f is None or f.kind not in BAD_VERDICTS:
        return f
    other = others.get(OTHER_WAY.get(rec.way, ""))
    if rec.way == "reference":
        return dataclasses.replace(f, cause="the one-GPU job itself is unstable: the model or "
                                            "learning rate, not the interconnect",
                                   remedies=["lower --lr"])
    if rec.way == "dp" and other is not None and other.verdict == "ok":
        return dataclasses.replace(f, cause=(
            "DataParallel's raw peer copies corrupt data between these GPUs while NCCL "
            f"(DDP, path {other.paths.get('all_reduce', '?')}) trains fine: the PCIe "
            "peer-to-peer path is likely broken (IOMMU DMA translation or ACS redirect)"),
            remedies=["use DistributedDataParallel instead of DataParallel",
                      "boot with iommu=pt (or disable the IOMMU)",
                      "disable PCIe ACS redirect on the bridges between the GPUs",
                      "NCCL_P2P_DISABLE=1 keeps NCCL off the peer path"])
    return f
