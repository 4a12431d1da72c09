"""The deterministic training job every way runs: synthetic data, a small model, SGD with momentum.

The same job runs on one GPU (the reference), under DataParallel and under DDP; only where the
tensors live and how they move differs. Everything is seeded from ``NumericsOptions.seed`` so the
three ways start from bit-identical parameters and see bit-identical batches, and any difference
between them is either reduction-order noise (measured, see verdict.py) or something the hardware
did to the data.

Data is made here (no downloads): inputs ~ N(0, 1) and labels from a fixed random "teacher"
network, so the loss falls steadily over the ~50 steps and a corrupted step shows.

Models (``--model``):
  mlp     3-layer tanh MLP, about 7k parameters (default)
  cnn     two 3x3 convolutions + linear head, no normalisation
  cnn-bn  cnn with BatchNorm2d: under DataParallel/DDP each replica normalises with its own
          half-batch statistics, so it differs from the one-GPU reference *by design*; the
          verdict marks such a difference as expected.

Losses: the reference takes the mean cross-entropy over the global batch. A DDP rank takes
``sum(its samples' losses) / global_batch * world_size`` so that DDP's gradient average is exactly
the reference gradient for any split of the batch (even an odd one); DataParallel gathers the
outputs and takes the same mean as the reference. Steps are numbered from 0.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional, Tuple

from gputopo.errors import UsageError

MODELS = ("mlp", "cnn", "cnn-bn")
#: Models whose replicas see different statistics than the reference by design.
BATCHNORM_MODELS = ("cnn-bn",)

DEFAULT_STEPS = 50
DEFAULT_LR = 0.05
DEFAULT_BATCH = 64
DEFAULT_MOMENTUM = 0.9
DEFAULT_SEED = 0

MAX_STEPS = 100_000
MAX_LR = 10.0
MAX_BATCH = 65_536
#: torch.manual_seed takes a 64-bit seed; larger ones overflow inside torch.
MAX_SEED = 2**63 - 1

# Problem sizes: small enough for well under a second per way on a CPU core.
MLP_IN, MLP_HIDDEN, CLASSES = 32, 64, 10
IMG_CHANNELS, IMG_SIZE = 3, 12


@dataclass(frozen=True)
class NumericsOptions:
    """What the training job is. ``inject_nan_at_step`` is a self-test of detection only:
    at that step rank ``inject_nan_rank`` of DDP (or GPU j's replica under DataParallel) puts a
    NaN into its local gradient before the reduction, exactly as a broken device would; the
    run must then report ``nan`` from that step. It is never set by a normal run."""

    steps: int = DEFAULT_STEPS
    lr: float = DEFAULT_LR
    model: str = "mlp"
    batch: int = DEFAULT_BATCH
    momentum: float = DEFAULT_MOMENTUM
    seed: int = DEFAULT_SEED
    inject_nan_at_step: Optional[int] = None
    inject_nan_rank: int = 1

    def to_json(self) -> Dict[str, Any]:
        return asdict(self)

    @property
    def batchnorm(self) -> bool:
        return self.model in BATCHNORM_MODELS


def validate_options(steps=None, lr=None, model=None, batch=None, momentum=None, seed=None,
                     inject_nan_at_step=None, inject_nan_rank=1) -> NumericsOptions:
    """Build options from user input, raising UsageError with a one-line message on bad values.

    ``None`` means the default. Strings are accepted (as a CLI would pass them)."""
    d = NumericsOptions()
    steps = d.steps if steps is None else _as_int("--steps", steps)
    if not 1 <= steps <= MAX_STEPS:
        raise UsageError(f"--steps must be between 1 and {MAX_STEPS}, got {steps}")
    lr = d.lr if lr is None else _as_float("--lr", lr)
    if not (math.isfinite(lr) and 0 < lr <= MAX_LR):
        raise UsageError(f"--lr must be a number > 0 and <= {MAX_LR:g}, got {lr!r}")
    model = d.model if model is None else str(model).strip().lower()
    if model not in MODELS:
        raise UsageError(f"--model must be one of {', '.join(MODELS)}, got {model!r}")
    batch = d.batch if batch is None else _as_int("--batch", batch)
    if not 2 <= batch <= MAX_BATCH:
        raise UsageError(f"--batch must be between 2 and {MAX_BATCH} (two GPUs share it), got {batch}")
    momentum = d.momentum if momentum is None else _as_float("--momentum", momentum)
    if not (math.isfinite(momentum) and 0 <= momentum < 1):
        raise UsageError(f"--momentum must be in [0, 1), got {momentum!r}")
    seed = d.seed if seed is None else _as_int("--seed", seed)
    if not 0 <= seed <= MAX_SEED:
        raise UsageError(f"--seed must be between 0 and {MAX_SEED} (what torch.manual_seed "
                         f"takes), got {seed}")
    if inject_nan_at_step is not None:
        inject_nan_at_step = _as_int("inject_nan_at_step", inject_nan_at_step)
        if not 0 <= inject_nan_at_step < steps:
            raise UsageError(f"inject_nan_at_step must be a step in 0..{steps - 1}, got {inject_nan_at_step}")
    if inject_nan_rank not in (0, 1):
        raise UsageError(f"inject_nan_rank must be 0 or 1, got {inject_nan_rank!r}")
    return NumericsOptions(steps=steps, lr=lr, model=model, batch=batch, momentum=momentum,
                           seed=seed, inject_nan_at_step=inject_nan_at_step,
                           inject_nan_rank=inject_nan_rank)


def _as_int(name: str, value) -> int:
    if isinstance(value, bool):
        raise UsageError(f"{name} must be an integer, got {value!r}")
    try:
        return int(str(value).strip())  # exact, however large ("1e3" falls through)
    except ValueError:
        pass
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{name} must be an integer, got {value!r}") from None
    if not math.isfinite(f) or f != int(f):
        raise UsageError(f"{name} must be an integer, got {value!r}")
    return int(f)


def _as_float(name: str, value) -> float:
    if isinstance(value, bool):
        raise UsageError(f"{name} must be a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{name} must be a number, got {value!r}") from None


# ----------------------------------------------------------------------------- model and data


def build_model(opts: NumericsOptions):
    """The model, with parameters drawn from ``opts.seed`` (on CPU; callers move it)."""
    import torch
    from torch import nn

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(opts.seed)
        if opts.model == "mlp":
            return nn.Sequential(
                nn.Linear(MLP_IN, MLP_HIDDEN), nn.Tanh(),
                nn.Linear(MLP_HIDDEN, MLP_HIDDEN), nn.Tanh(),
                nn.Linear(MLP_HIDDEN, CLASSES))
        bn = opts.model == "cnn-bn"
        layers: List[nn.Module] = [nn.Conv2d(IMG_CHANNELS, 8, 3, padding=1)]
        if bn:
            layers.append(nn.BatchNorm2d(8))
        layers += [nn.ReLU(), nn.Conv2d(8, 16, 3, stride=2, padding=1)]
        if bn:
            layers.append(nn.BatchNorm2d(16))
        layers += [nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, CLASSES)]
        return nn.Sequential(*layers)


def input_shape(opts: NumericsOptions) -> Tuple[int, ...]:
    """Shape of one sample."""
    return (MLP_IN,) if opts.model == "mlp" else (IMG_CHANNELS, IMG_SIZE, IMG_SIZE)


def make_data(opts: NumericsOptions):
    """Inputs [steps, batch, *sample] and integer labels [steps, batch], on CPU, from the seed.

    Labels come from a fixed random teacher network so there is something to learn."""
    import torch
    from torch import nn

    gen = torch.Generator().manual_seed(opts.seed + 1)
    x = torch.randn((opts.steps, opts.batch) + input_shape(opts), generator=gen)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(opts.seed + 2)
        if opts.model == "mlp":
            body = nn.Sequential(nn.Linear(MLP_IN, MLP_HIDDEN), nn.Tanh())
            width = MLP_HIDDEN
        else:  # features the student's architecture can represent
            body = nn.Sequential(nn.Conv2d(IMG_CHANNELS, 8, 3, padding=1), nn.ReLU(),
                                 nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(1), nn.Flatten())
            width = 16
        head = nn.Linear(width, CLASSES)
    with torch.no_grad():
        feats = body(x.reshape((opts.steps * opts.batch,) + input_shape(opts)))
        # Standardised features make every class about equally likely.
        feats = (feats - feats.mean(0)) / (feats.std(0) + 1e-6)
        y = head(feats).argmax(-1)
    return x, y.reshape(opts.steps, opts.batch)


def make_optimizer(params, opts: NumericsOptions) -> "MomentumSGD":
    return MomentumSGD(params, lr=opts.lr, momentum=opts.momentum)


class MomentumSGD:
    """``torch.optim.SGD(params, lr, momentum)`` written out: the same arithmetic as torch's
    single-tensor SGD (no dampening, weight decay or Nesterov), so every way of the job runs
    the same update.

    Why not torch.optim: its first use imports ``torch._dynamo`` (sympy and the compiler
    stack), about 4 CPU seconds in every process that trains -- more than the sim's whole
    training of a pair. The job only needs the update itself.
    """

    def __init__(self, params, lr: float, momentum: float):
        self.params = list(params)
        self.lr = float(lr)
        self.momentum = float(momentum)
        self.buffers: List[Any] = [None] * len(self.params)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.detach_()
                p.grad.zero_()

    def step(self) -> None:
        import torch

        with torch.no_grad():
            for k, p in enumerate(self.params):
                g = p.grad
                if g is None:
                    continue
                if self.momentum != 0:
                    buf = self.buffers[k]
                    if buf is None:
                        buf = self.buffers[k] = torch.clone(g).detach()
                    else:
                        buf.mul_(self.momentum).add_(g, alpha=1)
                    g = buf
                p.add_(g, alpha=-self.lr)


def split_sizes(batch: int, parts: int = 2) -> List[int]:
    """Sizes of ``torch.chunk(batch, parts)`` along dim 0, as DataParallel's scatter splits:
    contiguous chunks of ceil(batch / parts), the last one smaller (10 -> [5, 5], 9 -> [5, 4])."""
    size = -(-batch // parts)
    sizes = []
    left = batch
    while left > 0:
        sizes.append(min(size, left))
        left -= size
    return sizes


def rank_loss(out, y, global_batch: int, world_size: int):
    """A DDP rank's loss: its samples' summed cross-entropy scaled so that the average over ranks
    of the gradients equals the gradient of the global mean (any split of the batch)."""
    import torch.nn.functional as F

    return F.cross_entropy(out, y, reduction="sum") * (world_size / global_batch)


def global_loss(out, y):
    import torch.nn.functional as F

    return F.cross_entropy(out, y)


def flat_params(model):
    """All parameters, flattened into one CPU fp32 vector (for the final comparison)."""
    import torch

    return torch.cat([p.detach().reshape(-1).float().cpu() for p in model.parameters()])


def grads_finite(params) -> bool:
    return all_finite(p.grad for p in params)


def all_finite(tensors) -> bool:
    """Whether every element of ``tensors`` (None entries skipped) is finite: one ``isfinite``
    over the tensors of each device laid end to end, not one per tensor (per-tensor checks were
    a tenth of a simulated training step, checked twice a step)."""
    import torch

    by_device: dict = {}
    for t in tensors:
        if t is not None:
            by_device.setdefault(t.device, []).append(t.detach().reshape(-1))
    return all(bool(torch.isfinite(torch.cat(ts)).all()) for ts in by_device.values())
