"""Judging a way against the one-GPU reference: tolerance measured from fp32 noise, then a verdict.

Two correct runs of the same job differ by the order in which fp32 sums are taken: DataParallel
and DDP add two half-batch gradients where the reference sums one whole batch. How big that
noise is depends on the model, the device and the library kernels, so it is **measured**, not
guessed: the reference is re-run (a) with the two halves of every batch swapped and (b) as two
half-batch passes whose gradients are added second half first, which is the structure of
DataParallel and DDP. The largest relative loss deviation and the largest final parameter
difference of those re-runs from the reference are the noise; the tolerance is ``FACTOR`` times
that noise (never below ``FACTOR`` fp32 epsilons, so a bitwise-identical re-run does not make
the tolerance zero). A way is then:

- ``nan`` from step N: the first step whose loss or gradient holds NaN/Inf (also when it
  deviated before it went non-finite; that step is kept as ``first_deviation_step``);
- ``diverged`` from step N: some step's loss is off the reference by more than the tolerance.
  N is the step where the curves *part* (:func:`part_step`): the first step off by more than
  ``PART_REL`` (1 %) of the reference loss from which the run stays that far off in most of the
  steps left; else the first step off by 1 % at all (a spike); else the first step beyond the
  tolerance. A corrupted copy can nudge the loss by 1e-5 at step 0 (above the fp32-noise
  tolerance, invisible on a plot), blip by 1 % once at step 24, and only run away at step 43;
  calling that ``diverged@0`` points at a step where the curves still lie on top of each other.
  The first step beyond the tolerance is kept as ``first_deviation_step`` (the earliest
  evidence). If every loss stayed within the tolerance, ``N = steps`` when the final parameters
  are off by more than the parameter tolerance;
- ``ok`` otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

#: Tolerance = FACTOR x measured noise.
FACTOR = 10.0
#: fp32 machine epsilon: the smallest noise the tolerance assumes.
EPS_FP32 = 2.0 ** -23
#: Relative loss deviation at which the curves visibly part (the step a ``diverged`` verdict names).
PART_REL = 0.01
VERDICTS = ("ok", "diverged", "nan")
#: Verdicts of a way that produced no numbers (its finding says why).
FAILED_VERDICTS = ("hang", "crash")
#: Verdicts of a way that ran to the end with bad numbers.
BAD_VERDICTS = ("nan", "diverged")


@dataclass
class WayRun:
    """What one way of the job produced: losses per step (step 0 first), where values first went
    non-finite and in what, the final parameters (flat fp32 CPU vector) and how long it took."""

    losses: List[float]
    final_params: Any  # flat fp32 vector: a torch.Tensor, or a numpy array from a worker's payload
    first_nonfinite_step: Optional[int] = None
    nonfinite_in: Optional[str] = None  # "loss" | "gradient" | "parameters"
    wall_s: float = 0.0
    extra: Dict[str, Any] = field(default_factory=dict)


@dataclass
class Tolerance:
    """The measured noise and the tolerance derived from it (printed with every run)."""

    loss_rel: float
    param_abs: float
    noise_loss_rel: float
    noise_param_abs: float
    factor: float = FACTOR
    method: str = ("reference re-run with the batch halves swapped, and as two half-batch passes "
                   "summed in the other order; tolerance = factor x the larger deviation")
    runs: Dict[str, Dict[str, float]] = field(default_factory=dict)

    def to_json(self) -> Dict[str, Any]:
        return {"loss_rel": self.loss_rel, "param_abs": self.param_abs,
                "noise_loss_rel": self.noise_loss_rel, "noise_param_abs": self.noise_param_abs,
                "factor": self.factor, "method": self.method, "runs": self.runs}

    def describe(self) -> str:
        return (f"tolerance: loss {self.loss_rel:.1e} relative, parameters {self.param_abs:.1e} "
                f"absolute ({self.factor:g} x measured fp32 reduction-order noise "
                f"{self.noise_loss_rel:.1e} / {self.noise_param_abs:.1e})")


@dataclass
class Judgement:
    verdict: str
    step: Optional[int]
    max_rel_loss_dev: Optional[float]
    max_abs_param_diff: Optional[float]
    first_nonfinite_step: Optional[int]
    first_deviation_step: Optional[int]


def rel_loss_devs(losses: Sequence[float], reference: Sequence[float]) -> List[Optional[float]]:
    """Per step |loss - ref| / |ref|; None where either is non-finite."""
    out: List[Optional[float]] = []
    for a, b in zip(losses, reference):
        if not (math.isfinite(a) and math.isfinite(b)):
            out.append(None)
        else:
            out.append(abs(a - b) / max(abs(b), 1e-30))
    return out


def _f64(v):
    """A flat float64 numpy copy of a parameter vector (torch CPU tensor or numpy array): judging
    needs no torch, so the parent process of a sim run never imports it (judging.py)."""
    import numpy as np

    return np.asarray(v, dtype=np.float64).reshape(-1)


def max_abs_diff(a, b) -> float:
    """Largest |a - b| over two flat vectors; inf if either holds a non-finite value."""
    import numpy as np

    x, y = _f64(a), _f64(b)
    if x.shape != y.shape:
        return math.inf
    d = np.abs(x - y)
    if not bool(np.isfinite(d).all()):
        return math.inf
    return float(d.max()) if d.size else 0.0


def measure_tolerance(reference: WayRun, noise_runs: Dict[str, WayRun]) -> Tolerance:
    """Tolerance from re-runs that differ from the reference only in fp32 summation order."""
    import numpy as np

    runs: Dict[str, Dict[str, float]] = {}
    loss_noise, param_noise = 0.0, 0.0
    for name, run in noise_runs.items():
        devs = [d for d in rel_loss_devs(run.losses, reference.losses) if d is not None]
        ld = max(devs) if devs else 0.0
        pd = max_abs_diff(run.final_params, reference.final_params)
        runs[name] = {"max_rel_loss_dev": ld, "max_abs_param_diff": pd}
        if math.isfinite(ld):
            loss_noise = max(loss_noise, ld)
        if math.isfinite(pd):
            param_noise = max(param_noise, pd)
    p = _f64(reference.final_params)
    finite = p[np.isfinite(p)]
    scale = float(np.abs(finite).max()) if finite.size else 1.0
    loss_rel = FACTOR * max(loss_noise, EPS_FP32)
    param_abs = FACTOR * max(param_noise, EPS_FP32 * max(scale, 1.0))
    return Tolerance(loss_rel=loss_rel, param_abs=param_abs, noise_loss_rel=loss_noise,
                     noise_param_abs=param_noise, runs=runs)


#: Steps that must be left after a step for "stays apart in most of them" to mean anything.
PART_MIN_STEPS = 3


def part_step(devs: Sequence[Optional[float]], loss_tol: float, dev_step: int) -> int:
    """The step where the loss curves part, given the relative deviation per step (None: not
    finite, counted as apart) and the first step beyond the tolerance (see the module docstring)."""
    limit = max(loss_tol, PART_REL)
    apart = [d is None or d > limit for d in devs]
    n = len(apart)
    for k in range(n - PART_MIN_STEPS + 1):
        if apart[k] and devs[k] is not None and 2 * sum(apart[k:]) > n - k:
            return k
    return next((k for k, d in enumerate(devs) if d is not None and d > limit), dev_step)


def judge_way(run: WayRun, reference: WayRun, tol: Tolerance) -> Judgement:
    """The verdict of ``run`` against ``reference`` (see the module docstring)."""
    devs = rel_loss_devs(run.losses, reference.losses)
    finite_devs = [d for d in devs if d is not None]
    max_dev = max(finite_devs) if finite_devs else None
    dev_step = next((k for k, d in enumerate(devs) if d is not None and d > tol.loss_rel), None)
    param_diff = max_abs_diff(run.final_params, reference.final_params)

    nonfinite = run.first_nonfinite_step
    if nonfinite is None:
        nonfinite = next((k for k, v in enumerate(run.losses) if not math.isfinite(v)), None)
    ref_nonfinite = reference.first_nonfinite_step
    # A step where the reference itself went non-finite says nothing about this way.
    if nonfinite is not None and (ref_nonfinite is None or nonfinite < ref_nonfinite):
        return Judgement("nan", nonfinite, max_dev, param_diff, nonfinite, dev_step)
    if dev_step is not None:
        return Judgement("diverged", part_step(devs, tol.loss_rel, dev_step), max_dev, param_diff,
                         nonfinite, dev_step)
    if ref_nonfinite is None and param_diff > tol.param_abs:
        return Judgement("diverged", len(run.losses), max_dev, param_diff, nonfinite, None)
    return Judgement("ok", None, max_dev, param_diff, nonfinite, None)
