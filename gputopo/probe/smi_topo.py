"""`nvidia-smi topo -m`: the link-class matrix and its affinity columns, as a SmiMatrix.

Why: the link classes between GPUs (and NICs) and each GPU's CPU/NUMA affinity are what a
topology read from text is built from (:func:`gputopo.probe.smi_parser.topology_from_smi`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple, Union

from gputopo.model import LinkClass
from gputopo.model.linkclass import MAX_NVLINKS
from gputopo.probe.smi_grid import (AFFINITY_COLUMNS, _Grid, _NIC_LABEL_RE, _parse_after,
                                    _parse_grid)
from gputopo.probe.smi_lines import (P2P_STATUSES, _Line, _P2P, _TOPO, _err, _gpu_index,
                                     _is_blank, _q, _split_lines)

#: What each affinity column may hold besides N/A: a CPU list, a list of NUMA nodes, one node.
_AFFINITY_FORMS = {"CPU Affinity": (re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$"), "a CPU list like 0-31,64-95"),
                   "NUMA Affinity": (re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$"), "a NUMA node like 0"),
                   "GPU NUMA ID": (re.compile(r"^-?\d+$"), "a NUMA node like 2")}
_NA_TEXTS = {"", "N/A", "NA", "N.A.", "-"}


@dataclass
class SmiMatrix:
    """What one `nvidia-smi topo -m` matrix says.

    GPUs are keyed by the number in their label (``GPU3`` -> 3), which is the NVML index.
    ``classes`` holds each GPU pair once, ``(i, j)`` with i < j. Affinity maps hold every GPU;
    ``None`` where the cell says N/A, is empty, or the column is absent (``columns`` tells which
    affinity columns the header has). ``numa_affinity``/``gpu_numa_id`` are ints, or the text
    as printed when it is not one number.
    """

    gpu_count: int
    gpu_labels: List[str]
    classes: Dict[Tuple[int, int], LinkClass]
    cpu_affinity: Dict[int, Optional[str]]
    numa_affinity: Dict[int, Union[int, str, None]]
    gpu_numa_id: Dict[int, Union[int, str, None]]
    nics: List[str] = field(default_factory=list)
    nic_classes: Dict[Tuple[int, str], LinkClass] = field(default_factory=dict)
    #: Between NICs (the NIC rows), each pair once in header order: (NIC0, NIC1) -> class.
    nic_pair_classes: Dict[Tuple[str, str], LinkClass] = field(default_factory=dict)
    legend_present: bool = False
    #: The header's columns after the device columns, as printed ("CPU Affinity", ...).
    columns: List[str] = field(default_factory=list)
    #: NIC label -> device name, from the "NIC Legend:" block ({"NIC0": "mlx5_0"}).
    nic_devices: Dict[str, str] = field(default_factory=dict)
    #: Header columns this parser does not know: name -> {gpu: value or None}.
    extra_columns: Dict[str, Dict[int, Optional[str]]] = field(default_factory=dict)
    #: 1-based line numbers, for callers that report problems found later.
    header_line: int = 0
    gpu_lines: Dict[int, int] = field(default_factory=dict)

    @property
    def gpu_indices(self) -> List[int]:
        return sorted(self.cpu_affinity)

    def link_class(self, i: int, j: int) -> LinkClass:
        return self.classes[(min(i, j), max(i, j))]


def _cell_class(cell: str, row: str, col: str, source: str, no: int) -> LinkClass:
    try:
        return LinkClass.parse(cell)
    except ValueError:
        pass
    if re.fullmatch(r"NV\d+", cell.strip(), re.IGNORECASE):
        raise _err(source, f"{_q(cell)} in row {row}, column {col} is no NVLink count a GPU has "
                   f"(NV1 .. NV{MAX_NVLINKS})", no)
    if cell.upper() in P2P_STATUSES:
        raise _err(source, f"{_q(cell)} (row {row}, column {col}) is a P2P status: this looks like "
                   f"{_P2P} output, not {_TOPO}", no)
    raise _err(source, f"unknown link class {_q(cell)} in row {row}, column {col} (expected X, "
               f"NV#, PIX, PXB, PHB, NODE, SYS or SOC)", no)


def _matrix_classes(grid: _Grid, source: str) -> Dict[Tuple[str, str], LinkClass]:
    """Validated off-diagonal cells of every row: (row label, column label) -> class."""
    out: Dict[Tuple[str, str], LinkClass] = {}
    for label in grid.row_order:
        row = grid.rows[label]
        for col, cell in zip(grid.devices, row.cells):
            if col == label:
                if cell.upper() != "X":
                    raise _err(source, f"the diagonal cell of {label} is {_q(cell)}, expected X",
                               row.no)
                continue
            if cell.upper() == "X":
                raise _err(source, f"X off the diagonal: row {label}, column {col}", row.no)
            out[(label, col)] = _cell_class(cell, label, col, source, row.no)
    for (a, b), cls in out.items():
        other = out.get((b, a))
        if other is not None and other != cls:
            ra, rb = grid.rows[a], grid.rows[b]
            later, earlier = (ra, rb) if ra.no > rb.no else (rb, ra)
            said_later = out[(later.label, earlier.label)]
            said_earlier = out[(earlier.label, later.label)]
            raise _err(source, f"the matrix is not symmetric: row {later.label} says "
                       f"{later.label}-{earlier.label} is {said_later}, row {earlier.label} "
                       f"(line {earlier.no}) says {said_earlier}", later.no)
    return out


def _na(v: Optional[str]) -> Optional[str]:
    return None if v is None or v.strip().upper() in _NA_TEXTS else v.strip()


def _int_or_text(v: Optional[str]) -> Union[int, str, None]:
    v = _na(v)
    if v is None:
        return None
    if re.fullmatch(r"-?\d+", v):
        n = int(v)
        return n if n >= 0 else None  # NVML says -1 for "no NUMA node"
    return v


def _parse_topo_lines(lines: Sequence[_Line], source: str, stop_at_command: bool = False
                      ) -> SmiMatrix:
    grid = _parse_grid(lines, source, _TOPO)
    gpu_labels = [d for d in grid.devices if _gpu_index(d) is not None]
    nics = [d for d in grid.devices if _gpu_index(d) is None]
    if not gpu_labels:
        raise _err(source, "the header names no GPU columns", grid.header_no)
    for n in nics:
        if not _NIC_LABEL_RE.match(n) or n.upper().startswith("GPU"):
            raise _err(source, f"column {_q(n)} is neither a GPU (GPU0, GPU1, ...) nor a NIC (NIC0, "
                       "mlx5_0, ...)", grid.header_no)
    missing = [g for g in gpu_labels + nics if g not in grid.rows]
    if missing:
        expected_at = grid.last_row_no + 1 if grid.last_row_no < lines[-1].no else grid.last_row_no
        if all(g in missing for g in gpu_labels):
            msg = f"no GPU rows follow the header (line {grid.header_no})"
        else:
            msg = (f"no row for {', '.join(missing)} (the header at line {grid.header_no} names "
                   f"{', '.join(grid.devices)}): the matrix is not square")
        raise _err(source, msg, expected_at)
    classes_by_label = _matrix_classes(grid, source)
    legend_present, legend, nic_devices = _parse_after(grid.rest, source, _TOPO, stop_at_command, nics)
    p2p_legend = any(k in P2P_STATUSES for k in legend)
    if p2p_legend and not any(k in ("PIX", "SYS", "SOC", "NV#") for k in legend):
        raise _err(source, f"this is {_P2P} output (its legend names P2P statuses), not {_TOPO}",
                   grid.header_no)

    idx: Dict[str, int] = {}
    for g in gpu_labels:
        index = _gpu_index(g)
        if index is not None:  # gpu_labels are the labels with a GPU index
            idx[g] = index
    classes: Dict[Tuple[int, int], LinkClass] = {}
    for a in gpu_labels:
        for b in gpu_labels:
            if idx[a] < idx[b]:
                classes[(idx[a], idx[b])] = classes_by_label[(a, b)]
    nic_classes = {(idx[g], n): classes_by_label[(g, n)] for g in gpu_labels for n in nics}
    for (gi, n), cls in sorted(nic_classes.items(), key=lambda kv: kv[0][0]):
        if cls.is_nvlink:
            raise _err(source, f"{cls} between GPU{gi} and NIC {n}: a NIC's path to a GPU is a PCIe "
                       "class (PIX, PXB, PHB, NODE, SYS)", grid.rows[f"GPU{gi}"].no)
    nic_pairs = {(a, b): classes_by_label[(a, b)] for k, a in enumerate(nics) for b in nics[k + 1:]}

    names = [t.text for t in grid.trailing]
    cpu: Dict[int, Optional[str]] = {}
    numa: Dict[int, Union[int, str, None]] = {}
    gnuma: Dict[int, Union[int, str, None]] = {}
    extra: Dict[str, Dict[int, Optional[str]]] = {n: {} for n in names if n not in AFFINITY_COLUMNS}
    for g in gpu_labels:
        i = idx[g]
        values = dict(zip(names, grid.rows[g].trailing))
        for name, (form, expected) in _AFFINITY_FORMS.items():
            v = _na(values.get(name))
            if v is not None and not form.match(v):
                raise _err(source, f"{name} of {g} is {_q(v)}: expected {expected}, or N/A",
                           grid.rows[g].no)
        cpu[i] = _na(values.get("CPU Affinity"))
        numa[i] = _int_or_text(values.get("NUMA Affinity"))
        gnuma[i] = _int_or_text(values.get("GPU NUMA ID"))
        for n in extra:
            extra[n][i] = _na(values.get(n))
    return SmiMatrix(
        gpu_count=len(gpu_labels), gpu_labels=gpu_labels, classes=classes, cpu_affinity=cpu,
        numa_affinity=numa, gpu_numa_id=gnuma, nics=nics, nic_classes=nic_classes,
        nic_pair_classes=nic_pairs,
        legend_present=legend_present, columns=names, nic_devices=nic_devices,
        extra_columns=extra, header_line=grid.header_no,
        gpu_lines={idx[g]: grid.rows[g].no for g in gpu_labels},
    )


def parse_topo_matrix(text: str, source: str = "<text>") -> SmiMatrix:
    """Parse the output of `nvidia-smi topo -m` (any driver age; see the module docstring).

    Raises InputFileError(source, message, line=N) when the text is empty, is not such a
    matrix, is not square over the GPUs, has a diagonal cell other than X, is not symmetric,
    names an unknown link class, or has text after the matrix other than its legends.
    """
    lines = _split_lines(text)
    if not any(not _is_blank(ln) for ln in lines):
        raise _err(source, f"no text: expected the output of {_TOPO}")
    return _parse_topo_lines(lines, source)
