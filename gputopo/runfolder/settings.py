"""The settings a run was measured under, kept in its run.json so that a report and a
``--resume`` use them instead of whatever the reader's shell has.

- ``nccl_env``: every ``NCCL_*`` and ``TORCH_NCCL_*`` variable of the gputopo process when the
  run started (the workers inherit them, but for the few that change what is timed, which
  cuda workers set themselves: run.json ``worker_env``, bench/worker_env.py; gputopo's own
  NCCL_DEBUG* logging settings are added to the workers only and are not part of it).
  NCCL's route for a pair (P2P or through host memory) depends on them, so the report's
  remedies read these, and a resume runs with them.
- ``numerics_options``: the training job of the numerics phase (steps, lr, model, batch,
  momentum, seed), or null when the run has no numerics. A resume finishes the run with them.

No torch here.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, MutableMapping, Optional

NCCL_PREFIXES = ("NCCL_", "TORCH_NCCL_")
#: run.json keys
NCCL_ENV_KEY = "nccl_env"
NUMERICS_KEY = "numerics_options"


def nccl_settings(env: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The NCCL_* / TORCH_NCCL_* variables of ``env`` (default: this process's environment)."""
    env = os.environ if env is None else env
    return {k: str(v) for k, v in sorted(env.items()) if k.startswith(NCCL_PREFIXES)}


def use_saved_nccl_settings(saved: Mapping[str, str],
                            env: Optional[MutableMapping[str, str]] = None) -> List[str]:
    """Make ``env`` (default os.environ, which the workers inherit) carry exactly the run's
    saved NCCL settings; returns one ``NAME=value (this shell: ...)`` phrase per change."""
    env = os.environ if env is None else env
    now = nccl_settings(env)
    changes = []
    for k in sorted(set(now) | set(saved)):
        if now.get(k) == saved.get(k):
            continue
        was = f"{now[k]}" if k in now else "unset"
        if k in saved:
            env[k] = str(saved[k])
            changes.append(f"{k}={saved[k]} (this shell: {was})")
        else:
            del env[k]
            changes.append(f"{k} unset (this shell: {was})")
    return changes


def saved_numerics_options(info: Mapping[str, Any]) -> Any:
    """run.json's numerics options: a dict, None (the run has no numerics), or ``...`` when the
    run folder predates this record (then nothing is known)."""
    return info[NUMERICS_KEY] if NUMERICS_KEY in info else ...
