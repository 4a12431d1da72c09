"""Write a Topology as the text `nvidia-smi topo -m` / `nvidia-smi topo -p2p X` print.

Why: people compare what gputopo saw with what nvidia-smi shows on their machine, paste it into
issues, and feed it back to `gputopo scan --from-smi`; the simulated machines print it too. The
layout is the driver's, tab for tab (modern drivers, as in the fixtures):

    <TAB>GPU0<TAB>GPU1<TAB>NIC0<TAB>CPU Affinity<TAB>NUMA Affinity<TAB>GPU NUMA ID
    GPU0<TAB> X <TAB>NV4<TAB>PIX<TAB>0-31<TAB>0<TAB><TAB>N/A
    ...
    NIC0<TAB>PIX<TAB>SYS<TAB> X 
    <blank>
    Legend:
    <blank>
      X    = Self
      ...
    <blank>
    NIC Legend:
    <blank>
      NIC0: mlx5_0

Differences from a terminal: no ANSI underline on the header (nvidia-smi adds it even when
piped; it is decoration, and the parser strips it). Affinity columns are printed only when some
GPU has data for them (a GPU without prints N/A, as nvidia-smi does); ``GPU NUMA ID`` is printed
when the source read it, even as N/A (the driver prints it N/A on x86), and after the NUMA
affinity's two tabs as the driver does. NIC rows carry no affinity cells; the NIC Legend is
printed when device names are known. GPUs that NVML lost are left out.
"""

from __future__ import annotations

from typing import Any, Callable, List

from gputopo.model import NotAvailable, P2P_CAPS, Topology, is_value
from gputopo.model.linkclass import LEGEND
from gputopo.model.topology import P2P_STATUS_MEANING
from gputopo.probe.smi import NOT_IN_TEXT, P2P_CAP_NAMES

__all__ = ["format_p2p_matrix", "format_topo_matrix", "was_read"]

#: `topo -p2p` legend in the driver's order; DR is printed only when a cell says DR (drivers
#: before DR existed do not print it, newer ones print it between NS and U).
_P2P_LEGEND_ORDER = ("OK", "CNS", "GNS", "TNS", "NS", "DR", "U")


def _legend_line(key: str, text: str) -> str:
    return f"  {key:<4} = {text}"


def _gpus(topo: Topology):
    """The GPUs to print, by NVML index (lost ones left out); ValueError when there is none."""
    gpus = sorted((g for g in topo.gpus if g.lost is None), key=lambda g: g.nvml_index)
    if not gpus:
        raise ValueError("the topology has no GPUs to print")
    return gpus


def _row(label: str, a, gpus, self_cell: str, cell: Callable[[Any, Any], str]) -> List[str]:
    """One matrix row: ``label``, then ``cell(a, b)`` per GPU ``b`` (``self_cell`` where b is a)."""
    return [label] + [self_cell if a.nvml_index == b.nvml_index else cell(a, b) for b in gpus]


def _with_legend(lines: List[str], legend: List[str]) -> str:
    return "\n".join(lines + ["", "Legend:", ""] + legend) + "\n"


#: Reasons that mean a field was never looked for (so nvidia-smi would not print its column).
_NEVER_READ = ("not read", NOT_IN_TEXT)


def was_read(value) -> bool:
    """Data, or an N/A that the source itself reported (the driver prints such a column N/A)."""
    return is_value(value) or (isinstance(value, NotAvailable) and value.reason not in _NEVER_READ)


def _nic_class(nic, other: str, key) -> str:
    table = nic.nic_classes if isinstance(key, str) else nic.gpu_classes
    if key not in table:
        raise ValueError(f"the topology has no class between {nic.label} and {other} (not read from its source)")
    return str(table[key])


