"""Read the text `nvidia-smi topo -m` and `nvidia-smi topo -p2p r|w|n|a|p` print.

Why: on a machine gputopo cannot probe itself (no NVML bindings, an old driver, a machine seen
only through a bug report) the nvidia-smi text is what people have; `gputopo scan --from-smi FILE`
and the simulated-machine descriptions read it through this module.

What the text looks like in the wild, and what this parser therefore accepts:

- Real output is tab separated. The diagonal cell is `` X `` (padded), other cells are link
  classes (``NV4``, ``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``; old drivers print ``SOC`` for SYS).
- Recent drivers underline the header with ANSI escapes (``ESC[4m ... ESC[0m``) even when piped.
- After the device columns come ``CPU Affinity``, ``NUMA Affinity`` and (recent drivers)
  ``GPU NUMA ID``; recent drivers print the NUMA affinity followed by *two* tabs
  (``0\\t\\tN/A``), so an empty tab-separated cell is padding, not always a missing value.
- NIC rows and columns (``NIC0``...; older drivers name them after the device, ``mlx5_0``). NIC
  rows have no affinity cells, or only empty ones. A ``NIC Legend:`` maps NIC# to device names.
- Text copied from web pages has tabs expanded to spaces (8-column stops), trailing spaces kept
  or trimmed, CRLF line ends, non-breaking spaces; sometimes runs of spaces collapsed to one.
- ``topo -p2p`` rows start with a space (`` GPU0``) and hold P2P statuses (OK, CNS, GNS, TNS, NS,
  DR, U) with an unpadded ``X`` on the diagonal.

Header names contain spaces, values never do: rows are split on any whitespace, and affinity
values are placed under their header column by count, by tab cell, or by text column (in that
order of preference), so an empty cell never shifts the ones after it.

Errors raise :class:`gputopo.errors.InputFileError` naming the source and the 1-based line.

This module builds the Topology and re-exports the public names; the reading is split by layer,
each importing only the ones before it: ``smi_lines`` (decoding, lines, tokens, error helpers),
``smi_grid`` (header, rows, affinity columns, legends), ``smi_topo`` (`topo -m` -> SmiMatrix),
``smi_p2p`` (`topo -p2p` statuses, capability names), ``smi_sections`` (several outputs in
one file, kind detection).
"""

from __future__ import annotations

import re
from typing import Dict, List, Mapping, Optional, Tuple, Union

from gputopo.model import Gpu, HostInfo, Nic, NotAvailable, P2P_CAPS, Pair, PcieLink, Topology
from gputopo.probe.smi_grid import AFFINITY_COLUMNS
from gputopo.model.cpu_list import cpu_list_problem, numa_node_problem
from gputopo.probe.smi_lines import _P2P, _TOPO, P2P_STATUSES, _err, _split_lines, decode_smi_bytes
from gputopo.probe.smi_p2p import (P2P_CAP_LETTERS, _parse_p2p_lines, normalize_p2p_cap,
                                   parse_p2p_matrix)
from gputopo.probe.smi_sections import SmiSection, _sections, detect_smi_kind, split_smi_sections
from gputopo.probe.smi_topo import SmiMatrix, _parse_topo_lines, parse_topo_matrix

__all__ = [
    "AFFINITY_COLUMNS", "P2P_CAP_LETTERS", "P2P_STATUSES", "SmiMatrix", "SmiSection",
    "decode_smi_bytes", "detect_smi_kind", "normalize_p2p_cap", "parse_p2p_matrix", "parse_topo_matrix",
    "split_smi_sections", "topology_from_smi", "topology_from_smi_file_text",
    "topology_from_smi_matrix",
]

#: Reason given for every field the nvidia-smi text does not carry.
NOT_IN_TEXT = "not in nvidia-smi topo text"
#: Topology.source of a topology read from nvidia-smi text.
SMI_SOURCE = "nvidia-smi text"


