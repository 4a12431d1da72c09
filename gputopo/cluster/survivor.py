"""When rank 0 is lost, the lowest live rank writes the run folder (a real cluster run).

Rank 0 made the folder and shared its path at start-up, then died or stopped: nobody would write
``cluster.json`` or the report. The other ranks meet through files in that (shared) folder, not
the launcher's store, which may have died with rank 0 (srun: rank 0 hosts it; torchrun: the agent
of rank 0's node may end with its workers): each live rank leaves ``ranks/.survivor-rank<N>``,
waits :data:`SETTLE_S`, and the lowest rank present writes. One writer per folder, rank 0
included: whoever first creates ``.cluster-writer`` (``O_EXCL``) writes, the others wait until
``run.json`` is no longer ``running`` (bounded) so that no rank's early exit makes its launcher
stop the writer.

The launcher stops the job's ranks once one is lost (torchrun's agent SIGTERMs its node's other
workers, and a node's agent that loses its store stops its own), then SIGKILLs them after its
grace (torchrun: 30 s): during the rounds and the writing, SIGTERM and SIGINT only set a flag
(cluster.dist_backend.DistBackend.stop_signals), so whoever writes does so within that grace.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Dict, List

from gputopo.runfolder.layout import NODE_JSON, NODES_DIR, RANKS_DIR, RUN_JSON

WRITER_CLAIM = ".cluster-writer"
SURVIVOR_PREFIX = ".survivor-rank"
#: Seconds the live ranks give each other to say so before the lowest one writes.
SETTLE_S = 2.0


def claim_writer(run_dir, rank: int) -> bool:
    """True for the one rank that may write the folder's results (the first to ask)."""
    try:
        fd = os.open(Path(run_dir) / WRITER_CLAIM, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(f"{rank}\n")
    return True


def mark_alive(run_dir, rank: int) -> None:
    """Say this rank lived past the loss. Rank 0 says so the moment its barrier fails: a rank
    that cannot reach the store (gone with another node's launcher) then still defers to it."""
    try:
        d = Path(run_dir) / RANKS_DIR
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{SURVIVOR_PREFIX}{rank:05d}").touch()
    except OSError:
        pass


def marked_alive(run_dir) -> List[int]:
    """The ranks that said they lived past the loss (:func:`mark_alive`)."""
    out = []
    for p in (Path(run_dir) / RANKS_DIR).glob(f"{SURVIVOR_PREFIX}*"):
        try:
            out.append(int(p.name[len(SURVIVOR_PREFIX):]))
        except ValueError:
            continue
    return sorted(out)


def lowest_survivor(run_dir, rank: int, settle_s: float = SETTLE_S) -> bool:
    """Say this rank is alive; after ``settle_s``, True when no lower rank said so."""
    mark_alive(run_dir, rank)
    time.sleep(settle_s)
    return not any(r < rank for r in marked_alive(run_dir))


def wait_folder_written(run_dir, bound_s: float, poll_s: float = 0.5) -> bool:
    """Wait until run.json's status is no longer ``running`` (at most ``bound_s``)."""
    end = time.monotonic() + bound_s
    while True:
        try:
            if json.loads((Path(run_dir) / RUN_JSON).read_text(encoding="utf-8")).get("status") != "running":
                return True
        except (OSError, ValueError):
            pass
        if time.monotonic() >= end:
            return False
        time.sleep(poll_s)


def saved_fingerprints(run_dir, names: List[str]) -> List[Dict[str, Any]]:
    """Every node's fingerprint as rank 0 saved it in ``nodes/<node>/node.json``; all empty
    (nothing compared) when any is missing: half a comparison would name healthy nodes."""
    out = []
    for name in names:
        try:
            fp = json.loads((Path(run_dir) / NODES_DIR / name / NODE_JSON).read_text(encoding="utf-8"))["fingerprint"]
        except (OSError, ValueError, KeyError, TypeError):
            return [{} for _ in names]
        out.append(fp if isinstance(fp, dict) else {})
    return out
