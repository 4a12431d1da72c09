"""What `gputopo scan` prints: the matrix (as `nvidia-smi topo -m`, coloured), GPU and host
details, the problems; or the same as JSON / CSV. Only rich is imported (cheap); no pandas.
"""

from __future__ import annotations

import csv
import io
import json
from typing import List

from gputopo import SCHEMA_VERSION
from gputopo.fit_table import Column, fitted_table, left_out_note
from gputopo.model import P2P_CAPS, Finding, Topology, topology_to_json
from gputopo.model.topology import pair_to_json
from gputopo.model.bus_id import table_bus_id
from gputopo.model.finding import gpu_ranges
from gputopo.model.fabric import GpuFabric
from gputopo.model.health import GpuHealth
from gputopo.model.linkclass import LEGEND
from gputopo.model.values import is_value, show
from gputopo.probe.smi_format import was_read
from gputopo.probe.smi import SMI_SOURCE
from gputopo.report.health_checks import HEALTH_COLUMNS, health_cells, kernel_log_line
from gputopo.report.kernel_log_findings import gpu_driver_flags, scan_kernel_log_notes

CLASS_STYLE = {"NV": "bold green", "PIX": "cyan", "PXB": "cyan", "PHB": "yellow",
               "NODE": "yellow", "SYS": "red", "X": "dim"}
SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "dim"}
#: The scan's GPU table: the ids a user copies (NVML index, bus id) and the link state stay whole
#: at any width; what the matrix or `--json` also says leaves first on a narrow terminal.
GPU_COLUMNS = (Column("NVML", keep=True), Column("CUDA", drop=4), Column("name", drop=2),
               Column("PCI bus id", keep=True), Column("NUMA", drop=3), Column("CPU affinity", drop=5),
               Column("PCIe now (max)", keep=True), Column("NVLinks up", keep=True), Column("MIG", drop=6))
#: The health table: error counts, Xids and the verdict stay; readings leave first.
HEALTH_FIT = {"NVML": Column("NVML", keep=True), "temp": Column("temp", drop=4),
              "power (limit)": Column("power (limit)", drop=5), "persist": Column("persist", drop=6),
              "ECC": Column("ECC", drop=2), "uncorr. (vol/agg)": Column("uncorr. (vol/agg)", keep=True),
              "memory repair": Column("memory repair", drop=1), "clocks held by": Column("clocks held by", drop=3),
              "Xid": Column("Xid", keep=True), "health": Column("health", keep=True)}


def simulated_banner(topo: Topology) -> str:
    return f"SIMULATED machine '{topo.machine}' ({topo.source}): no real GPU was read"


#: Said above a scan read from a file: what such text cannot hold shows n/a below.
SMI_BANNER = ("From a file (nvidia-smi topo text), not from a GPU: names, bus ids, PCIe links, "
              "NVLink states and host facts are not in that text and show n/a")


def scan_json(topo: Topology, problems: List[Finding]) -> str:
    """The scan document, indented; its pairs written by pairs_json_text (the same text as
    json.dumps, many times faster on a big machine), put in where a marker stands."""
    from gputopo.report.pairs_json import pairs_json_text

    from gputopo.report.network_checks import network_json

    doc = {"schema_version": SCHEMA_VERSION, **topology_to_json(topo, with_pairs=False),
           "network": network_json(topo), "problems": [f.to_json() for f in problems],
           "kernel_log_notes": scan_kernel_log_notes(topo)}
    marker = "\u0000pairs\u0000"  # no text of a topology holds it: json escapes control characters
    doc["pairs"] = marker
    text = json.dumps(doc, indent=2)
    quoted = json.dumps(marker)
    if text.count(quoted) != 1:  # pragma: no cover - a marker found elsewhere: the plain way
        doc["pairs"] = [pair_to_json(p) for p in topo.pairs]
        return json.dumps(doc, indent=2)
    return text.replace(quoted, pairs_json_text(topo.pairs))


