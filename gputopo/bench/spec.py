"""The one timing and verification loop every benchmark goes through (nccl-tests style).

A test is written once as a :class:`Spec`: what it moves (``bytes_per_iter``, the bus factor)
and a ``prepare`` that allocates its buffers and returns a :class:`Prepared`: ``refill`` (reset
inputs, poison outputs: outside the timed region), ``run`` (the timed operation) and ``verify``
(bit-exact check of this process's outputs against the known result). :func:`measure` drives
it the same way on every fabric:

    warm-up runs (untimed, when the fabric's clock needs them), then for each sample:
    refill -> timed run (the fabric's clock: CUDA events, wall, or the link model) -> verify
    -> combine over ranks (max time, summed wrong counts, as nccl-tests does)

Raw samples are kept in the Measurement; median/IQR/noise are derived from them.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Tuple

from gputopo.bench.fabrics.fabric import fabric_named
from gputopo.model import Measurement

Verify = Callable[[], Tuple[int, Optional[int]]]


@dataclass
class Prepared:
    """A prepared test: buffers allocated, closures over them."""

    refill: Callable[[], Any]  # what it returns (a poisoned buffer, say) is not used
    run: Callable[[], Any]
    verify: Verify
    #: Released after the measurement; poisoned first so a reused block never looks right.
    release: Callable[[], None] = lambda: None


@dataclass
class Spec:
    test: str
    gpus: Tuple[int, ...]
    direction: Optional[str]
    size_bytes: int
    bytes_per_iter: int
    busbw_factor: float
    prepare: Callable[[], "Prepared"]
    #: GPUs whose work the clock must cover (the local ones of this process).
    devices: Tuple[int, ...]
    #: Operations per timed sample (latency tests); the sample is the mean over them.
    repeat: int = 1
    extra: Dict[str, Any] = field(default_factory=dict)

    @property
    def seed_key(self) -> int:
        """A stable number for this measurement (Python's hash() is salted per process)."""
        text = f"{self.test}|{self.gpus}|{self.direction}|{self.size_bytes}"
        return zlib.crc32(text.encode())


def take_sample(spec: Spec, case: Prepared, ops, sample: int):
    """One timed, verified sample: (seconds, wrong elements, first bad index) over all ranks."""
    case.refill()
    t = ops.timed(case.run, spec.devices, repeat=spec.repeat, seed=spec.seed_key, sample=sample)
    wrong, first = case.verify()
    return ops.combine(t, wrong, first)


def measure(spec: Spec, ops, *, warmup: int, samples: int, link_class: Optional[str],
            beat: Optional[Callable[[], None]] = None) -> Measurement:
    """Run ``spec`` on ``ops`` (a fabric's operations) and return its Measurement.

    ``wrong`` is the largest wrong-element count of any sample (the count for one transfer);
    ``extra.wrong_samples`` says in how many samples something was wrong. ``beat`` is called
    after each warm-up run and each sample: the worker's sign of progress, so that the runner's
    timeout ("no progress for N s") bounds one transfer, not a whole measurement of many.
    """
    case = spec.prepare()
    try:
        if ops.needs_warmup:
            for _ in range(warmup):
                case.refill()
                ops.sync(spec.devices)
                case.run()
                ops.sync(spec.devices)
                if beat is not None:
                    beat()
        times, worst, first_bad, bad_samples = [], 0, None, 0
        for s in range(samples):
            t, wrong, first = take_sample(spec, case, ops, s)
            times.append(t)
            if beat is not None:
                beat()
            if wrong:
                bad_samples += 1
                if first_bad is None:
                    first_bad = first
                worst = max(worst, wrong)
    finally:
        case.release()
    extra = dict(spec.extra)
    extra.update(ops.timing_facts())
    extra.update({"dtype": "float32", "count": spec.size_bytes // 4, "repeat": spec.repeat,
                  "wrong_samples": bad_samples, "warmup": warmup if ops.needs_warmup else 0})
    return Measurement(
        test=spec.test, gpus=spec.gpus, size_bytes=spec.size_bytes, samples_s=times,
        timing=ops.timing, fabric=ops.fabric, figures_of=fabric_named(ops.fabric).figures_of,
        link_class=link_class, direction=spec.direction,
        bytes_per_iter=spec.bytes_per_iter, busbw_factor=spec.busbw_factor, wrong=worst,
        first_bad_index=first_bad, extra=extra)
