"""Simulated clusters: a description's ``[cluster]`` table (docs/sim-format.md, "Clusters").

    [cluster]
    nodes = 1024
    node = "dgx-h100"          # any machine: a built-in name or a description path (relative
                               # to this file); without it, this file's own machine keys
    nics_per_node = 8          # default: the node's GPU count (each GPU uses its closest NIC)
    [cluster.link]             # the inter-node network, per NIC
    gbps = 45.0                # GB/s (1e9 bytes/s) each way
    latency_us = 5.0
    [[cluster.fault]]
    where = "node:37"          # or "nodes:3,9", or "pair:3,9" (the link between two nodes)
    what = "slow"              # slow (factor), hang, crash, link_down (nic), driver (version)
    factor = 0.3

Nodes are named ``node0000``, ``node0001``, ... (their index, zero-padded to four digits).
Errors raise :class:`gputopo.errors.InputFileError` naming the file and the key.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from gputopo.errors import InputFileError

from .description import Description, build_description, load_description, toml_loads

CLUSTER_FAULT_KINDS = ("slow", "hang", "crash", "link_down", "driver")
MAX_NODES = 100_000
_CLUSTER_KEYS = {"nodes", "node", "nics_per_node", "link", "fault", "name"}
_LINK_KEYS = {"gbps", "latency_us"}
_FAULT_KEYS = {"where", "what", "factor", "nic", "version", "description"}
_WHERE_RE = re.compile(r"^(node|nodes|pair):\s*(\d+(\s*,\s*\d+)*)\s*$")


@dataclass
class NodeFault:
    where: str
    what: str
    nodes: Tuple[int, ...]  # the nodes hit; for "pair:" the two ends of the link
    link: bool = False  # "pair:": the link between the nodes, not the nodes themselves
    factor: Optional[float] = None
    nic: Optional[int] = None
    version: Optional[str] = None
    description: str = ""


@dataclass
class ClusterDescription:
    name: str
    path: str
    nodes: int
    node: Description  # the machine every node is
    nics_per_node: int
    link_gbps: float = 45.0
    link_latency_us: float = 5.0
    faults: List[NodeFault] = field(default_factory=list)

    def node_name(self, k: int) -> str:
        return f"node{k:04d}"

    def node_faults(self, k: int) -> List[NodeFault]:
        return [f for f in self.faults if not f.link and k in f.nodes]

    def link_faults(self, a: int, b: int) -> List[NodeFault]:
        return [f for f in self.faults if f.link and a in f.nodes and b in f.nodes]


def is_cluster_file(path: str) -> bool:
    """Whether the file at ``path`` declares a ``[cluster]`` table (cheap: text search)."""
    from gputopo.errors import InputFileError
    from gputopo.inputs import MAX_DESCRIPTION_BYTES, read_user_text

    try:
        text = read_user_text(path, "description", MAX_DESCRIPTION_BYTES)
    except InputFileError:
        return False  # not readable: the description loader says why, in one line
    return any(line.strip().startswith("[cluster") for line in text.splitlines())


def load_cluster(path: str) -> ClusterDescription:
    from gputopo.inputs import MAX_DESCRIPTION_BYTES, read_user_text

    return parse_cluster(read_user_text(path, "cluster description", MAX_DESCRIPTION_BYTES), path)


def parse_cluster(text: str, path: str = "<text>") -> ClusterDescription:
    data = toml_loads(text, path)
    raw = data.get("cluster")
    if not isinstance(raw, dict):
        raise InputFileError(path, "no [cluster] table: this is a machine description; "
                             "use it with `gputopo bench --sim`, or add [cluster] nodes = N", key="cluster")
    _only(path, raw, _CLUSTER_KEYS, "cluster")
    _refuse_node_faults_outside_cluster(path, data)
    nodes = _int(path, raw.get("nodes"), "cluster.nodes", 2, MAX_NODES)
    node = _node_machine(path, raw, data, text)
    link = raw.get("link", {})
    if not isinstance(link, dict):
        raise InputFileError(path, "must be a table", key="cluster.link")
    _only(path, link, _LINK_KEYS, "cluster.link")
    nics = _int(path, raw.get("nics_per_node", node.gpu_count), "cluster.nics_per_node", 1, 64)
    faults_raw = raw.get("fault", [])
    if not isinstance(faults_raw, list):
        raise InputFileError(path, "write faults as [[cluster.fault]] tables", key="cluster.fault")
    faults = [_fault(path, f, k, nodes, nics) for k, f in enumerate(faults_raw)]
    stem = os.path.splitext(os.path.basename(path))[0] if not path.startswith("<") else "cluster"
    name = raw.get("name", data.get("name", stem))
    return ClusterDescription(
        name=str(name), path=path, nodes=nodes, node=node, nics_per_node=nics,
        link_gbps=_num(path, link.get("gbps", 45.0), "cluster.link.gbps"),
        link_latency_us=_num(path, link.get("latency_us", 5.0), "cluster.link.latency_us", zero=True),
        faults=faults)


def _refuse_node_faults_outside_cluster(path: str, data: Dict[str, Any]) -> None:
    """A top-level ``[[fault]]`` is a fault of the node machine (where = "gpu:2", ...): one
    naming nodes would be silently ignored there, so it is refused, pointing at its place."""
    faults = data.get("fault")
    for k, f in enumerate(faults if isinstance(faults, list) else []):
        where = f.get("where") if isinstance(f, dict) else None
        if isinstance(where, str) and _WHERE_RE.match(where):
            raise InputFileError(path, f"where = {where!r} names cluster nodes: node faults belong "
                                 "in [[cluster.fault]] tables ([[fault]] is a fault inside each "
                                 "node's machine)", key=f"fault[{k}].where")


def _node_machine(path: str, raw: Dict[str, Any], data: Dict[str, Any], text: str) -> Description:
    if "node" in raw:
        ref = raw["node"]
        if not isinstance(ref, str):
            raise InputFileError(path, f"expected a machine name or path, got {ref!r}", key="cluster.node")
        local = os.path.join(os.path.dirname(os.path.abspath(path)), ref)
        if not path.startswith("<") and (ref.endswith(".toml") or os.sep in ref) and os.path.exists(local):
            ref = local
        return load_description(ref)
    machine = {k: v for k, v in data.items() if k != "cluster"}
    if "gpu" not in machine and "matrix" not in machine and "gpu_count" not in machine:
        raise InputFileError(path, "say which machine each node is: node = \"dgx-h100\" (a built-in "
                             "name or a description path), or describe it in this file", key="cluster.node")
    stem = os.path.splitext(os.path.basename(path))[0] if not path.startswith("<") else "node"
    return build_description(machine, path, text=text, default_name=stem)


def _fault(path: str, f: Any, k: int, nodes: int, nics: int) -> NodeFault:
    key = f"cluster.fault[{k}]"
    if not isinstance(f, dict):
        raise InputFileError(path, "must be a table", key=key)
    _only(path, f, _FAULT_KEYS, key)
    where = f.get("where")
    m = _WHERE_RE.match(where) if isinstance(where, str) else None
    if not m:
        raise InputFileError(path, f"expected \"node:N\", \"nodes:N,M,...\" or \"pair:N,M\", got {where!r}",
                             key=f"{key}.where")
    kind, ids = m.group(1), tuple(int(x) for x in m.group(2).split(","))
    for n in ids:
        if n >= nodes:
            raise InputFileError(path, f"node {n} does not exist (the cluster has nodes 0..{nodes - 1})",
                                 key=f"{key}.where")
    if kind == "node" and len(ids) != 1:
        raise InputFileError(path, "node: names one node (use nodes:N,M for several)", key=f"{key}.where")
    if kind == "pair" and (len(ids) != 2 or ids[0] == ids[1]):
        raise InputFileError(path, "pair: names two different nodes", key=f"{key}.where")
    what = f.get("what")
    if what not in CLUSTER_FAULT_KINDS:
        raise InputFileError(path, f"expected one of {', '.join(CLUSTER_FAULT_KINDS)}, got {what!r}",
                             key=f"{key}.what")
    if kind == "pair" and what != "slow":
        raise InputFileError(path, "a pair (link) fault can only be slow", key=f"{key}.what")
    factor = None
    if what == "slow":
        factor = _num(path, f.get("factor", 0.5), f"{key}.factor")
        if factor >= 1:
            raise InputFileError(path, f"the fraction of throughput left must be < 1, got {factor}",
                                 key=f"{key}.factor")
    nic = _int(path, f.get("nic", 0), f"{key}.nic", 0, nics - 1) if what == "link_down" else None
    version = None
    if what == "driver":
        version = f.get("version")
        if not isinstance(version, str) or not version:
            raise InputFileError(path, "a driver fault needs version = \"X.Y.Z\"", key=f"{key}.version")
    return NodeFault(where=m.group(0), what=what, nodes=ids, link=kind == "pair", factor=factor, nic=nic,
                     version=version, description=str(f.get("description", "")))


def _only(path, table, allowed, key):
    for k in table:
        if k not in allowed:
            raise InputFileError(path, f"unknown key {k!r}; allowed: {', '.join(sorted(allowed))}",
                                 key=f"{key}.{k}")


def _int(path, v, key, lo, hi) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise InputFileError(path, f"expected an integer in {lo}..{hi}, got {v!r}", key=key)
    return v


def _num(path, v, key, zero=False) -> float:
    if (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0
            or (v == 0 and not zero)):
        raise InputFileError(path, f"expected a {'non-negative' if zero else 'positive'} number, got {v!r}",
                             key=key)
    return float(v)
