"""``no-peer-access``: GPU pairs an imported output shows without peer access, said as a finding.

Two outputs carry the fact:

- p2pBandwidthLatencyTest prints ``Device=i CANNOT Access Peer Device=j`` and a 0 in its "P2P
  Connectivity Matrix"; its "P2P=Enabled" figures of such a pair are then copies the driver
  stages through host memory (importers/p2pbw_import.py records them as ``p2p.staged_no_peer``;
  a run folder imported before that has them as ``p2p.copy`` with ``extra.peer_access`` false,
  and is read the same way here);
- nvbandwidth waives its peer testcases (``Waiving X.`` / ``Waived:`` / ``"status": "Waived"``)
  exactly when no GPU pair of the machine can access a peer (``filterHasAccessiblePeerPairs()``),
  or when it sees one GPU: on 2+ GPUs every pair has no peer access; on one GPU it says nothing.

How bad it is depends on what promised peer-to-peer (:func:`judge_pair`): an NVLink pair, an SXM
module (NVLink on its baseboard) or a pair on one PCIe switch (PIX, PXB) should have it: warning;
GeForce cards (a name with "GeForce": RTX 4090, 4080, 5090, 3090 ...) have none between them
over PCIe by NVIDIA's design: info; any other class, or nothing known of class and model (the
output alone, no ``--topo``): info, saying what was not known. Either way the finding says what
it means for DataParallel and NCCL. Facts that contradict each other (a waived peer testcase next
to measured ones in one output) are said as a note, never as a peer-access finding.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import combinations
from typing import Any, Dict, List, Optional, Tuple

from gputopo.model import Finding, Topology, is_value
from gputopo.model.finding import gpu_ranges
from gputopo.model.peer_access import (PEER_FILTERED_TESTCASES, UNNAMED_WAIVER, board_wired,
                                       peer_to_peer_off_by_design)

from gputopo.model.topology import class_of
from .import_numbering import numbering_of
from .run_folder import Run

P2PBW = "p2pBandwidthLatencyTest"
#: What a pair without peer access means for the two ways PyTorch moves data between GPUs.
MEANING = ("NCCL moves data between these GPUs through host memory (its SHM transport, or NET where "
           "SHM is off) and nn.DataParallel's scatter/gather copies are staged through host memory by "
           "the driver: slower than peer-to-peer, but correct")
REMEDY_TOPO = "import again with --topo (saved `nvidia-smi topo -m`, or `gputopo scan --json`) to judge it against the link"
REMEDY_CHECK_P2P = ("check `nvidia-smi topo -p2p r` and the BIOS (ACS, IOMMU, 'P2P' / 'Above 4G' settings) "
                    "and, on NVSwitch systems, that nvidia-fabricmanager runs")


def judge_pair(topo: Optional[Topology], pair: Tuple[int, int],
               names: Dict[int, str]) -> Tuple[str, str, Optional[str]]:
    """(severity, why, link class) of a pair without peer access."""
    lc = class_of(topo, pair)
    cls = str(lc) if lc is not None else None
    both = [names.get(g) for g in pair]
    if lc is not None and lc.is_nvlink:
        return "warning", f"the GPUs are joined by NVLink ({cls}), which carries peer-to-peer: it should be there", cls
    if all(peer_to_peer_off_by_design(n) for n in both):
        return "info", (f"{both[0]}: NVIDIA gives GeForce cards no peer-to-peer over PCIe, by design "
                        "(not a fault)"), cls
    if lc is not None and lc.kind in ("PIX", "PXB"):
        return "warning", f"the GPUs share a PCIe switch ({cls}), where peer-to-peer is normally allowed", cls
    if all(board_wired(n) for n in both):
        return "warning", f"{both[0]} modules are joined by NVLink on their baseboard: it should be there", cls
    if lc is not None:
        return "info", f"their link ({cls}) does not promise peer-to-peer (it depends on the platform)", cls
    known = [n for n in both if n]
    what = (f"the link class is not known (no --topo) and {known[0]} is not a model without peer-to-peer by design"
            if known else "neither the GPU model nor the link class is known (the output names no GPU "
                          "model and no --topo was given)")
    return "info", what + ", so whether peer access was expected is not judged", cls


def _names(run: Run, doc: Dict[str, Any]) -> Dict[int, str]:
    """GPU models by index: the topology's, else the output's own device lines."""
    out: Dict[int, str] = {}
    for d in doc.get("devices") or []:
        if isinstance(d, dict) and isinstance(d.get("index"), int) and d.get("name"):
            out[d["index"]] = str(d["name"])
    if run.topology is not None:
        for g in run.topology.gpus:
            if is_value(g.name) and g.name:
                out[g.nvml_index] = str(g.name)
    return out


def _p2pbw_access(run: Run) -> Tuple[Dict[Tuple[int, int], bool], List[str]]:
    """{pair: has peer access} from the imported p2pBandwidthLatencyTest measurements (a pair
    without it in either direction has none), and the series its P2P=Enabled figures are under."""
    access: Dict[Tuple[int, int], bool] = {}
    series: List[str] = []
    for m in run.measurements:
        ok = m.extra.get("peer_access")
        if m.extra.get("source") != P2PBW or len(m.gpus) != 2 or not isinstance(ok, bool):
            continue
        pair = (min(m.gpus), max(m.gpus))
        access[pair] = access.get(pair, True) and ok
        enabled = "p2p-enabled" in str(m.extra.get("matrix", ""))
        if not ok and enabled and m.test not in series:
            series.append(m.test)
    return access, series


def _doc_access(doc: Dict[str, Any]) -> Dict[Tuple[int, int], bool]:
    """{pair: has peer access} as the output printed it: the CAN / CANNOT lines, else the
    connectivity matrix (for an output with no bandwidth matrix); its device numbers turned into
    the run's where the import renumbered them to --topo's."""
    access: Dict[Tuple[int, int], bool] = {}
    to_run = numbering_of(doc) or {}  # the output's CUDA numbers -> the run's (--topo's) GPU numbers
    for item in doc.get("peer_access") or []:
        if isinstance(item, list) and len(item) == 3 and item[0] != item[1]:
            a, b = (to_run.get(int(x), int(x)) for x in item[:2])
            pair = (min(a, b), max(a, b))
            access[pair] = access.get(pair, True) and bool(item[2])
    if access:
        return access
    for m in doc.get("matrices") or []:
        if isinstance(m, dict) and m.get("name") == "connectivity":
            cells = m.get("cells") or []
            for i, row in enumerate(cells):
                for j, v in enumerate(row):
                    if i != j:
                        a, b = to_run.get(i, i), to_run.get(j, j)
                        pair = (min(a, b), max(a, b))
                        access[pair] = access.get(pair, True) and bool(v)
    return access


def _findings(run: Run, doc: Dict[str, Any], pairs: List[Tuple[int, int]], fact: str, evidence: Dict[str, Any],
              staged_text: str) -> List[Finding]:
    names = _names(run, doc)
    groups: Dict[Tuple[str, str], List[Tuple[Tuple[int, int], Optional[str]]]] = defaultdict(list)
    for pair in pairs:
        severity, why, cls = judge_pair(run.topology, pair, names)
        groups[(severity, why)].append((pair, cls))
    out = []
    for (severity, why), items in groups.items():
        gpus = sorted({g for p, _ in items for g in p})
        every = len(items) == len(gpus) * (len(gpus) - 1) // 2
        where = (f"GPUs {gpu_ranges(gpus)}: no pair has peer access" if every and len(gpus) > 2 else
                 f"GPUs {gpus[0]},{gpus[1]}: no peer access" if len(items) == 1 else
                 "GPU pairs " + " ".join(f"{a},{b}" for (a, b), _ in items) + ": no peer access")
        classes = sorted({c for _, c in items if c})
        out.append(Finding(
            "no-peer-access", severity,
            f"{where} ({fact}){staged_text}; {why}. {MEANING[0].upper() + MEANING[1:]}",
            gpus=gpus, link_class=classes[0] if len(classes) == 1 else None,
            evidence={**evidence, "pairs": [list(p) for p, _ in items], "by_design": severity == "info" and "by design" in why,
                      "link_classes": classes, "gpu_names": sorted({names[g] for g in gpus if g in names}),
                      "meaning": MEANING},
            cause=None if severity == "info" else "peer-to-peer disabled by the platform (BIOS, ACS, IOMMU), the "
                                                  "driver, or an NVLink/fabric fault",
            remedies=[] if severity == "info" and "by design" in why else
            [REMEDY_CHECK_P2P] if severity == "warning" else [REMEDY_TOPO]))
    return out


def _p2pbw_findings(run: Run, doc: Dict[str, Any]) -> List[Finding]:
    access, series = _p2pbw_access(run)
    if not access:
        access = _doc_access(doc)
    pairs = sorted(p for p, ok in access.items() if not ok)
    if not pairs:
        return []
    shown = (f"recorded as {series[0]}" + (f" and {len(series) - 1} more series" if len(series) > 1 else "")
             if series else "none imported")
    staged = (f"; its \"P2P=Enabled\" figures of {'these pairs' if len(pairs) > 1 else 'this pair'} are copies "
              f"staged through host memory, not peer-to-peer ({shown})")
    return _findings(run, doc, pairs, f"{P2PBW}: 'CANNOT Access Peer' / 0 in its P2P Connectivity Matrix",
                     {"tool": P2PBW, "file": doc.get("path") or doc.get("file"), "series": series,
                      "pairs_with_access": sum(1 for ok in access.values() if ok)}, staged)


def nvbandwidth_waivers(doc: Dict[str, Any]) -> List[str]:
    """The waived testcases of an nvbandwidth import that mean "no pair has peer access" (or one
    GPU); a folder imported before the fact was recorded is read from its ``waived`` list."""
    if "waived_no_peer_access" in doc:
        return [str(t) for t in doc.get("waived_no_peer_access") or []]
    waived = [str(t) for t in doc.get("waived") or []]
    multinode = any(t.startswith("multinode_") for t in waived + list(doc.get("testcases_run") or []))
    return [t for t in waived if t in PEER_FILTERED_TESTCASES
            or (not multinode and t.startswith("(a testcase"))]


def _measured_peer_testcases(doc: Dict[str, Any]) -> List[str]:
    if "peer_testcases_measured" in doc:
        return [str(t) for t in doc.get("peer_testcases_measured") or []]
    out: List[str] = []
    for m in doc.get("matrices") or []:
        tc = m.get("testcase") if isinstance(m, dict) else None
        if tc in PEER_FILTERED_TESTCASES and tc not in out and any(
                v is not None for r in m.get("cells") or [] for v in r):
            out.append(tc)
    return out


def _gpu_count(run: Run, doc: Dict[str, Any]) -> int:
    n = len(doc.get("devices") or [])
    if not n and run.topology is not None:
        n = len(run.topology.gpus)
    return n


def _nvbandwidth_findings(run: Run, doc: Dict[str, Any]) -> List[Finding]:
    waived = nvbandwidth_waivers(doc)
    if not waived or _measured_peer_testcases(doc):
        return []
    n = _gpu_count(run, doc)
    named = [t for t in waived if t != UNNAMED_WAIVER and not t.startswith("(a testcase")]
    what = (f"nvbandwidth waived {', '.join(named)}" if named else
            f"nvbandwidth waived {len(waived)} testcase(s) (its text form does not name them)")
    what += ", which it waives only when no GPU pair can access a peer"
    evidence = {"tool": "nvbandwidth", "file": doc.get("path") or doc.get("file"), "waived": waived, "gpus_seen": n}
    staged = "; no peer-to-peer copy was measured"
    if n == 1:
        return []  # one GPU: the waiver says nothing about peer access
    if n == 0:
        return [Finding(
            "no-peer-access", "info",
            f"{what} or when it sees one GPU; the output lists no GPU, so which of the two is not known. "
            f"If the machine has several GPUs, no pair has peer access: {MEANING}",
            evidence={**evidence, "pairs": None, "meaning": MEANING},
            remedies=["import the whole output (with its device list) to tell one GPU from no peer access"])]
    pairs = list(combinations(range(n), 2))
    if run.topology is not None and len(run.topology.gpus) == n:
        idx = sorted(g.nvml_index for g in run.topology.gpus)
        pairs = list(combinations(idx, 2))
    return _findings(run, doc, pairs, what, evidence, staged)


def no_peer_access_findings(run: Run) -> List[Finding]:
    out: List[Finding] = []
    for doc in run.imported:
        if doc.get("tool") == P2PBW:
            out += _p2pbw_findings(run, doc)
        elif doc.get("tool") == "nvbandwidth":
            out += _nvbandwidth_findings(run, doc)
    return out


def peer_access_notes(run: Run) -> List[str]:
    """Facts about peer access that contradict each other within one output: said, not judged."""
    notes = []
    for doc in run.imported:
        if doc.get("tool") != "nvbandwidth":
            continue
        waived, measured = nvbandwidth_waivers(doc), _measured_peer_testcases(doc)
        if waived and measured:
            notes.append(f"nvbandwidth output {doc.get('file', '?')}: {', '.join(waived)} waived, which nvbandwidth "
                         f"does only when no GPU pair can access a peer, yet {', '.join(measured)} measured peer "
                         "copies in the same output: it is not the output of one run (or it was edited), so the "
                         "waiver is not read as a fact about peer access")
    return notes