def scan_csv(topo: Topology) -> str:
    """One row per GPU pair: class, NVLink count, P2P status per capability, and both GPUs' ids."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["gpu_i", "gpu_j", "link_class", "nvlink_count", *(f"p2p_{c}" for c in P2P_CAPS),
                "bus_id_i", "bus_id_j", "numa_i", "numa_j", "simulated"])
    for p in topo.pairs:
        gi, gj = topo.gpu(p.gpus[0]), topo.gpu(p.gpus[1])
        w.writerow([*p.gpus, str(p.link_class), p.nvlink_count,
                    *(show(p.p2p.get(c)) for c in P2P_CAPS),
                    show(gi.pci_bus_id), show(gj.pci_bus_id), show(gi.numa_node), show(gj.numa_node),
                    str(topo.simulated).lower()])
    return buf.getvalue()


def render_scan(console, topo: Topology, problems: List[Finding]) -> None:
    """Print the scan to a rich Console."""
    from rich.text import Text

    if topo.simulated:
        console.print(Text(simulated_banner(topo), style="bold magenta reverse"))
    if topo.source == SMI_SOURCE:
        console.print(Text(SMI_BANNER, style="bold"))
    if len(topo.gpus) + len(topo.nics) > MAX_DRAWN_MATRIX:
        _print_plain_matrix(console, topo)
    else:
        console.print(_matrix_table(topo, console.width))
    classes = set(topo.classes()) | {c for n in topo.nics for c in n.gpu_classes.values()}
    present = sorted({("NV#" if c.is_nvlink else c.kind) for c in classes},
                     key=lambda k: list(LEGEND).index(k))
    for k in present:
        console.print(Text.assemble(("  " + k.ljust(5), CLASS_STYLE.get(k.rstrip("#"), "")),
                                    f"= {LEGEND[k]}"))
    named = [n for n in topo.nics if is_value(n.device) and n.device != n.label]
    if named:
        console.print("NIC Legend: " + ", ".join(f"{n.label}: {n.device}" for n in named))
    console.print()

    rows = []
    for g in topo.gpus:
        if g.lost is not None:
            rows.append([str(g.nvml_index), "", Text(f"LOST: {g.lost.error}", style="bold red"),
                         table_bus_id(show(g.pci_bus_id)), "", "", "", "", ""])
            continue
        links = (f"{len(g.active_nvlinks())}/{len(g.nvlinks)}" if g.nvlinks
                 else "n/a" if topo.source == SMI_SOURCE else "-")  # the text has no per-link states
        rows.append([str(g.nvml_index), show(g.cuda_index), _short_name(g.name), table_bus_id(show(g.pci_bus_id)),
                     show(g.numa_node), show(g.cpu_affinity), _pcie_text(g.pcie), links, show(g.mig_mode)])
    gt, left_out = fitted_table(GPU_COLUMNS, rows, console.width, edges=False, title="GPUs", title_justify="left")
    console.print(gt)
    if left_out:
        console.print(Text(left_out_note(left_out), style="dim"))
    console.print(fabric_line(topo))
    console.print()
    if any(isinstance(g.health, GpuHealth) for g in topo.gpus):
        _print_health_table(console, topo)
    else:
        why = {str(getattr(g.health, "reason", None) or getattr(g.health, "error", "not read")) for g in topo.gpus}
        console.print(f"GPU health: n/a ({'; '.join(sorted(why))}; source {topo.source})")

    h = topo.host
    acs = (f"{sum(b.redirects for b in h.acs)} of {len(h.acs)} GPU bridges redirect"
           if isinstance(h.acs, list) else f"unknown ({getattr(h.acs, 'reason', h.acs)})")
    iommu = h.iommu_mode if isinstance(h.iommu_mode, str) else f"unknown ({getattr(h.iommu_mode, 'reason', '')})"
    console.print(f"\nhost {show(h.hostname)}  kernel {show(h.kernel)}  driver {show(h.driver_version)}  "
                  f"CUDA {show(h.cuda_driver_version)}  NVML {show(h.nvml_version)}")
    console.print(f"IOMMU: {iommu}   ACS: {acs}")
    console.print(kernel_log_line(topo))
    for note in scan_kernel_log_notes(topo):  # crash dump, non-fatal SXid, lines no rule judges
        console.print(note)
    console.print()
    _print_network(console, topo)
    render_problems(console, problems)


def _print_network(console, topo: Topology) -> None:
    """Each GPU's nearest RDMA NIC and NCCL's GDR distance rule on it, the kernel side of
    GPUDirect RDMA, and one row per NIC port (report/network_checks.py)."""
    from gputopo.report.network_checks import gdr_line, gpu_network_paths, no_nic_line, port_cells

    if not topo.nics:
        console.print(no_nic_line(topo) + "\n")
        return
    rows = [[str(p.gpu), ", ".join(p.devices), str(p.link_class), show(p.nccl_path),
             "yes" if p.gdr_by_distance is True else "no" if p.gdr_by_distance is False else "n/a"]
            for p in gpu_network_paths(topo)]
    cols = (Column("NVML", keep=True), Column("nearest NIC", keep=True), Column("class", keep=True),
            Column("NCCL path", drop=1), Column("GDR by distance", keep=True))
    t, left_out = fitted_table(cols, rows, console.width, edges=False, title="Network path of each GPU",
                               title_justify="left")
    console.print(t)
    if left_out:
        console.print(left_out_note(left_out))
    console.print(gdr_line(topo))
    ports = [port_cells(n, p) for n in topo.nics for p in n.ports]
    if ports:
        pcols = (Column("port", keep=True), Column("state", keep=True), Column("physical", keep=True),
                 Column("rate", keep=True), Column("link layer", drop=2), Column("adapter", drop=3),
                 Column("PCIe now (max)", keep=True), Column("error counters", drop=1))
        pt, left_out = fitted_table(pcols, ports, console.width, edges=False, title="RDMA NIC ports",
                                    title_justify="left")
        console.print(pt)
        if left_out:
            console.print(left_out_note(left_out))
    else:
        console.print(f"RDMA NIC ports: n/a (not in this source: {topo.source})")
    console.print()


def fabric_line(topo: Topology) -> str:
    """'NVLink fabric: GPU 0-7 completed, success, clique 0', GPUs in the same state together;
    n/a with NVML's reason where a GPU is in no fabric (or it could not be read)."""
    groups: dict = {}
    for g in topo.gpus:
        f = g.fabric
        if g.lost is not None:
            continue
        if isinstance(f, GpuFabric):
            text = f.text()
        else:
            why = getattr(f, "reason", None) or getattr(f, "error", None) or "not read"
            text = f"{show(f)} ({str(why).removeprefix('GPU fabric: ')})"
        groups.setdefault(text, []).append(g.nvml_index)
    if not groups:
        return "NVLink fabric: n/a (no GPU read)"
    if len(groups) == 1:
        ((text, gpus),) = groups.items()
        return f"NVLink fabric: {text}" if len(gpus) == len(topo.gpus) else \
            f"NVLink fabric: GPU {gpu_ranges(gpus)} {text}"
    return "NVLink fabric: " + "; ".join(f"GPU {gpu_ranges(gpus)} {text}" for text, gpus in groups.items())


