"""The one reader of failure records: the ``hang`` / ``crash`` finding of a bench step or a
numerics way that did not finish (a StepFailure, model/step_failure.py: the fact the bench's
runner or the numerics' sink recorded, or the run folder's reader derived from an older
numerics record): where (GPUs and link class), in which step, during which case and size (a
way: which training run), and what happened; and the cause of a worker the kernel killed or
that ran out of memory (not the link's doing), in words that say only what the facts support
(:data:`SIGKILL_CAUSE`). The supervisors (bench/runner.py, numerics/) decide that a job
failed; the words and the cause are decided here, for every path of the report
(event_findings.py, measured_findings.py, numerics_record.py, why/culprits.py).
"""

from __future__ import annotations

import signal
from typing import Iterable, List, Optional

from gputopo.bench.options import format_size
from gputopo.model import Finding
from gputopo.model.finding import where_text
from gputopo.model.step_failure import StepFailure
from gputopo.numerics.result import WAY_NAMES

#: The cause of a worker killed by SIGKILL, which a worker never sends itself: what that fact
#: supports, no more (the one wording; gputopo/workers/outcome.py's SIGKILL_WHY says the same).
SIGKILL_CAUSE = ("the worker was killed by SIGKILL, which a worker never sends itself: the kernel's "
                 "out-of-memory killer (the OOM killer, when host memory ran out) is one cause, a person "
                 "or the job scheduler others; this says nothing about the GPU link")


def kill_reason_cause(reason: str):
    """(culprit, cause, remedies) of a worker the kernel killed or that ran out of memory, from
    the reason its crash record gives ("killed by SIGKILL", "CUDA out of memory", ...)."""
    low = reason.lower()
    if low.startswith("killed") or "sigkill" in low or "oom" in low:
        return ("host-memory", SIGKILL_CAUSE,
                ["check `dmesg | grep -i -e 'out of memory' -e 'killed process'`",
                 "measure smaller sizes (--sizes) or fewer pairs at once (gputopo bench --pairs I,J), "
                 "or free host memory", "rerun the pair"])
    if "cuda" in low or "outofmemoryerror" in low:
        return ("gpu-memory", "the GPU ran out of memory (another process on it, or the test's sizes too large)",
                ["check `nvidia-smi` for other processes on these GPUs", "rerun with smaller sizes or --quick"])
    return ("host-memory", "the worker ran out of host memory",
            ["free host memory or run fewer pairs at once (gputopo bench --pairs I,J)", "rerun the pair"])


def killed_cause(code: Optional[int]):
    """(cause, remedies) for a worker killed by SIGKILL (:data:`SIGKILL_CAUSE`). Not evidence
    against the link, so the report must not blame IOMMU/ACS for it. (None, None) for any
    other exit."""
    if code != -signal.SIGKILL:
        return None, None
    _, cause, remedies = kill_reason_cause("killed by SIGKILL")
    return cause, remedies


def step_failure_finding(failure: StepFailure) -> Finding:
    """The finding of ``failure``: its kind, on its GPUs, worded with the step and the case it
    was in (a numerics way's: with its training run, as the numerics worded it); a worker killed
    by SIGKILL gets that cause (the report gives the others theirs)."""
    cause, remedies = killed_cause(failure.evidence.get("exitcode"))
    if failure.numerics:
        way = failure.evidence.get("way")
        name = WAY_NAMES.get(str(way), str(way))
        what = "hung" if failure.kind == "hang" else "crashed"
        return Finding(failure.kind, "error",
                       f"{where_text(failure.gpus, failure.link_class)}: {name} training run {what}: {failure.what}",
                       gpus=list(failure.gpus), link_class=failure.link_class, evidence=dict(failure.evidence),
                       cause=cause, remedies=list(remedies or []))
    gpus = ",".join(map(str, failure.gpus))
    where = f"GPUs {gpus}" if len(failure.gpus) > 1 else f"GPU {gpus}"
    if failure.link_class:
        where += f" ({failure.link_class})"
    case = failure.evidence.get("case")
    during = ""
    if case:
        way = f" {case['direction']}" if case.get("direction") else ""
        during = f" during {case['test']}{way} at {format_size(case['size_bytes'])}"
    return Finding(kind=failure.kind, severity="error",
                   message=f"{where}: {failure.kind} in the {failure.group} step{during}: {failure.what}",
                   gpus=list(failure.gpus), link_class=failure.link_class, evidence=dict(failure.evidence),
                   cause=cause, remedies=list(remedies or []))


def step_failure_findings(failures: Iterable[StepFailure]) -> List[Finding]:
    return [step_failure_finding(f) for f in failures]
