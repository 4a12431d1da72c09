"""A cluster run folder rendered: from its ``cluster.json`` (nodes, rounds, the inter-node
figures; written and read by gputopo.runfolder.cluster) the report's per-node sections and a
node-by-node busbw heatmap (a table in report.md for small clusters, ``heatmap_nodes.png`` when
matplotlib is installed).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from gputopo.model import Finding
from gputopo.runfolder.cluster import read_cluster_doc
from gputopo.runfolder.layout import CLUSTER_JSON

HEATMAP_NODES_PNG = "heatmap_nodes.png"
#: Largest cluster whose node matrix is written as a Markdown table (wider tables are unreadable).
MD_MATRIX_MAX = 16
#: Largest cluster drawn as a PNG heatmap.
PNG_MATRIX_MAX = 512


def inter_groups(doc: Dict[str, Any]) -> List[Dict[str, Any]]:
    return [g for r in doc.get("rounds", []) if r.get("phase") == "inter" for g in r.get("groups", [])]


def one_gpu_median(doc: Dict[str, Any]) -> Optional[float]:
    """Median busbw (GB/s) of the inter-node groups measured with one GPU per node."""
    import statistics

    vals = [g["one_gpu_busbw_gbps"] for g in inter_groups(doc) if g.get("one_gpu_busbw_gbps")]
    return statistics.median(vals) if vals else None


def one_gpu_missing(doc: Dict[str, Any]) -> str:
    """``; not measured in K inter-node group(s) (nodes ...: why)``, the first group's reason
    (the all-GPU figures of those groups stand), or ""."""
    missing = [g for g in inter_groups(doc) if g.get("one_gpu_na")]
    if not missing:
        return ""
    names = [n.get("name", str(k)) for k, n in enumerate(doc.get("nodes") or [])]
    nodes = ", ".join(names[k] if isinstance(k, int) and k < len(names) else str(k) for k in missing[0]["nodes"])
    return (f"; not measured in {len(missing)} inter-node group(s) (nodes {nodes}: "
            f"{missing[0]['one_gpu_na']}; their all-GPU figures stand)")


def node_matrix(doc: Dict[str, Any]) -> Dict[Tuple[int, int], float]:
    """(a, b) -> lowest busbw (GB/s) measured with nodes a and b in one group (a < b)."""
    m: Dict[Tuple[int, int], float] = {}
    for g in inter_groups(doc):
        if g.get("busbw_gbps") is None:
            continue
        nodes = sorted(g["nodes"])
        for i, a in enumerate(nodes):
            for b in nodes[i + 1:]:
                m[(a, b)] = min(m.get((a, b), g["busbw_gbps"]), g["busbw_gbps"])
    return m


def gbps_text(v) -> str:
    """A busbw figure: one decimal from 10 GB/s, three significant digits below (CPU runs)."""
    if not isinstance(v, (int, float)):
        return "n/a"
    return f"{v:.1f}" if v >= 10 else f"{v:.3g}"


_fmt = gbps_text


def cluster_markdown(doc: Dict[str, Any], findings: List[Finding]) -> str:
    names = [n["name"] for n in doc["nodes"]]
    sim = "SIMULATED " if doc.get("simulated") else ""
    unit = doc.get("time_source", "wall")
    lines = [f"# gputopo cluster report: {sim}{len(names)} nodes", "",
             f"- pattern: `{doc.get('pattern')}`; inter-node rounds: **{doc.get('rounds_inter')}**"
             f"; fabric: `{doc.get('fabric')}`; message size: {doc.get('size_bytes')} bytes",
             f"- time: {doc.get('time_s', 0):.2f} s ({unit})",
             f"- reference inter-node busbw (median of the first pass): {_fmt(doc.get('reference_gbps'))} GB/s"
             f"; a group below {doc.get('slow_below')} x that is slow",
             f"- the same all_reduce between one GPU of each node: median "
             f"{gbps_text(one_gpu_median(doc))} GB/s{one_gpu_missing(doc)}", ""]
    if doc.get("lost"):
        stopped = sum(1 for r in doc["lost"] if isinstance(r, dict) and r.get("state") == "stopped")
        how = (f"{len(doc['lost'])} rank(s) lost" if not stopped else f"{stopped} rank(s) stopped by a signal"
               if stopped == len(doc["lost"]) else f"{len(doc['lost'])} rank(s) lost or stopped by a signal")
        lines += [f"**The run stopped: {how} during {doc.get('lost_phase')}.**", ""]
    lines += ["## Findings", ""]
    lines += [f"- **{f.kind}** ({f.severity}): {f.message}" for f in findings] or ["- none"]
    lines += ["", "## Nodes", "", "| node | ranks | GPUs | intra-node busbw (GB/s) | inter-node busbw (GB/s, lowest) | driver | differs |",
              "|---|---|---|---|---|---|---|"]
    lowest: Dict[int, float] = {}
    for (a, b), v in node_matrix(doc).items():
        for n in (a, b):
            lowest[n] = min(lowest.get(n, v), v)
    shown = doc["nodes"] if len(names) <= 64 else [n for k, n in enumerate(doc["nodes"])
                                                   if _flagged(n["name"], findings)]
    for n in shown:
        k = names.index(n["name"])
        fp = n.get("fingerprint") or {}
        diff = ", ".join(sorted(((_node_finding(n["name"], findings, "topology-mismatch") or {})
                                 .get("differs") or {}).keys())) or "-"
        ranks = n.get("ranks") or []
        rtext = f"{ranks[0]}-{ranks[-1]}" if len(ranks) > 1 else ",".join(map(str, ranks))
        lines.append(f"| {n['name']} | {rtext} | {fp.get('gpu_count', 'n/a')} | "
                     f"{_fmt((n.get('intra') or {}).get('busbw_gbps'))} | {_fmt(lowest.get(k))} | "
                     f"{fp.get('driver', 'n/a')} | {diff} |")
    if len(shown) < len(names):
        lines.append(f"\n({len(names) - len(shown)} nodes without findings not listed; all are in {CLUSTER_JSON})")
    lines += _node_sections(doc, findings)
    lines += ["", "## Node-by-node inter-node busbw (GB/s)", ""]
    lines += _matrix_table(doc, names)
    return "\n".join(lines) + "\n"


def rewrite_cluster_markdown(run_dir, findings: List[Finding]) -> bool:
    """When ``run_dir`` is a cluster run, (re)write its report.md as the cluster report."""
    doc = read_cluster_doc(run_dir)
    if doc is None:
        return False
    (Path(run_dir) / "report.md").write_text(cluster_markdown(doc, findings), encoding="utf-8")
    return True


def _node_sections(doc: Dict[str, Any], findings: List[Finding]) -> List[str]:
    """A section per node some finding names: its findings, ranks and fingerprint."""
    out: List[str] = []
    for n in doc["nodes"]:
        mine = [f for f in findings if _flagged(n["name"], [f])]
        if not mine:
            continue
        fp = n.get("fingerprint") or {}
        out += ["", f"### {n['name']}", "", f"- ranks: {', '.join(map(str, n.get('ranks') or []))}"]
        out += [f"- **{f.kind}**: {f.message}" for f in mine]
        facts = ", ".join(f"{k} {v}" for k, v in fp.items() if k != "matrix")
        if facts:
            out.append(f"- fingerprint: {facts}")
    return (["", "## Nodes with findings"] + out) if out else []


def _flagged(name: str, findings: List[Finding]) -> bool:
    return any((f.evidence or {}).get("node") == name or name in ((f.evidence or {}).get("nodes") or [])
               for f in findings)


def _node_finding(name, findings, kind) -> Optional[Dict[str, Any]]:
    f = next((f for f in findings if f.kind == kind and (f.evidence or {}).get("node") == name), None)
    return f.evidence if f else None


def _matrix_table(doc, names) -> List[str]:
    m = node_matrix(doc)
    if len(names) > MD_MATRIX_MAX:
        return [f"({len(names)} nodes: see {HEATMAP_NODES_PNG}; {len(m)} node pairs measured)"]
    out = ["| | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for a, na in enumerate(names):
        row = []
        for b in range(len(names)):
            v = m.get((min(a, b), max(a, b))) if a != b else None
            row.append("-" if a == b else _fmt(v) if v is not None else "")
        out.append(f"| {na} | " + " | ".join(row) + " |")
    return out


def write_node_heatmap(doc: Dict[str, Any], run_dir) -> Optional[Path]:
    """``heatmap_nodes.png``: busbw per node pair (blank where two nodes never met). Drawn into
    memory, then written as every output file is (writable.write_file_bytes): a FIFO there
    without a reader, a stalled reader, /dev/full or an unwritable place is one UsageError
    line, never a savefig that waits forever or a traceback."""
    n = len(doc["nodes"])
    if n > PNG_MATRIX_MAX:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import numpy as np
    except ImportError:
        return None
    grid = np.full((n, n), np.nan)
    for (a, b), v in node_matrix(doc).items():
        grid[a, b] = grid[b, a] = v
    fig, ax = plt.subplots(figsize=(min(12, 3 + n * 0.4), min(10, 2.5 + n * 0.35)))
    im = ax.imshow(grid, cmap="viridis")
    fig.colorbar(im, ax=ax, label="inter-node all_reduce busbw (GB/s)")
    if n <= 32:
        names = [x["name"] for x in doc["nodes"]]
        ax.set_xticks(range(n), names, rotation=90, fontsize=7)
        ax.set_yticks(range(n), names, fontsize=7)
    sim = "SIMULATED, modeled time" if doc.get("simulated") else f"time: {doc.get('time_source')}"
    ax.set_title(f"node-by-node busbw, pattern {doc.get('pattern')} ({sim})", fontsize=9)
    path = Path(run_dir) / HEATMAP_NODES_PNG
    try:
        fig.tight_layout()
        image = io.BytesIO()
        fig.savefig(image, format="png", dpi=90)
    finally:
        plt.close(fig)
    from gputopo.writable import write_file_bytes

    write_file_bytes(path, image.getvalue(), "cluster report")
    return path
