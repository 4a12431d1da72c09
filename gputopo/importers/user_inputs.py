"""What every `gputopo import` reads or refuses besides a tool's own output (exit 2): the same
file given twice, which would count every measurement twice, and the ``--topo`` file, the
machine's topology its GPUs are matched against.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Dict, List

from gputopo.errors import InputFileError, UsageError
from gputopo.model import Topology


def refuse_duplicates(paths: List[Path], what: str = "the nccl-tests log") -> None:
    """The same output given twice (same file, or files with the same content) would count every
    measurement twice: exit 2 naming both."""
    import os

    from gputopo.inputs import is_fifo, user_file_problem

    seen: Dict[str, Path] = {}  # content hash -> the first file with it
    pipes: Dict[tuple, Path] = {}  # (device, inode) -> the first path of that pipe
    for p in paths:
        problem = user_file_problem(p, fifo_ok=True)
        if problem:
            raise InputFileError(p, f"cannot read {what}: {problem}")
        if is_fifo(p):  # a pipe is read once: not hashed here; the same pipe twice is refused
            st = os.stat(p)
            first = pipes.setdefault((st.st_dev, st.st_ino), p)
            if first is not p:
                raise UsageError(f"{p} is given twice (the same pipe as {first}): a pipe can be read once; "
                                 "give each log once")
            continue
        try:
            digest = hashlib.sha256()
            with open(p, "rb") as f:  # in pieces: a log may be larger than memory
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    digest.update(chunk)
            key = digest.hexdigest()
        except OSError:
            continue  # unreadable: the parser says why
        if key in seen:
            same = "is given twice" if seen[key].resolve() == p.resolve() else f"has the same content as {seen[key]}"
            raise UsageError(f"{p} {same}: its measurements would be counted twice; give each log once")
        seen[key] = p


def load_topo_file(path: str) -> Topology:
    """--topo: `gputopo scan --json` output (it has GPU models and bus ids, so a mismatch with
    the logs is seen in full) or saved `nvidia-smi topo -m` text. What reading the text said
    (cut after a row, no legend) is kept in ``Topology.notes``, prefixed "--topo FILE: ", for
    the import to say (run.json ``options.topology_notes``, report/import_numbering.py)."""
    import json

    from gputopo.inputs import MAX_DESCRIPTION_BYTES, read_user_bytes
    from gputopo.model import topology_from_json

    data = read_user_bytes(path, "topology", MAX_DESCRIPTION_BYTES)
    if data.lstrip()[:1] == b"{":
        try:
            return topology_from_json(json.loads(data))
        except (ValueError, KeyError, TypeError) as e:
            raise InputFileError(path, f"not a gputopo topology (`gputopo scan --json`): {e}") from None
    from gputopo.probe.smi import decode_smi_bytes, topology_from_smi_file_text
    from gputopo.text_input import display_name

    notes: List[str] = []  # what `scan --from-smi` says of the file (cut, no legend): the import says it too
    topo = topology_from_smi_file_text(decode_smi_bytes(data), source=path, notes=notes)
    topo.notes = [f"--topo {display_name(path)}: {n}" for n in notes]
    return topo