def topology_from_smi_matrix(matrix: SmiMatrix,
                             p2p: Optional[Mapping[str, Mapping[Tuple[int, int], str]]] = None,
                             source: str = "<text>") -> Topology:
    """Build a Topology from a parsed matrix and parsed `-p2p` matrices keyed by capability.

    A pair's P2P status is the row-i/column-j cell (i < j); if the two directions disagree the
    one that is not OK is kept, since P2P is only usable when both ways work.
    """
    p2p = {normalize_p2p_cap(c): m for c, m in (p2p or {}).items()}
    gpus_idx = matrix.gpu_indices
    for cap, statuses in p2p.items():
        named = sorted({i for pair in statuses for i in pair})
        if (named or len(gpus_idx) > 1) and named != gpus_idx:
            raise _err(source, f"the `nvidia-smi topo -p2p` matrix for {cap} names GPUs "
                       f"{named} but the {_TOPO} matrix names {gpus_idx}")

    gpus = []
    for i in gpus_idx:
        if "CPU Affinity" in matrix.columns:
            cpu = matrix.cpu_affinity[i] if matrix.cpu_affinity[i] is not None \
                else NotAvailable("N/A in nvidia-smi topo text")
            if isinstance(cpu, str) and re.fullmatch(r"[\d,\- ]+", cpu) and cpu_list_problem(cpu):
                raise _err(source, f"GPU{i}'s CPU Affinity: {cpu_list_problem(cpu)}")
        else:
            cpu = NotAvailable(NOT_IN_TEXT)
        numa_v = matrix.numa_affinity[i]
        numa: Union[int, NotAvailable]
        if "NUMA Affinity" not in matrix.columns:
            numa = NotAvailable(NOT_IN_TEXT)
        elif numa_v is None:
            numa = NotAvailable("N/A in nvidia-smi topo text")
        elif isinstance(numa_v, int):
            if numa_node_problem(numa_v):
                raise _err(source, f"GPU{i}'s NUMA Affinity: {numa_node_problem(numa_v)}")
            numa = numa_v
        else:
            numa = NotAvailable(f"NUMA Affinity {numa_v!r} in nvidia-smi topo text is not one node")
        na = NotAvailable(NOT_IN_TEXT)
        gpus.append(Gpu(
            nvml_index=i, name=na, uuid=na, pci_bus_id=na, cuda_index=na, numa_node=numa,
            gpu_memory_numa_node=_gpu_numa_id(matrix, i), cpu_affinity=cpu, mig_mode=na,
            pcie=PcieLink(gen_current=na, gen_max=na, width_current=na, width_max=na,
                          replay_counter=na),
            nvlinks=[],
        ))

    pairs = []
    for (i, j), cls in sorted(matrix.classes.items()):
        caps: Dict[str, object] = {}
        for cap in P2P_CAPS:
            if cap not in p2p:
                caps[cap] = NotAvailable(f"no `nvidia-smi topo -p2p {cap[0]}` text given")
                continue
            ways = [s for s in (p2p[cap].get((i, j)), p2p[cap].get((j, i))) if s is not None]
            if not ways:
                caps[cap] = NotAvailable(f"pair {i},{j} not in the -p2p {cap[0]} text")
            else:
                caps[cap] = next((s for s in ways if s != "OK"), ways[0])
        pairs.append(Pair(gpus=(i, j), link_class=cls, nvlink_count=cls.nvlinks, p2p=caps))

    host = HostInfo(hostname=NotAvailable(NOT_IN_TEXT), kernel=NotAvailable(NOT_IN_TEXT),
                    iommu_mode=NotAvailable(NOT_IN_TEXT), acs=NotAvailable(NOT_IN_TEXT),
                    driver_version=NotAvailable(NOT_IN_TEXT), nvml_version=NotAvailable(NOT_IN_TEXT),
                    cuda_driver_version=NotAvailable(NOT_IN_TEXT))
    return Topology(gpus=gpus, pairs=pairs, host=host, source=SMI_SOURCE, simulated=False,
                    machine="", nics=_nics(matrix))


def _gpu_numa_id(matrix: SmiMatrix, i: int):
    """GPU NUMA ID column -> Gpu.gpu_memory_numa_node ("N/A" there: the driver said N/A)."""
    if "GPU NUMA ID" not in matrix.columns:
        return NotAvailable(NOT_IN_TEXT)
    v = matrix.gpu_numa_id[i]
    return v if isinstance(v, int) else NotAvailable("N/A in nvidia-smi topo text")


