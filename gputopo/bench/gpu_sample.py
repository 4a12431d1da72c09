"""The one GPU timing routine of a sample (:func:`time_sample`): how ``bench --fabric cuda``
(bench/fabrics/cuda.py, every test: copies, DataParallel, NCCL collectives) and ``cluster
--fabric cuda`` (cluster/dist_backend.py, its all_reduce) time and bound one sample, on whatever
process group the caller's gate and operation use.

On the rank's current stream (of the current device), in this order:

1. a spin kernel (``torch.cuda._sleep``) of ``hold_s`` seconds: while it runs the host enqueues
   everything that follows, so the host's launch time stays outside the interval
   (p2pBandwidthLatencyTest's delay kernel);
2. the *gate*: a 1-element all_reduce of every rank of the group, which the stream waits for
   (``Work.wait()`` with ``TORCH_NCCL_BLOCKING_WAIT=0`` only orders the current stream after
   NCCL's). It ends on every rank when the last rank's GPU reached it, so the ranks leave it
   together, whatever their CPUs' lag and whatever the hold lasted on each GPU;
3. the start event;
4. the operation (the caller's: what it enqueues is the interval's work);
5. whether the GPU had already passed the start event (:func:`launch_in_interval`), then the end
   event;
6. one bounded wait for the end event: the caller's (the cluster polls ``end.query`` against its
   round's deadline, stop flag and the group's failure key), else ``end.synchronize()`` (a bench
   worker, whose runner kills it after ``--timeout`` s without progress).

The caller keeps the rest: its groups, its hold's length and how it doubles, the verification
of the result, what a late sample means for its figure.

Aligning through the CPU instead (the ranks agreeing on a hold through a host-side all_reduce,
or noticing a GPU barrier by polling its event) left each rank's start at its own time: its CPU's
lag, its poll phase and its host launch, or the hold counted in each GPU's own SM clock
(``_sleep`` spins a number of cycles of the clock the SM really runs at), all inside the
earliest rank's interval, and the group's time is its slowest rank's.

If the GPU has already passed the start event when the caller finished enqueuing
(:func:`launch_in_interval`), the hold was too short for this host: that sample holds host
launch time. No torch import here: the caller passes its ``torch`` (the cluster's tests pass a
fake).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

#: kHz assumed when the device properties give no SM clock (``clock_rate``): 1.5 GHz.
DEFAULT_CLOCK_KHZ = 1_500_000


def spin_cycles(torch: Any, device: Any, seconds: float) -> int:
    """``seconds`` of spin on ``device`` in its clock cycles, at the peak clock the device
    properties give (``clock_rate``, kHz): at a lower real clock the spin lasts longer, never
    shorter, which only delays the start."""
    props = torch.cuda.get_device_properties(device)
    khz = int(getattr(props, "clock_rate", 0) or DEFAULT_CLOCK_KHZ)
    return int(seconds * khz * 1000)


def aligned_start(torch: Any, device: Any, hold_s: float,
                  gate: Optional[Callable[[], Any]]) -> Any:
    """Enqueue the hold, the gate and the start event on the current stream (of the current
    device, ``device``) and return the start event (timing enabled). ``gate``: a call that
    enqueues the group's 1-element all_reduce and returns its work (None: one rank, no gate)."""
    torch.cuda._sleep(spin_cycles(torch, device, hold_s))
    if gate is not None:
        work = gate()
        if work is not None:
            work.wait()  # the current stream waits for the gate on NCCL's stream
    start = torch.cuda.Event(enable_timing=True)
    start.record()
    return start


def launch_in_interval(start: Any) -> bool:
    """Called right after the timed work was enqueued: whether the GPU had already passed the
    start event (the hold ended before the host finished, so the interval holds launch time)."""
    return bool(start.query())


@dataclass
class GpuSample:
    """One sample's interval: ``seconds`` between its start and end events (the GPU's clock),
    ``late`` when the GPU had passed the start event before the operation was all enqueued (the
    interval holds host launch time), ``result`` what the operation returned."""

    seconds: float
    late: bool
    result: Any = None


def time_sample(torch: Any, device: Any, hold_s: float, gate: Optional[Callable[[], Any]],
                operation: Callable[[Any], Any],
                wait_end: Optional[Callable[[Any], None]] = None) -> GpuSample:
    """Time one sample on the current stream of ``device`` (the current device): the hold and
    the gate (:func:`aligned_start`), the start event, ``operation(start)`` (it enqueues the
    timed work; ``start`` lets other devices' streams wait for the interval's start, and its
    work must be ordered before the current stream's next event), the late check, the end event
    and ``wait_end(end)`` (the caller's bounded wait; raises to abandon the sample), else
    ``end.synchronize()``."""
    start = aligned_start(torch, device, hold_s, gate)
    result = operation(start)
    late = launch_in_interval(start)
    end = torch.cuda.Event(enable_timing=True)
    end.record()
    if wait_end is not None:
        wait_end(end)
    else:
        end.synchronize()
    return GpuSample(start.elapsed_time(end) / 1e3, late, result)
