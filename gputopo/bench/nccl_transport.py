"""Record which transport NCCL chose for each measured pair (cuda fabric), or the route the
simulated machine models for it (sim fabric, labelled "modeled").

On cuda each worker process runs with ``NCCL_DEBUG=INFO``, ``NCCL_DEBUG_SUBSYS=INIT,GRAPH,ENV`` and
``NCCL_DEBUG_FILE`` pointing next to its own log (NCCL reads them once, at its first call, so
they are set before torch is imported: :func:`nccl_debug_env`). Channel connections are made
lazily (NCCL_RUNTIME_CONNECT, 2.22+), i.e. during the first collective of the step, so the
worker marks the file before a step's group is made and reads what NCCL appended after each
measurement (:class:`NcclLogTail`). Rank r of a step's group drives ``step_gpus[r]``; the
sender logs a connection, so rank 0's file holds 0 -> 1. A setting the user made themselves
is kept (and then NCCL_DEBUG_FILE may not be ours: nothing is read, and that is said).
No torch here.
"""

from __future__ import annotations

import os
from typing import Dict, Mapping, Optional, Sequence

from gputopo.probe.nccl_log import parse_nccl_debug, transport_summary

#: Where NCCL's own log of a worker goes: beside the worker's log, one per process.
NCCL_LOG_SUFFIX = ".nccl.log"
#: NCCL's subsystems a worker logs: INIT (communicators, channels), GRAPH (the topology it
#: found) and ENV, under which NCCL logs "NCCL_X set by environment to Y" for every setting read.
DEBUG_SUBSYS = "INIT,GRAPH,ENV"
#: Route of the sim model -> the NCCL transport it stands for (one host: SHM when not P2P).
MODELED_KIND = {"p2p": "P2P", "host": "SHM"}


def nccl_debug_env(env: Mapping[str, str], worker_log: str) -> Dict[str, str]:
    """The NCCL_DEBUG* variables to add to a cuda worker's environment (the user's own win)."""
    out: Dict[str, str] = {}
    if str(env.get("NCCL_DEBUG", "")).upper() not in ("INFO", "TRACE"):
        out["NCCL_DEBUG"] = "INFO"
    subsys = env.get("NCCL_DEBUG_SUBSYS")
    if subsys is None:
        out["NCCL_DEBUG_SUBSYS"] = DEBUG_SUBSYS
    else:
        named = {s.strip().lstrip("^").upper() for s in subsys.split(",")}
        missing = [] if "ALL" in named else [s for s in ("INIT", "ENV") if s not in named]
        if missing:
            out["NCCL_DEBUG_SUBSYS"] = ",".join([subsys, *missing])
    if not env.get("NCCL_DEBUG_FILE"):
        out["NCCL_DEBUG_FILE"] = worker_log + NCCL_LOG_SUFFIX
    return out


class NcclLogTail:
    """The part of NCCL's debug file written since :meth:`mark` (our file only)."""

    def __init__(self, path: Optional[str], why_not: str = ""):
        self.path = path
        self.why_not = why_not
        self._offset = 0

    @classmethod
    def for_worker(cls, env: Mapping[str, str], worker_log: str) -> "NcclLogTail":
        ours = worker_log + NCCL_LOG_SUFFIX
        if env.get("NCCL_DEBUG_FILE") == ours:
            return cls(ours)
        return cls(None, f"NCCL_DEBUG_FILE was set by the user ({env.get('NCCL_DEBUG_FILE')}): "
                         "gputopo does not read it")

    def mark(self) -> None:
        self._offset = self._size()

    def _size(self) -> int:
        try:
            return os.path.getsize(self.path) if self.path else 0
        except OSError:
            return 0

    def since_mark(self) -> str:
        if not self.path:
            return ""
        try:
            with open(self.path, encoding="utf-8", errors="replace") as f:
                f.seek(self._offset)
                return f.read()
        except OSError:
            return ""

    def warnings(self, limit: int = 20) -> str:
        """NCCL's WARN lines since the mark (with NCCL_DEBUG_FILE they are not on stderr)."""
        warn = [ln for ln in self.since_mark().splitlines() if " NCCL WARN " in ln][-limit:]
        if not warn:
            return ""
        return f"NCCL warnings ({self.path}):\n" + "".join(f"{ln}\n" for ln in warn)


def step_transport(tail: NcclLogTail, step_gpus: Sequence[int]) -> dict:
    """What NCCL logged for the connections between the step's ranks 0 and 1, as a transport
    summary (probe.nccl_log.transport_summary) with the GPUs, or ``{"not_available": why}``."""
    if not tail.path:
        return {"not_available": tail.why_not or "NCCL's debug log is not available"}
    log = parse_nccl_debug(tail.since_mark())
    lines = [c for c in log.channels if {c.src_rank, c.dst_rank} == {0, 1}]
    if not lines:
        return {"not_available": f"NCCL logged no channel connection between ranks 0 and 1 in {tail.path} "
                                 f"({log.lines} NCCL INFO lines since the step began)"}
    out = transport_summary(lines, "nccl-debug")
    out["gpus"] = list(step_gpus[:2])
    out["log"] = tail.path
    return out


def modeled_transport(route: str, gpus: Sequence[int]) -> dict:
    """The sim fabric's route for a pair as a transport summary, labelled modeled."""
    kind = MODELED_KIND.get(route, route)
    return {"kind": kind, "kinds": [kind], "via": [f"{kind} (modeled: NCCL's route rule, bench/routes.py)"],
            "channels": 0, "source": "modeled", "gpus": list(gpus[:2])}


def transport_cell(nt: Optional[dict]) -> str:
    """``P2P/IPC/read``, ``SHM (modeled)``, ``SHM/direct/direct (imported)``, ``-``; ``none
    (P2P/IPC set-up failed)`` where NCCL tried a transport and failed to set it up."""
    if not isinstance(nt, dict) or "kind" not in nt:
        return "-"
    source = nt.get("source")
    if source == "modeled":
        return f"{nt['kind']} (modeled)"
    via = nt.get("via") or [nt["kind"]]
    text = via[0] if len(via) == 1 else f"{nt['kind']} ({len(via)} ways)"
    if nt.get("used") is False:  # NCCL tried it and its set-up failed: not a transport it used
        text = f"none ({text} set-up failed)"
    elif "used" in nt and nt["used"] is None:  # an error followed that is not told to be its process's
        text = f"not known ({text} tried, an error followed)"
    return f"{text} (imported)" if source == "imported" else text
