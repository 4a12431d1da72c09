"""The acceptance spec: what this machine must be, as a TOML file, loaded and validated.

Every key is checked; an unknown or malformed one is refused with InputFileError naming the
file and the key (`gputopo check` then exits 2), so a typo never silently disables a rule. The
shipped examples in ``gputopo/check/specs/`` document every key.

Link class selectors (in ``[bandwidth.X]`` and ``[busbw.op]``): a class as nvidia-smi prints it
(``NV4``, ``NV18``, ``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``), ``NV`` (any NVLink class),
``PCIe`` (any PCIe class) or ``*`` (every pair, including pairs of unknown class).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, NoReturn, Optional, Tuple

from gputopo.errors import InputFileError
from gputopo.model import LinkClass
from gputopo.model.collectives import COLLECTIVES, PREFIX
from gputopo.model.finding import KINDS
from gputopo.model.topology import NVLINK_ERROR_COUNTERS

SPEC_SCHEMA_VERSION = 1
INTEGRITY_KEYS = ("no_corruption", "no_nan", "no_divergence", "no_hang", "no_crash")
#: Collectives a busbw minimum may name: every one of the collective table (model/collectives.py;
#: nccl-tests' names, "collective." prefix optional).
BUSBW_OPS = tuple(c.name for c in COLLECTIVES)
ANY_NVLINK, ANY_PCIE, ANY = "NV", "PCIe", "*"

_ALLOWED = {
    "": {"schema_version", "name", "description", "strict", "topology", "nvlink", "pcie",
         "bandwidth", "busbw", "integrity", "findings", "cluster", "history"},
    "topology": {"gpu_count", "matrix", "pairs", "all_pairs"},
    "nvlink": {"min_links_up", "links_up", "max_errors"},
    "pcie": {"min_gen", "min_width", "full_width", "max_replay"},
    "integrity": set(INTEGRITY_KEYS),
    "findings": {"fail_on"},
    "cluster": {"min_inter_node_busbw_gbps", "nodes_alike", "no_slow_node"},
    "history": {"baseline_fraction", "runs"},
}
_BANDWIDTH_KEYS = {"min_gbps", "min_efficiency", "series"}
#: Upper bounds of what hardware has: PCIe generations (Gen6 is the newest with a known rate),
#: lanes of a PCIe link, NVLinks of one GPU (NVML_NVLINK_MAX_LINKS in nvidia-ml-py).
MAX_PCIE_GEN, MAX_PCIE_WIDTH, MAX_NVLINKS = 6, 32, 36
_PAIR_RE = re.compile(r"^\s*(\d+)\s*[,\-]\s*(\d+)\s*$")


@dataclass
class BandwidthRule:
    selector: str
    min_gbps: Optional[float] = None
    min_efficiency: Optional[float] = None
    series: Optional[str] = None


@dataclass
class Spec:
    path: str
    name: str = ""
    description: str = ""
    strict: bool = False
    gpu_count: Optional[int] = None
    expected_classes: Dict[Tuple[int, int], str] = field(default_factory=dict)
    all_pairs: Optional[str] = None
    nvlink_min_links_up: Optional[int] = None
    nvlink_links_up: Dict[int, int] = field(default_factory=dict)
    nvlink_max_errors: Dict[str, int] = field(default_factory=dict)
    pcie_min_gen: Optional[int] = None
    pcie_min_width: Optional[int] = None
    pcie_full_width: bool = False
    pcie_max_replay: Optional[int] = None
    bandwidth: List[BandwidthRule] = field(default_factory=list)
    busbw: Dict[str, Dict[str, float]] = field(default_factory=dict)  # op -> selector -> GB/s
    integrity: Dict[str, bool] = field(default_factory=dict)
    fail_on: List[str] = field(default_factory=list)
    #: [cluster]: judged on a `gputopo cluster` run (check/cluster_rules.py)
    cluster_min_inter_gbps: Optional[float] = None
    cluster_nodes_alike: bool = False
    cluster_no_slow_node: bool = False
    #: [history]: every headline figure at least this fraction of the machine's own baseline
    #: (median of its last ``history_runs`` error-free runs in the history database)
    history_fraction: Optional[float] = None
    history_runs: int = 5


def selector_matches(selector: str, link_class: Optional[str]) -> bool:
    if selector == ANY:
        return True
    if link_class is None:
        return False
    try:
        lc = LinkClass.parse(link_class)
    except ValueError:
        return False
    if selector == ANY_NVLINK:
        return lc.is_nvlink
    if selector == ANY_PCIE:
        return not lc.is_nvlink and lc.kind != "X"
    return str(lc) == str(LinkClass.parse(selector))


class _Reader:
    """Typed getters that raise InputFileError naming the key."""

    def __init__(self, path: str):
        self.path = path

    def fail(self, key: str, msg: str) -> NoReturn:
        raise InputFileError(self.path, msg, key=key)

    def table(self, doc, key) -> Dict[str, Any]:
        if not isinstance(doc, dict):
            self.fail(key, f"must be a table, got {type(doc).__name__}")
        return doc

    def only(self, doc: Dict[str, Any], allowed, prefix: str):
        for k in doc:
            if k not in allowed:
                full = f"{prefix}.{k}" if prefix else k
                self.fail(full, f"unknown key (known here: {', '.join(sorted(allowed))})")

    def integer(self, v, key, minimum=0, maximum=None) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            self.fail(key, f"must be an integer, got {v!r}")
        if v < minimum:
            self.fail(key, f"must be >= {minimum}, got {v}")
        if maximum is not None and v > maximum:
            self.fail(key, f"must be <= {maximum} (no hardware has more), got {v}")
        return v

    def number(self, v, key, minimum=0.0, maximum=None) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            self.fail(key, f"must be a number, got {v!r}")
        if not math.isfinite(v):  # NaN passes every comparison: the rule would never fail
            self.fail(key, f"must be a finite number, got {v}")
        if v < minimum or (maximum is not None and v > maximum):
            rng = f">= {minimum}" + (f" and <= {maximum}" if maximum is not None else "")
            self.fail(key, f"must be {rng}, got {v}")
        return float(v)

    def boolean(self, v, key) -> bool:
        if not isinstance(v, bool):
            self.fail(key, f"must be true or false, got {v!r}")
        return v

    def string(self, v, key) -> str:
        if not isinstance(v, str):
            self.fail(key, f"must be a string, got {v!r}")
        return v

    def series(self, v, key) -> str:
        """A measurement series: a test name, or a collective's with " (in-place)" (nccl-tests)."""
        name = self.string(v, key)
        known = known_series()
        if name not in known:
            self.fail(key, f"unknown series {name!r}; known: {', '.join(sorted(known))}")
        return name

    def link_class(self, v, key) -> str:
        try:
            lc = LinkClass.parse(self.string(v, key))
        except ValueError:
            self.fail(key, f"unknown link class {v!r} (NV#, PIX, PXB, PHB, NODE, SYS)")
        if lc.kind == "X":
            self.fail(key, "X is the diagonal, not a link class")
        return str(lc)

    def selector(self, v, key) -> str:
        if v in (ANY, ANY_NVLINK, ANY_PCIE):
            return v
        if v.lower() == "pcie":
            return ANY_PCIE
        return self.link_class(v, key)

    def pair(self, k, key) -> Tuple[int, int]:
        m = _PAIR_RE.match(k)
        if not m or m.group(1) == m.group(2):
            self.fail(key, f"a pair is written \"i,j\" with two different GPU indices, got {k!r}")
        i, j = int(m.group(1)), int(m.group(2))
        return (min(i, j), max(i, j))