def _nics(matrix: SmiMatrix) -> List[Nic]:
    """The NIC columns: label, device name (NIC Legend, or the label old drivers print), classes."""
    out = []
    for label in matrix.nics:
        device: Union[str, NotAvailable, None] = matrix.nic_devices.get(label)
        if device is None:
            device = (NotAvailable("no NIC Legend entry in nvidia-smi topo text")
                      if re.fullmatch(r"NIC\d+", label) else label)
        others = {(b if a == label else a): c for (a, b), c in matrix.nic_pair_classes.items()
                  if label in (a, b)}
        out.append(Nic(label=label, device=device, pci_bus_id=NotAvailable(NOT_IN_TEXT),
                       numa_node=NotAvailable(NOT_IN_TEXT),
                       gpu_classes={g: c for (g, n), c in matrix.nic_classes.items() if n == label},
                       nic_classes={n: others[n] for n in matrix.nics if n in others}))
    return out


def topology_from_smi(topo_text: str, p2p_texts: Optional[Mapping[str, str]] = None,
                      source: str = "<nvidia-smi text>") -> Topology:
    """Topology from `nvidia-smi topo -m` text and, optionally, `topo -p2p X` texts keyed by
    capability ("read", "write", "nvlink", "atomics", "pci"; or r/w/n/a/p).

    Fields the text does not carry are NotAvailable("not in nvidia-smi topo text");
    ``numa_node`` comes from NUMA Affinity, ``cpu_affinity`` from CPU Affinity, each pair's
    ``nvlink_count`` from NV#. Topology.source is "nvidia-smi text".
    """
    matrix = parse_topo_matrix(topo_text, source)
    p2p = {normalize_p2p_cap(c): parse_p2p_matrix(t, source) for c, t in (p2p_texts or {}).items()}
    return topology_from_smi_matrix(matrix, p2p, source)


def topology_from_smi_file_text(text: str, source: str = "<nvidia-smi text>",
                                default_p2p_cap: Optional[str] = None) -> Topology:
    """Topology from a file holding `nvidia-smi topo -m` output, optionally followed (or
    preceded) by `nvidia-smi topo -p2p X` outputs, as people paste them.

    Each `-p2p` matrix's capability is read from the command line pasted above it
    (`$ nvidia-smi topo -p2p r`); where there is none, ``default_p2p_cap`` is used, and without
    it the file is refused with a message saying to add the command line. Exactly one `topo -m`
    matrix is required; line numbers in errors are those of the file.
    """
    lines = _split_lines(text)
    sections = _sections(lines, source)
    topo_secs = [s for s in sections if s.kind == "topo"]
    if not topo_secs:
        raise _err(source, f"no {_TOPO} matrix in the file (found only {_P2P} output at line "
                   f"{sections[0].header_line})", sections[0].header_line)
    if len(topo_secs) > 1:
        raise _err(source, f"a second {_TOPO} matrix (the first is at line "
                   f"{topo_secs[0].header_line})", topo_secs[1].header_line)
    # Everything but the last section ends at the next command, so text after a legend that
    # is neither a command nor a legend is an error in every section.
    matrix = _parse_topo_lines(topo_secs[0]._lines, source, stop_at_command=True)
    default = normalize_p2p_cap(default_p2p_cap) if default_p2p_cap else None
    p2p: Dict[str, Dict[Tuple[int, int], str]] = {}
    where: Dict[str, int] = {}
    for sec in sections:
        if sec.kind != "p2p":
            continue
        cap = sec.cap or default
        if cap is None:
            raise _err(source, f"cannot tell which capability this {_P2P} matrix shows: put the "
                       "command you ran (e.g. `nvidia-smi topo -p2p r`) on a line above it",
                       sec.header_line)
        if cap in p2p:
            raise _err(source, f"a second {_P2P} matrix for {cap} (the first is at line "
                       f"{where[cap]})", sec.header_line)
        parsed = _parse_p2p_lines(sec._lines, source, stop_at_command=True)
        if parsed.gpus != matrix.gpu_indices:
            raise _err(source, f"this {_P2P} matrix names GPUs {parsed.gpus} but the {_TOPO} "
                       f"matrix (line {matrix.header_line}) names {matrix.gpu_indices}",
                       sec.header_line)
        p2p[cap], where[cap] = parsed.status, sec.header_line
    return topology_from_smi_matrix(matrix, p2p, source)
