"""`gputopo health --level quick` and `--level pairs`: gate's measuring, on the node's idle GPUs
only, as one more check of health's verdict.

- **quick** (check ``copies``): gate's verified peer copy per pair each way (``gate --measure
  copy``); **pairs** (check ``allreduce``): the same and gate's one small all_reduce over the set
  (``--measure copy+allreduce``).
- **Which GPUs**: those NVML lists no compute process on (gputopo/probe/nvml_processes.py). A GPU
  a job uses is never measured: it is "not judged: in use" (with its pids), and so is a GPU whose
  processes could not be read (it is not known to be idle). Fewer than two idle GPUs leave
  nothing to measure between GPUs: the check is not judged, saying so.
- **How**: health runs `gputopo gate` itself, on the idle GPUs (``--gpus``), with what is left
  of health's budget, its verdict kept in a folder of its own (never over the Prolog's
  ``gate-last.json``), and reads its JSON: gate's measuring and judging are the one code. gate is
  given the budget left less :data:`MARGIN_S`; one that has not answered when the budget is
  spent is stopped (SIGKILL; its workers watch their parent and end with it) and the check is
  not judged, never a failure.
- **Findings**: gate's broken (error) and degraded (warning) GPUs, pairs and all_reduce, made
  findings by gputopo/report/gate_findings.py (the report alone makes findings); one the passive
  checks already hold is not said twice.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from gputopo.model import Finding
from gputopo.probe.nvml_processes import GpuUse
from gputopo.report.gate_findings import gate_findings

from .checks import APPLICABLE, NOT_JUDGED, CheckResult

#: level -> (its check's name, gate's --measure)
LEVELS: Dict[str, Tuple[str, str]] = {"quick": ("copies", "copy"), "pairs": ("allreduce", "copy+allreduce")}
#: The least budget left worth starting gate with (its process, CUDA or sim start, one pair).
MIN_GATE_S = 3.0
#: Of the budget left, what gate is not given: its process's start and exit, and the reading of
#: its answer. gate ends itself at its budget; at the budget left it is stopped, so health
#: answers within its own budget (NPD and Slurm kill a check that does not).
MARGIN_S = 1.0


@dataclass
class Idle:
    """The GPUs to measure and the ones left alone, with why."""

    gpus: List[int]
    left: List[Tuple[int, str]]


def split_idle(use: Sequence[GpuUse]) -> Idle:
    """Idle GPUs (NVML read, no process) and the rest, "in use by pid ..." or not read."""
    idle, left = [], []
    for u in use:
        if u.idle:
            idle.append(u.index)
        elif u.pids:
            left.append((u.index, u.state()))
        else:
            left.append((u.index, f"not known to be idle: {u.state()}"))
    return Idle(idle, left)


def read_use(sim: Optional[str]) -> List[GpuUse]:
    """Each GPU's running processes: the simulated machine's fake NVML, or the driver's."""
    from gputopo.probe.nvml_processes import read_gpu_use
    from gputopo.sim.nvml_door import read_nvml

    return read_nvml(sim, read_gpu_use)


def gate_argv(gpus: Sequence[int], measure: str, budget_s: float, state_dir: str, sim: Optional[str]) -> List[str]:
    argv = [sys.executable, "-m", "gputopo", "gate", "--gpus", ",".join(str(g) for g in gpus), "--as", "json",
            "--measure", measure, "--budget", f"{budget_s:.1f}", "--state-dir", state_dir]
    return argv + (["--sim", sim] if sim else [])


def _in_use_text(left: List[Tuple[int, str]]) -> str:
    return "; ".join(f"GPU {g} not judged: {why}" for g, why in left)


def level_check(level: str, sim: Optional[str], left_s: float, known: Sequence[Finding],
                use: Optional[List[GpuUse]] = None) -> CheckResult:
    """The level's check: gate on the idle GPUs within ``left_s`` seconds (see the module)."""
    name, measure = LEVELS[level]
    try:
        use = read_use(sim) if use is None else use
    except Exception as e:  # noqa: BLE001 - no driver, a bad sim: this check could not look
        return CheckResult(name, NOT_JUDGED, f"running processes not read: {e}")
    idle = split_idle(use)
    in_use = _in_use_text(idle.left)
    if len(idle.gpus) < 2:
        why = f"{len(idle.gpus)} idle GPU(s): no pair to measure"
        return CheckResult(name, NOT_JUDGED, why + (f"; {in_use}" if in_use else ""))
    if left_s < MIN_GATE_S:
        return CheckResult(name, NOT_JUDGED, f"the budget left ({left_s:.1f} s) is under the {MIN_GATE_S:g} s "
                           "gate needs to start" + (f"; {in_use}" if in_use else ""))
    folder = tempfile.mkdtemp(prefix="gputopo-health-gate-")
    argv = gate_argv(idle.gpus, measure, left_s - MARGIN_S, folder, sim)
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES",
                                                           "NVIDIA_VISIBLE_DEVICES")}
    try:
        ran = subprocess.run(argv, capture_output=True, text=True, timeout=left_s, env=env,
                             stdin=subprocess.DEVNULL, errors="replace")
    except subprocess.TimeoutExpired:
        return CheckResult(name, NOT_JUDGED, f"gate did not answer within the {left_s:.1f} s left: stopped"
                           + (f"; {in_use}" if in_use else ""))
    except OSError as e:
        return CheckResult(name, NOT_JUDGED, f"gate could not be started: {e}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    try:
        doc = json.loads(ran.stdout)
    except ValueError:
        tail = (ran.stderr.strip().splitlines() or ["no output"])[-1]
        return CheckResult(name, NOT_JUDGED, f"gate exited {ran.returncode} without a verdict: {tail}")
    if not isinstance(doc, dict) or doc.get("verdict") in (None, "could-not-run"):
        return CheckResult(name, NOT_JUDGED, f"gate could not run: {doc.get('error') if isinstance(doc, dict) else doc}")
    findings = gate_findings(doc, known)
    basis = (f"gate --measure {measure} on idle GPUs {','.join(map(str, idle.gpus))}: {doc.get('verdict')}, "
             f"{doc.get('summary', '')}")
    nj = doc.get("not_judged") or []
    if nj:
        basis += "; not judged by gate: " + "; ".join(map(str, nj))
    if in_use:
        basis += f"; {in_use}"
    judged = bool(findings) or any(e.get("status") == "ok" for e in (doc.get("pairs") or []))
    return CheckResult(name, APPLICABLE if judged else NOT_JUDGED, basis, findings)