def render_problems(console, problems: List[Finding]) -> None:
    from rich.text import Text

    if not problems:
        console.print(Text("No problems visible to the scan.", style="green"))
        return
    console.print(Text(f"Problems ({len(problems)}):", style="bold"))
    from .outputs.wrap import hanging

    for f in problems:
        where = f"GPU {gpu_ranges(f.gpus)}" if f.gpus else "host"
        hanging(console, Text.assemble((f"  {f.severity.upper():7}", SEVERITY_STYLE[f.severity]),
                                       (f" {f.kind:16} ", "bold")), f"[{where}] {f.message}")


def _print_health_table(console, topo: Topology) -> None:
    """GPU health, one row per GPU: every figure with its unit, n/a where the GPU cannot say."""
    from rich.text import Text

    driver = gpu_driver_flags(topo)  # the kernel log's driver lines that name a GPU (RmInitAdapter failed, ...)
    rows = []
    for g in topo.gpus:
        cells = health_cells(g.health)
        verdict = cells[-1]
        if driver.get(g.nvml_index):
            verdict = ", ".join(([] if verdict == "ok" or verdict.startswith("n/a") else [verdict])
                                + driver[g.nvml_index])
        style = "green" if verdict == "ok" else "dim" if verdict.startswith("n/a") else "bold red"
        rows.append([str(g.nvml_index), *cells[:-1], Text(verdict, style=style)])
    t, left_out = fitted_table([HEALTH_FIT[h] for h in HEALTH_COLUMNS], rows, console.width, edges=False,
                               title="GPU health", title_justify="left")
    console.print(t)
    if left_out:
        console.print(Text(left_out_note(left_out), style="dim"))


def _link_text(gen, width) -> str:
    parts = ([f"Gen{gen}"] if is_value(gen) else []) + ([f"x{width}"] if is_value(width) else [])
    return " ".join(parts) or "n/a"


def _pcie_text(p) -> str:
    """'Gen4 x16 (Gen4 x16)'; one 'n/a' when nothing of the link is known."""
    now, most = _link_text(p.gen_current, p.width_current), _link_text(p.gen_max, p.width_max)
    return "n/a" if now == most == "n/a" else f"{now} ({most})"


def _short_name(name) -> str:
    return show(name).removeprefix("NVIDIA ")


#: Devices (GPUs + NICs) up to which the matrix is a coloured table. rich measures every cell
#: of a table: 1,024 GPUs (a million cells) took most of a minute; above this the matrix is
#: printed as plain aligned rows (the same cells, no colours) in a second or two.
MAX_DRAWN_MATRIX = 128