def parse_spec(doc: Dict[str, Any], path: str = "<spec>") -> Spec:
    """Validate a parsed TOML document into a Spec; InputFileError names the offending key."""
    r = _Reader(path)
    r.only(doc, _ALLOWED[""], "")
    spec = Spec(path=str(path))
    if "schema_version" in doc:
        v = r.integer(doc["schema_version"], "schema_version", 1)
        if v != SPEC_SCHEMA_VERSION:
            r.fail("schema_version", f"this gputopo reads spec schema_version {SPEC_SCHEMA_VERSION}, got {v}")
    spec.name = r.string(doc.get("name", Path(str(path)).stem), "name")
    spec.description = r.string(doc.get("description", ""), "description")
    spec.strict = r.boolean(doc.get("strict", False), "strict")

    topo = r.table(doc.get("topology", {}), "topology")
    r.only(topo, _ALLOWED["topology"], "topology")
    if "gpu_count" in topo:
        spec.gpu_count = r.integer(topo["gpu_count"], "topology.gpu_count", 1)
    if "all_pairs" in topo:
        spec.all_pairs = r.link_class(topo["all_pairs"], "topology.all_pairs")
    if "matrix" in topo:
        spec.expected_classes.update(_matrix_classes(r, r.string(topo["matrix"], "topology.matrix")))
        if spec.gpu_count is None:
            idx = {g for p in spec.expected_classes for g in p}
            spec.gpu_count = len(idx) or None
    pairs = r.table(topo.get("pairs", {}), "topology.pairs")
    written: Dict[Tuple[int, int], str] = {}  # pair -> the key that gave it ("0,1" and "1,0" are one pair)
    for k, v in pairs.items():
        key = f"topology.pairs.{k}"
        pair, lc = r.pair(k, key), r.link_class(v, key)
        if pair in written and spec.expected_classes[pair] != lc:
            r.fail(key, f"pair {pair[0]},{pair[1]} is also given as \"{written[pair]}\" = "
                        f"{spec.expected_classes[pair]}; one pair has one class")
        written[pair] = k
        spec.expected_classes[pair] = lc

    nv = r.table(doc.get("nvlink", {}), "nvlink")
    r.only(nv, _ALLOWED["nvlink"], "nvlink")
    if "min_links_up" in nv:
        spec.nvlink_min_links_up = r.integer(nv["min_links_up"], "nvlink.min_links_up", 0,
                                             MAX_NVLINKS)
    for k, v in r.table(nv.get("links_up", {}), "nvlink.links_up").items():
        key = f"nvlink.links_up.{k}"
        if not k.strip().isdigit():
            r.fail(key, f"keys are GPU indices, got {k!r}")
        spec.nvlink_links_up[int(k)] = r.integer(v, key, 0, MAX_NVLINKS)
    if "max_errors" in nv:
        me = nv["max_errors"]
        if isinstance(me, dict):
            for k, v in me.items():
                key = f"nvlink.max_errors.{k}"
                if k not in NVLINK_ERROR_COUNTERS:
                    r.fail(key, f"unknown counter (known: {', '.join(NVLINK_ERROR_COUNTERS)})")
                spec.nvlink_max_errors[k] = r.integer(v, key)
        else:
            limit = r.integer(me, "nvlink.max_errors")
            spec.nvlink_max_errors = {c: limit for c in NVLINK_ERROR_COUNTERS}

    pcie = r.table(doc.get("pcie", {}), "pcie")
    r.only(pcie, _ALLOWED["pcie"], "pcie")
    if "min_gen" in pcie:
        spec.pcie_min_gen = r.integer(pcie["min_gen"], "pcie.min_gen", 1, MAX_PCIE_GEN)
    if "min_width" in pcie:
        spec.pcie_min_width = r.integer(pcie["min_width"], "pcie.min_width", 1, MAX_PCIE_WIDTH)
    spec.pcie_full_width = r.boolean(pcie.get("full_width", False), "pcie.full_width")
    if "max_replay" in pcie:
        spec.pcie_max_replay = r.integer(pcie["max_replay"], "pcie.max_replay")

    bw = r.table(doc.get("bandwidth", {}), "bandwidth")
    for sel, rule in bw.items():
        key = f"bandwidth.{sel}"
        selector = r.selector(sel, key)
        rule = r.table(rule, key)
        r.only(rule, _BANDWIDTH_KEYS, key)
        if not ({"min_gbps", "min_efficiency"} & set(rule)):
            r.fail(key, "needs min_gbps and/or min_efficiency")
        spec.bandwidth.append(BandwidthRule(
            selector=selector,
            min_gbps=r.number(rule["min_gbps"], f"{key}.min_gbps") if "min_gbps" in rule else None,
            min_efficiency=(r.number(rule["min_efficiency"], f"{key}.min_efficiency", 0.0, 1.0)
                            if "min_efficiency" in rule else None),
            series=r.series(rule["series"], f"{key}.series") if "series" in rule else None))

    busbw = r.table(doc.get("busbw", {}), "busbw")
    for op, per in busbw.items():
        key = f"busbw.{op}"
        name = op[len(PREFIX):] if op.startswith(PREFIX) else op
        if name not in BUSBW_OPS:
            r.fail(key, f"unknown collective (known: {', '.join(BUSBW_OPS)})")
        if isinstance(per, (int, float)) and not isinstance(per, bool):
            spec.busbw[name] = {ANY: r.number(per, key)}
            continue
        per = r.table(per, key)
        spec.busbw[name] = {r.selector(sel, f"{key}.{sel}"): r.number(v, f"{key}.{sel}") for sel, v in per.items()}

    integ = r.table(doc.get("integrity", {}), "integrity")
    r.only(integ, _ALLOWED["integrity"], "integrity")
    spec.integrity = {k: r.boolean(v, f"integrity.{k}") for k, v in integ.items()}

    fnd = r.table(doc.get("findings", {}), "findings")
    r.only(fnd, _ALLOWED["findings"], "findings")
    fail_on = fnd.get("fail_on", [])
    if not isinstance(fail_on, list):
        r.fail("findings.fail_on", "must be a list of finding kinds")
    for k in fail_on:
        if k not in KINDS:
            r.fail("findings.fail_on", f"unknown finding kind {k!r} (known: {', '.join(KINDS)})")
    spec.fail_on = list(fail_on)

    cl = r.table(doc.get("cluster", {}), "cluster")
    r.only(cl, _ALLOWED["cluster"], "cluster")
    if "min_inter_node_busbw_gbps" in cl:
        spec.cluster_min_inter_gbps = r.number(cl["min_inter_node_busbw_gbps"],
                                               "cluster.min_inter_node_busbw_gbps")
    spec.cluster_nodes_alike = r.boolean(cl.get("nodes_alike", False), "cluster.nodes_alike")
    spec.cluster_no_slow_node = r.boolean(cl.get("no_slow_node", False), "cluster.no_slow_node")
    hist = r.table(doc.get("history", {}), "history")
    r.only(hist, _ALLOWED["history"], "history")
    if "history" in doc:  # an empty [history] table: the defaults
        spec.history_fraction = r.number(hist.get("baseline_fraction", 0.8), "history.baseline_fraction",
                                         0.01, 1.0)
        spec.history_runs = r.integer(hist.get("runs", 5), "history.runs", 1, 1000)
        if "drift" in spec.fail_on:  # one drifted figure would fail twice, by two fractions
            r.fail("findings.fail_on", "'drift' is judged by the spec's [history] rule (its "
                   "baseline_fraction and runs): list drift in one of them, not both")
    if not _requires_anything(spec):
        raise InputFileError(path, "states no requirement, so every run would pass; add a rule (e.g. "
                   "[integrity] no_corruption = true) or start from a shipped spec: "
                   f"{', '.join(shipped_spec_names())}")
    return spec