def format_topo_matrix(topo: Topology) -> str:
    """The `nvidia-smi topo -m` text of ``topo`` (ends with a newline).

    Raises ValueError if there is no GPU to print or two printed devices have no class.
    """
    gpus = _gpus(topo)
    nics = topo.nics
    with_cpu = any(is_value(g.cpu_affinity) for g in gpus)
    with_numa = any(was_read(g.numa_node) for g in gpus)
    with_gnuma = any(was_read(g.gpu_memory_numa_node) for g in gpus)

    def link_class(a, b) -> str:
        try:
            return str(topo.link_class(a.nvml_index, b.nvml_index))
        except KeyError:
            raise ValueError(f"the topology has no pair GPU{a.nvml_index}-GPU{b.nvml_index}") from None

    header = [""] + [f"GPU{g.nvml_index}" for g in gpus] + [n.label for n in nics]
    if with_cpu:
        header.append("CPU Affinity")
    if with_numa:
        header.append("NUMA Affinity")
    if with_gnuma:
        header.append("GPU NUMA ID")
    lines: List[str] = ["\t".join(header)]
    for a in gpus:
        cells = _row(f"GPU{a.nvml_index}", a, gpus, " X ", link_class)
        cells += [_nic_class(n, f"GPU{a.nvml_index}", a.nvml_index) for n in nics]
        if with_cpu:
            cells.append(str(a.cpu_affinity) if is_value(a.cpu_affinity) else "N/A")
        if with_numa:
            cells.append(str(a.numa_node) if is_value(a.numa_node) else "N/A")
        if with_gnuma:
            cells += ([""] if with_numa else []) + [str(a.gpu_memory_numa_node)
                                                    if is_value(a.gpu_memory_numa_node) else "N/A"]
        lines.append("\t".join(cells))
    for n in nics:
        row = [n.label] + [_nic_class(n, f"GPU{g.nvml_index}", g.nvml_index) for g in gpus]
        known = [" X " if m is n else str(n.nic_classes[m.label]) if m.label in n.nic_classes else None for m in nics]
        if None in known:
            # read from a paste that ended inside this row (smi.py says so): written as cut there,
            # without the legend after it, so reading it back gives the same topology and note
            lines.append("\t".join(row + [c for c in known[:known.index(None)] if c is not None]))
            return "\n".join(lines) + "\n"
        lines.append("\t".join(row + [c for c in known if c is not None]))
    text = _with_legend(lines, [_legend_line(k, v) for k, v in LEGEND.items()])
    named = [n for n in nics if is_value(n.device) and n.device != n.label]
    if named:
        text += "\nNIC Legend:\n\n" + "".join(f"  {n.label}: {n.device}\n" for n in named)
    return text


def format_p2p_matrix(topo: Topology, cap: str) -> str:
    """The `nvidia-smi topo -p2p X` text of ``topo`` for capability ``cap`` ("read", "write",
    "nvlink", "atomics", "pci", or r/w/n/a/p).

    A pair whose status for ``cap`` is not available prints ``U`` (nvidia-smi's "Unknown").
    Raises ValueError for an unknown capability.
    """
    key = str(cap).strip().lower()
    cap_name = P2P_CAP_NAMES.get(key, key)
    if cap_name not in P2P_CAPS:
        raise ValueError(f"unknown P2P capability {cap!r}; use one of {', '.join(P2P_CAPS)}")
    gpus = _gpus(topo)
    seen = set()

    def status(a, b) -> str:
        try:
            value = topo.pair(a.nvml_index, b.nvml_index).p2p.get(cap_name)
        except KeyError:
            value = None
        text = str(value).upper() if is_value(value) else "U"
        if text not in P2P_STATUS_MEANING:
            text = "U"
        seen.add(text)
        return text

    lines = ["\t".join([""] + [f"GPU{g.nvml_index}" for g in gpus])]
    lines += ["\t".join(_row(f" GPU{a.nvml_index}", a, gpus, "X", status)) for a in gpus]
    return _with_legend(lines, [_legend_line("X", "Self")]
                        + [_legend_line(k, P2P_STATUS_MEANING[k]) for k in _P2P_LEGEND_ORDER
                           if k != "DR" or "DR" in seen])