def _print_plain_matrix(console, topo: Topology) -> None:
    """The matrix as plain aligned text rows (a big machine): GPU and NIC rows and columns, then
    each GPU's CPU and NUMA affinity, as the table has them."""
    from rich.text import Text

    labels = [f"GPU{g.nvml_index}" for g in topo.gpus] + [n.label for n in topo.nics]
    rows = []
    for g in topo.gpus:
        cells = ["X" if g.nvml_index == h.nvml_index else _class_text(topo, g.nvml_index, h.nvml_index)
                 for h in topo.gpus]
        cells += [_show_class(n.gpu_classes.get(g.nvml_index)) for n in topo.nics]
        rows.append((f"GPU{g.nvml_index}", cells, [show(g.cpu_affinity), show(g.numa_node)]))
    for n in topo.nics:
        cells = [_show_class(n.gpu_classes.get(g.nvml_index)) for g in topo.gpus]
        cells += ["X" if m is n else _show_class(n.nic_classes.get(m.label)) for m in topo.nics]
        rows.append((n.label, cells, []))
    head_w = max(map(len, labels))
    cell_w = max(4, *map(len, labels)) + 1
    aff_w = max([len("CPU Affinity")] + [len(r[2][0]) for r in rows if r[2]])
    console.print(Text(f"{len(topo.gpus)} GPUs: the matrix below is plain text (no colours); "
                       "--format csv or --json give one entry per pair", style="dim"))
    lines = [" " * head_w + " " + "".join(x.center(cell_w) for x in labels)
             + f" {'CPU Affinity':<{aff_w}} NUMA Affinity"]
    for label, cells, tail in rows:
        line = label.ljust(head_w) + " " + "".join(c.center(cell_w) for c in cells)
        if tail:
            line += f" {tail[0]:<{aff_w}} {tail[1]}"
        lines.append(line.rstrip())
    for line in lines:
        console.print(Text(line), no_wrap=True, overflow="ignore", crop=False)


def _class_text(topo: Topology, a: int, b: int) -> str:
    try:
        return str(topo.link_class(a, b))
    except KeyError:
        return "?"


def _show_class(lc) -> str:
    return "?" if lc is None else str(lc)


def _matrix_table(topo: Topology, width: int = 10_000):
    from rich.table import Table
    from rich.text import Text

    def cell(lc):
        return Text("?", style="bold red") if lc is None else Text(str(lc), style=CLASS_STYLE[lc.kind])

    def gpu_gpu(a, b):
        try:
            return topo.link_class(a, b)
        except KeyError:
            return None

    t = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    t.add_column("")
    for g in topo.gpus:
        t.add_column(f"GPU{g.nvml_index}", justify="center")
    for n in topo.nics:
        t.add_column(n.label, justify="center")
    with_gnuma = any(was_read(g.gpu_memory_numa_node) for g in topo.gpus)
    tail = [("CPU Affinity", [show(g.cpu_affinity) for g in topo.gpus]),
            ("NUMA Affinity", [show(g.numa_node) for g in topo.gpus])]
    if with_gnuma:
        tail.append(("GPU NUMA ID", [show(g.gpu_memory_numa_node) for g in topo.gpus]))
    # on a narrow terminal the headers wrap at their spaces ("CPU / Affinity"), never cut to "Affini…"
    full = sum(max(len(header), *map(len, texts)) + 2 for header, texts in tail)
    compact = full + 6 * (len(topo.gpus) + len(topo.nics)) + 6 > width
    for header, texts in tail:
        head_w = max(map(len, header.split())) if compact else len(header)
        t.add_column(header, width=max(head_w, *map(len, texts)), overflow="fold")
    x = Text("X", style="dim")
    for g in topo.gpus:
        cells = [x if g.nvml_index == h.nvml_index else cell(gpu_gpu(g.nvml_index, h.nvml_index))
                 for h in topo.gpus]
        cells += [cell(n.gpu_classes.get(g.nvml_index)) for n in topo.nics]
        t.add_row(f"GPU{g.nvml_index}", *cells, show(g.cpu_affinity), show(g.numa_node),
                  *([show(g.gpu_memory_numa_node)] if with_gnuma else []))
    for n in topo.nics:
        cells = [cell(n.gpu_classes.get(g.nvml_index)) for g in topo.gpus]
        cells += [x if m is n else cell(n.nic_classes.get(m.label)) for m in topo.nics]
        t.add_row(n.label, *cells)
    return t
