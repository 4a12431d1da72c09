"""`gputopo import ibstat FILE`: saved ``ibstat`` / ``ibv_devinfo`` text (ibstat_parse.py) as a
run folder whose topology holds the node's NIC ports, judged like a scan's NIC ports.

The text names no GPU, so the folder's topology has none: one NIC per adapter (``label`` and
``device`` its name, ``mlx5_0``), each with its ports' facts (gputopo.model.nic.NicPort). What
the text held and what could not be read goes to ``ibstat.json``-like ``imported.json`` (``tool:
"ibstat"``). An empty file, a binary one, or text with no ``CA '...'`` / ``hca_id:`` line is
refused with one line (exit 2).
"""

from __future__ import annotations

from typing import Any

from gputopo.errors import InputFileError
from gputopo.text_input import TextSource, display_name, open_lines

from .ibstat_parse import IbstatRead, parse_ibstat_lines


def read_ibstat(path: str) -> IbstatRead:
    src = TextSource(path)
    read = parse_ibstat_lines(open_lines(path, src), src.name)
    if read.form is None:
        raise InputFileError(src.name, "not ibstat or ibv_devinfo output: no \"CA 'mlx5_0'\" (ibstat) or "
                                       "'hca_id: mlx5_0' (ibv_devinfo) line")
    if not read.ports:
        raise InputFileError(src.name, f"{read.form} text with {read.adapters} adapter(s) and no port: no "
                                       "'Port 1:' (ibstat) or 'port: 1' (ibv_devinfo) line")
    src.tell(read)
    return read


def ibstat_document(read: IbstatRead, path: str) -> dict[str, Any]:
    return {"tool": "ibstat", "form": read.form, "file": display_name(path), "path": read.source,
            "adapters": read.adapters, "ports": [p.to_json() for p in read.ports], "failures": [],
            "problems": list(read.problems), "notes": list(read.notes)}

