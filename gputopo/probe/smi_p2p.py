"""`nvidia-smi topo -p2p r|w|n|a|p`: the P2P status matrix, and the capability names.

Why: a pair's P2P read/write/nvlink/atomics/pci status comes from these matrices, one per
capability; NVML may answer differently by direction, so pairs are kept ordered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

from gputopo.errors import UsageError
from gputopo.model import LinkClass, P2P_CAPS
from gputopo.probe.smi_grid import _parse_after, _parse_grid
from gputopo.probe.smi_lines import (P2P_STATUSES, _Line, _P2P, _TOPO, _err, _gpu_index,
                                     _is_blank, _q, _split_lines)

#: `nvidia-smi topo -p2p` letter -> gputopo capability name (P2P_CAPS).
P2P_CAP_LETTERS = {"r": "read", "w": "write", "n": "nvlink", "a": "atomics", "p": "pci"}
_CAP_NAMES = {**{c: c for c in P2P_CAPS}, **P2P_CAP_LETTERS, "pcie": "pci"}


@dataclass
class _P2pMatrix:
    header_line: int
    gpus: List[int]
    status: Dict[Tuple[int, int], str]  # ordered pairs (row GPU, column GPU)
    legend_present: bool


def _parse_p2p_lines(lines: Sequence[_Line], source: str, stop_at_command: bool = False
                     ) -> _P2pMatrix:
    grid = _parse_grid(lines, source, _P2P)
    if grid.trailing:
        raise _err(source, f"the header has {_q(grid.trailing[0].text)}: this looks like {_TOPO} "
                   f"output, not {_P2P}", grid.header_no)
    gpu_of: Dict[str, int] = {}  # every column (and so every row: rows are columns) is a GPU
    for d in grid.devices:
        index = _gpu_index(d)
        if index is None:
            raise _err(source, f"column {d} is not a GPU ({_P2P} has GPU columns only)",
                       grid.header_no)
        gpu_of[d] = index
    missing = [g for g in grid.devices if g not in grid.rows]
    if missing:
        expected_at = grid.last_row_no + 1 if grid.last_row_no < lines[-1].no else grid.last_row_no
        raise _err(source, f"no row for {', '.join(missing)} (the header at line "
                   f"{grid.header_no} names {', '.join(grid.devices)}): the matrix is not square",
                   expected_at)
    status: Dict[Tuple[int, int], str] = {}
    for label in grid.row_order:
        row = grid.rows[label]
        i = gpu_of[label]
        for col, cell in zip(grid.devices, row.cells):
            u = cell.upper()
            if col == label:
                if u != "X":
                    raise _err(source, f"the diagonal cell of {label} is {_q(cell)}, expected X",
                               row.no)
                continue
            if u not in P2P_STATUSES:
                hint = ""
                try:
                    LinkClass.parse(u)
                    hint = f": a link class, this looks like {_TOPO} output"
                except ValueError:
                    pass
                raise _err(source, f"unknown P2P status {_q(cell)} in row {label}, column {col} "
                           f"(expected one of {', '.join(P2P_STATUSES)}){hint}", row.no)
            status[(i, gpu_of[col])] = u
    legend_present, _, _ = _parse_after(grid.rest, source, _P2P, stop_at_command)
    return _P2pMatrix(grid.header_no, sorted(gpu_of[d] for d in grid.devices), status,
                      legend_present)


def parse_p2p_matrix(text: str, source: str = "<text>") -> Dict[Tuple[int, int], str]:
    """Parse `nvidia-smi topo -p2p r|w|n|a|p` output into {(i, j): "OK"/"NS"/...}.

    Keys are *ordered* pairs i != j as printed (row i, column j), since NVML's answer may
    differ by direction. Raises InputFileError like :func:`parse_topo_matrix`.
    """
    lines = _split_lines(text)
    if not any(not _is_blank(ln) for ln in lines):
        raise _err(source, f"no text: expected the output of {_P2P}")
    return _parse_p2p_lines(lines, source).status


def normalize_p2p_cap(cap: str) -> str:
    """'r'/'read', 'w'/'write', 'n'/'nvlink', 'a'/'atomics', 'p'/'pci'/'pcie' -> P2P_CAPS name."""
    key = str(cap).strip().lower()
    if key not in _CAP_NAMES:
        raise UsageError(f"unknown P2P capability {cap!r}; use one of {', '.join(P2P_CAPS)} "
                         f"(or r, w, n, a, p)")
    return _CAP_NAMES[key]
