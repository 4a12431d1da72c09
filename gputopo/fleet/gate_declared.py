"""`gputopo gate`'s declared layer from the machine's own history: what this machine had before.

Read from the history database (gputopo/history/): the layout its recorded scans and runs saw
(history/query.py ``layout_history``: each pair's link class and NVLinks, each GPU's active
NVLinks and NVSwitch fabric, the most NVLinks seen in its last runs) and the copy rates its own
bench runs measured at gate's copy size (history/query.py ``baseline``). gate reads and never
records (a prolog's scan is not a baseline). Nothing is judged here: gputopo/fleet/gate.py
judges against it.
"""

from __future__ import annotations

import datetime as _dt
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Optional, Tuple

from gputopo.history.query import BaselineFigure, LayoutSeen
from gputopo.model import Topology, is_value

Pair = Tuple[int, int]


def day(t: float) -> str:
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).date().isoformat()


@dataclass
class Declared:
    """What the history says this machine had; ``why_none`` when it says nothing."""

    source: str
    why_none: str = ""
    runs: int = 0
    gpus: Dict[int, LayoutSeen] = field(default_factory=dict)
    pairs: Dict[Pair, LayoutSeen] = field(default_factory=dict)
    #: (pair, direction "a->b", timing) -> the machine's own bench median at gate's copy size
    copies: Dict[Tuple[Pair, str, str], BaselineFigure] = field(default_factory=dict)

    @property
    def known(self) -> bool:
        return bool(self.gpus or self.pairs)


def read_declared(path: Optional[Path], topo: Topology, size_bytes: int) -> Declared:
    """The declared layer of ``topo``'s machine from the database at ``path`` (None: not read)."""
    if path is None:
        return Declared("", "no history database")
    from gputopo.errors import GputopoError
    from gputopo.history.db import open_history
    from gputopo.history.query import baseline, layout_history, machine_id
    from gputopo.history.record import machine_identity

    src = str(path)
    if not path.exists():
        return Declared(src, f"no history of this machine (no database at {path})")
    try:
        conn = open_history(path, create=False)
    except (GputopoError, OSError) as e:
        return Declared(src, f"no history read: {e}")
    try:
        identity = machine_identity(topo)  # the key: simulated or not, hostname, GPU UUIDs
        mid = machine_id(conn, identity)
        if mid is None:
            return Declared(src, f"no history of this machine in {path}")
        ids, rows = layout_history(conn, mid)
        base = baseline(conn, mid, size_bytes=size_bytes)
    except (GputopoError, sqlite3.Error) as e:
        return Declared(src, f"no history read: history database {path}: {e}")
    finally:
        conn.close()
    index = {str(g.uuid): g.nvml_index for g in topo.gpus if is_value(g.uuid)}
    out = Declared(src, runs=len(ids))
    for uuids, seen in rows.items():
        at = [index.get(u) for u in uuids]
        if any(i is None for i in at):
            continue
        if len(at) == 1:
            out.gpus[int(at[0] or 0)] = seen
        else:
            a, b = sorted(int(i or 0) for i in at)
            out.pairs[(a, b)] = seen
    for (gpus, series, direction, _size, timing), fig in base.items():
        if series != "p2p.copy" or not direction:
            continue
        try:
            a, b = sorted(int(x) for x in gpus.split(","))
        except ValueError:
            continue
        out.copies[((a, b), direction, timing)] = fig
    if not out.known and not out.copies:
        out.why_none = f"no history of this machine's links in {path} (no scan recorded them)"
    return out
