"""The few environment variables the bench's (and the numerics') worker processes on the cuda
fabric, and every rank of ``gputopo cluster --fabric cuda`` (cluster/dist_backend.py), set
themselves, whatever the user's shell says, because they change what is timed (or
turn a healthy pair's run into a failure); everything else of the user's environment, NCCL's
own settings included, is inherited as it is (run.json ``nccl_env`` records those).

Read from torch 2.13's ProcessGroupNCCL.hpp and c10d/Utils.hpp: each c10d variable has a
``TORCH_NCCL_`` name and, for some, a legacy ``NCCL_`` one; the legacy one is read first and
the ``TORCH_NCCL_`` one wins when both are set, and a value that is not a boolean fails the
process group's creation. So the workers set the ``TORCH_NCCL_`` name and drop the legacy one
(a legacy value, even an unreadable one, then changes nothing).

- ``TORCH_NCCL_BLOCKING_WAIT=0``: with 1, ``Work.wait()`` blocks the host until the collective
  has run, and ``dist.all_reduce`` (synchronous) waits so. The bench enqueues the timed runs
  behind a hold kernel (fabrics/cuda.py): with a blocking wait the hold always ends before the
  runs are enqueued, every collective sample was flagged ``hold_too_short`` and the hold
  doubled up to 1 s per sample.
- ``TORCH_NCCL_NAN_CHECK=0``: with 1 a NaN-check kernel reads each collective's input first
  (inside the timed interval), and a NaN in a gradient (the numerics' NaN self-test puts one
  there on purpose) stops the process with a device-side assert instead of being reported.
- ``TORCH_NCCL_ENABLE_TIMING=0``: with 1 ProcessGroupNCCL records a CUDA event before every
  collective on NCCL's stream: work inside the timed interval that the bench did not ask for.
- ``CUDA_LAUNCH_BLOCKING=0``: with 1 every kernel launch and copy waits for the GPU, so the
  hold ends before the runs are enqueued (as with the blocking wait, for every test).

Left alone: ``TORCH_NCCL_ASYNC_ERROR_HANDLING`` (it decides how an NCCL error ends the process,
a crash or a hang finding either way, not what is timed; the bench's own timeout is shorter
than the process group's) and every ``NCCL_*`` setting of NCCL itself (P2P level, protocol...):
those are the user's to choose, and the report reads them from run.json.

run.json ``worker_env`` (cuda fabric): for each variable, the value the workers ran with (None:
removed), the user's value it replaced (None: the user had none) and why. No torch here.
"""

from __future__ import annotations

from typing import Dict, Mapping, MutableMapping, Optional, Tuple

#: run.json key
WORKER_ENV_KEY = "worker_env"

_HOLD = ("gputopo times GPU work enqueued behind a hold kernel; with 1 the host waits for "
         "each {what} before enqueuing the next, the hold ends first and every sample is "
         "flagged hold_too_short (the hold doubled up to 1 s)")

#: name -> (the workers' value, why)
TIMING_ENV: Dict[str, Tuple[str, str]] = {
    "TORCH_NCCL_BLOCKING_WAIT": ("0", _HOLD.format(what="collective (Work.wait() blocks)")),
    "TORCH_NCCL_NAN_CHECK": ("0", "with 1 a NaN-check kernel reads each collective's input inside "
                             "the timed interval, and a NaN gradient (the numerics' NaN "
                             "self-test) stops the process instead of being reported"),
    "TORCH_NCCL_ENABLE_TIMING": ("0", "with 1 ProcessGroupNCCL records a CUDA event before every "
                                 "collective on NCCL's stream, inside the timed interval"),
    "CUDA_LAUNCH_BLOCKING": ("0", _HOLD.format(what="kernel and copy")),
}

#: legacy name torch still reads -> the TORCH_NCCL_ name that replaces it
LEGACY_NAMES: Dict[str, str] = {
    "NCCL_BLOCKING_WAIT": "TORCH_NCCL_BLOCKING_WAIT",
    "NCCL_ENABLE_TIMING": "TORCH_NCCL_ENABLE_TIMING",
}


def worker_env(env: Mapping[str, str], more: Optional[Mapping[str, Tuple[str, str]]] = None,
               more_legacy: Optional[Mapping[str, str]] = None
               ) -> Tuple[Dict[str, str], Dict[str, dict]]:
    """``env`` as a cuda worker runs with it, and the record of what was set (run.json
    ``worker_env``): name -> {"value", "user_value", "why"}. ``more`` / ``more_legacy``: a
    caller's own variables on top of :data:`TIMING_ENV` / :data:`LEGACY_NAMES` (a cluster rank:
    ``TORCH_NCCL_ASYNC_ERROR_HANDLING``), set and recorded the same way."""
    out = dict(env)
    record: Dict[str, dict] = {}
    for name, (value, why) in {**TIMING_ENV, **(more or {})}.items():
        record[name] = {"value": value, "user_value": env.get(name), "why": why}
        out[name] = value
    for name, replaced_by in {**LEGACY_NAMES, **(more_legacy or {})}.items():
        if name in out:
            record[name] = {"value": None, "user_value": env.get(name),
                            "why": f"legacy name of {replaced_by}, which the workers set"}
            del out[name]
    return out, record


def apply(environ: MutableMapping[str, str], record: Mapping[str, dict]) -> None:
    """Make ``environ`` (this process's own, for a cluster rank) what ``record`` says: each
    variable set to its value, or removed where the value is None."""
    for name, rec in record.items():
        if rec.get("value") is None:
            environ.pop(name, None)
        else:
            environ[name] = str(rec["value"])


def overridden(record: Mapping[str, dict]) -> Dict[str, Tuple[Optional[str], Optional[str]]]:
    """The variables whose user value the workers replaced: name -> (user value, workers')."""
    return {k: (v.get("user_value"), v.get("value")) for k, v in record.items()
            if v.get("user_value") is not None and v.get("user_value") != v.get("value")}


def override_line(record: Mapping[str, dict], who: str = "the cuda workers",
                  key: str = WORKER_ENV_KEY) -> Optional[str]:
    """One line for stderr when the workers (``who``: a cluster's cuda ranks) replaced a value
    of the user's (else None); ``key``: where run.json says why."""
    changed = overridden(record)
    if not changed:
        return None
    parts = [f"{k}={'unset' if new is None else new} (this shell: {old})"
             for k, (old, new) in sorted(changed.items())]
    return (f"gputopo: {who} run with " + ", ".join(parts)
            + f": those change what is timed (why: run.json {key})")