def _requires_anything(spec: Spec) -> bool:
    """Whether the spec has at least one rule that can fail (the run.complete rule aside)."""
    return bool(spec.gpu_count is not None or spec.expected_classes or spec.all_pairs
                or spec.nvlink_min_links_up is not None or spec.nvlink_links_up
                or spec.nvlink_max_errors or spec.pcie_min_gen is not None
                or spec.pcie_min_width is not None or spec.pcie_full_width
                or spec.pcie_max_replay is not None or spec.bandwidth or spec.busbw
                or any(spec.integrity.values()) or spec.fail_on
                or spec.cluster_min_inter_gbps is not None or spec.cluster_nodes_alike
                or spec.cluster_no_slow_node or spec.history_fraction is not None)


def _matrix_classes(r: _Reader, text: str) -> Dict[Tuple[int, int], str]:
    """Expected classes from `nvidia-smi topo -m` text (the smi parser reads it)."""
    from gputopo.probe.smi import parse_topo_matrix

    try:
        m = parse_topo_matrix(text, source="topology.matrix")
    except InputFileError as e:
        r.fail("topology.matrix", f"not an nvidia-smi topo -m matrix: {e}")
    return {pair: str(lc) for pair, lc in m.classes.items()}


def load_spec(path) -> Spec:
    """Read and validate a spec file. InputFileError (exit 2) on any problem, naming the key."""
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10
        import tomli as tomllib

    from gputopo.inputs import MAX_SPEC_BYTES, read_user_bytes

    p = Path(path)
    raw = read_user_bytes(p, "spec", MAX_SPEC_BYTES)
    try:
        doc = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise InputFileError(p, "the spec is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"line (\d+)", str(e))
        raise InputFileError(p, f"not valid TOML: {e}", line=int(m.group(1)) if m else None) from None
    return parse_spec(doc, str(p))


def shipped_spec_path(name: str) -> Path:
    """Path of a shipped example spec ("pcie-box", "nvswitch-8gpu")."""
    return Path(__file__).with_name("specs") / (name if name.endswith(".toml") else name + ".toml")


def shipped_spec_names() -> List[str]:
    return sorted(p.stem for p in Path(__file__).with_name("specs").glob("*.toml"))


def known_series() -> set:
    """Every series a run can hold: the bench's tests and the collectives nccl-tests reports."""
    from gputopo.bench.plan import DP_TESTS, P2P_TESTS, SELF_TESTS

    collectives = {c.test for c in COLLECTIVES}
    return (set(P2P_TESTS + DP_TESTS + SELF_TESTS) | collectives
            | {f"{c} (in-place)" for c in collectives})
