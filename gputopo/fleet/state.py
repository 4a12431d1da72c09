"""The last verdict of `gputopo health`, kept on the node: its time, verdict, reason, budget used,
each check's applicability and status, and what was done to the node (a Slurm drain or resume).

Kept in ``--state-dir`` (default :data:`DEFAULT_STATE_DIR`, ``/run/gputopo``: a tmpfs, so a reboot
starts afresh, as the node's hardware may have changed), falling back to the history database's
folder where that cannot be written (a health check run as a user). Written to a temporary file
and renamed, so a reader never sees half of it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, Optional

from gputopo.runfolder.writer import write_json

DEFAULT_STATE_DIR = Path("/run/gputopo")
STATE_FILE = "health-last.json"
#: `gputopo gate`'s last verdict, beside health's, in the same folder (docs/fleet.md): a prolog
#: may not call Slurm commands, so gate keeps its reason here and `health` reads it.
GATE_STATE_FILE = "gate-last.json"


def usable(folder: Path) -> bool:
    """Whether ``folder`` exists (or can be made) and can be written."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return folder.is_dir() and os.access(folder, os.W_OK | os.X_OK)


def state_folder(given: Optional[str], history: Optional[Path]) -> Optional[Path]:
    """``--state-dir`` as given (the caller refuses it when unusable), else the default, else the
    history's folder; None when neither can be written."""
    if given:
        return Path(given)
    if usable(DEFAULT_STATE_DIR):
        return DEFAULT_STATE_DIR
    if history is not None and usable(history.parent):
        return history.parent
    return None


def read_state(folder: Optional[Path], name: str = STATE_FILE) -> Optional[Dict[str, Any]]:
    """The last verdict kept in ``folder`` (``name``: health's, or :data:`GATE_STATE_FILE`), or
    None (none yet, or unreadable: then it is as if none)."""
    if folder is None:
        return None
    try:
        doc = json.loads((folder / name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def write_state(folder: Path, doc: Dict[str, Any], name: str = STATE_FILE) -> Path:
    """Write ``doc`` as the last verdict (the run folder's one atomic JSON write: temporary file +
    rename); OSError when it cannot be."""
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / name, doc)
    return folder / name
