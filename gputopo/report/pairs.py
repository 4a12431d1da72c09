"""The per-pair table: for each GPU pair, its class, theoretical rate, measured figures per
series, wrong elements, numerics verdicts, findings and a verdict.

Verdicts: ``broken`` (an error finding on the pair), ``degraded`` (a warning), ``ok`` (measured,
nothing found), ``not-measured`` (nothing ran on it).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from gputopo.model import Finding, Measurement, Topology, is_value
from gputopo.model.bus_id import short_bus_id
from gputopo.model.finding_kinds import is_kind, marks_pairs, spec

from .expected import ExpectedRate, pair_rate
from .headline import Headline, headline_order, link_class_of

VERDICTS = ("ok", "degraded", "broken", "not-measured")


def verdict_of(findings: List[Finding], measured: bool) -> str:
    sev = {f.severity for f in findings}
    if "error" in sev:
        return "broken"
    if "warning" in sev:
        return "degraded"
    return "ok" if measured else "not-measured"


@dataclass
class PairRow:
    gpus: Tuple[int, ...]
    link_class: Optional[str]
    expected: ExpectedRate
    series: Dict[str, dict] = field(default_factory=dict)
    measurements: int = 0
    wrong: int = 0
    errors: int = 0
    #: measurements whose data was not checked (an imported nccl-tests run with -c 0)
    unchecked: int = 0
    numerics: Dict[str, str] = field(default_factory=dict)
    findings: List[Finding] = field(default_factory=list)
    #: NCCL's transport for the pair (bench/nccl_transport.py: measured from its log, modeled on
    #: the sim fabric, or imported from a user's job log), None when unknown
    nccl_transport: Optional[dict] = None

    @property
    def headline_series(self) -> Optional[str]:
        return next(iter(headline_order(self.series)), None)

    @property
    def headline_gbps(self) -> Optional[float]:
        s = self.headline_series
        return self.series[s]["gbps"] if s else None

    @property
    def efficiency(self) -> Optional[float]:
        s = self.headline_series
        return self.series[s]["efficiency"] if s else None

    @property
    def measured(self) -> bool:
        return bool(self.measurements or self.numerics)

    @property
    def checked(self) -> bool:
        """Whether any transfer on the pair completed and its data was compared: ``wrong`` means
        something only then (an unmeasured or only failed pair, or one measured without a data
        check, shows ``-``, not ``#wrong 0``)."""
        return self.measurements > self.errors + self.unchecked

    @property
    def wrong_or_none(self) -> Optional[int]:
        return self.wrong if self.checked else None

    @property
    def verdict(self) -> str:
        return verdict_of(self.findings, self.measured)

    def to_json(self) -> dict:
        return {
            "gpus": list(self.gpus), "link_class": self.link_class,
            "expected_gbps": self.expected.gbps, "expected_basis": self.expected.basis,
            "headline_series": self.headline_series,
            "headline_gbps": _r(self.headline_gbps), "efficiency": _r(self.efficiency),
            "series": self.series, "measurements": self.measurements, "wrong": self.wrong_or_none,
            "failed_measurements": self.errors, "numerics": self.numerics,
            "nccl_transport": self.nccl_transport,
            "findings": sorted({f.kind for f in self.findings}), "verdict": self.verdict,
        }


def _r(x, nd=4):
    return None if x is None else round(x, nd)


def pair_rows(topo: Optional[Topology], measurements: List[Measurement], heads: List[Headline],
              numerics: Dict[tuple, Dict[str, str]], findings: List[Finding]) -> List[PairRow]:
    """Rows for every pair of the topology plus every measured pair/group, sorted by GPUs."""
    rows: Dict[tuple, PairRow] = {}

    def row(gpus: tuple, lc: Optional[str]) -> PairRow:
        r = rows.get(gpus)
        if r is None:
            exp = pair_rate(topo, *gpus) if len(gpus) == 2 else ExpectedRate(None, "group")
            r = rows[gpus] = PairRow(gpus=gpus, link_class=lc, expected=exp)
        elif r.link_class is None and lc:
            r.link_class = lc
        return r

    if topo is not None:
        for p in topo.pairs:
            row(tuple(p.gpus), str(p.link_class))
    for m in measurements:
        if len(m.gpus) < 2:
            continue
        r = row(tuple(sorted(m.gpus)), link_class_of(topo, m))
        r.measurements += 1
        r.wrong += int(m.wrong or 0)
        r.errors += int(m.error is not None)
        r.unchecked += int(m.error is None and (m.extra or {}).get("data_checked") is False)
        nt = (m.extra or {}).get("nccl_transport")
        if isinstance(nt, dict) and "kind" in nt and r.nccl_transport is None:
            r.nccl_transport = nt
    by_series: Dict[tuple, List[Headline]] = defaultdict(list)
    for h in heads:
        if len(h.gpus) >= 2:
            by_series[(h.pair_key, h.series)].append(h)
    for (pair, series), hs in by_series.items():
        worst = min(hs, key=lambda h: h.gbps)
        row(pair, worst.link_class).series[series] = {
            "gbps": round(worst.gbps, 4), "metric": worst.metric, "size_bytes": worst.size_bytes,
            "efficiency": _r(worst.efficiency), "expected_gbps": worst.expected.gbps,
            "directions": {(h.direction or "-"): round(h.gbps, 4) for h in hs},
            "direction_efficiency": {(h.direction or "-"): _r(h.efficiency) for h in hs},
            "timing": worst.timing, "noisy": any(h.noisy for h in hs),
        }
    for pair, ways in numerics.items():
        row(pair, None).numerics.update(ways)
    for f in findings:
        if f.gpus and len(f.gpus) >= 2 and tuple(sorted(f.gpus)) in rows:
            rows[tuple(sorted(f.gpus))].findings.append(f)
    for f in findings:  # a GPU's own link problem flags the pairs that travel over that link
        if f.gpus and (len(f.gpus) == 1 or names_each_gpu(f.kind)) and marks_pairs(f.kind) \
                and f.severity in ("error", "warning"):
            for key, r in rows.items():
                if len(key) == 2 and gpu_finding_touches(topo, f, key, r.link_class) \
                        and not any(x is f for x in r.findings):
                    r.findings.append(f)
    return [rows[k] for k in sorted(rows, key=lambda g: (len(g), g))]


def names_each_gpu(kind: str) -> bool:
    """A GPU link kind one finding of which may name several GPUs (each GPU's pairs are flagged):
    the table's ``marks_each_gpu`` (gputopo/model/finding_kinds.py)."""
    return is_kind(kind) and spec(kind).marks_each_gpu



def nvlink_peers(topo: Optional[Topology], gpu: int) -> Optional[set]:
    """GPUs that ``gpu``'s NVLinks are wired to, active or not (every GPU on the switch fabric
    when a link goes to an NVSwitch); None when the wiring is not known."""
    if topo is None:
        return None
    try:
        g = topo.gpu(gpu)
    except KeyError:
        return None
    by_bus = {short_bus_id(x.pci_bus_id): x.nvml_index for x in topo.gpus if is_value(x.pci_bus_id)}
    on_switch = {x.nvml_index for x in topo.gpus if any(str(lk.remote_type) == "SWITCH" for lk in x.nvlinks)}
    peers, known = set(), False
    for lk in g.nvlinks:
        if str(lk.remote_type) == "SWITCH":
            peers |= on_switch
            known = True
        elif is_value(lk.remote_bus_id) and short_bus_id(lk.remote_bus_id) in by_bus:
            peers.add(by_bus[short_bus_id(lk.remote_bus_id)])
            known = True
    for x in topo.gpus:  # the other end may know the wiring when this end does not
        if x.nvml_index != gpu and any(is_value(lk.remote_bus_id) and is_value(g.pci_bus_id)
                                       and short_bus_id(lk.remote_bus_id) == short_bus_id(g.pci_bus_id)
                                       for lk in x.nvlinks):
            peers.add(x.nvml_index)
            known = True
    peers.discard(gpu)
    return peers if known else None


def gpu_finding_touches(topo: Optional[Topology], f: Finding, pair: tuple, link_class: Optional[str]) -> bool:
    """Whether a GPU's own finding (a kind whose table entry ``marks_pairs``, gputopo/model/
    finding_kinds.py: findings about one GPU's own links flag the pairs whose traffic uses those
    links) bears on ``pair``: a lost GPU on all its
    pairs; NVLinks down or erring on the pairs those links connect (by wiring, else the pair's
    NVLink class, else all pairs when no NVLink of the GPU is up); a narrow PCIe link on its
    PCIe pairs; a growing error counter on its link's pairs (NVLink counters on the NVLink
    pairs, PCIe replays on the PCIe pairs, other counters on none); an NVLink fabric problem on
    the NVLink pairs of each GPU it names."""
    if not f.gpus:  # a GPU finding names its GPU; one that does not bears on no pair
        return False
    named = f.gpus if names_each_gpu(f.kind) else f.gpus[:1]
    return any(_touches_from(topo, f, g, pair, link_class) for g in named if g in pair)


def _touches_from(topo: Optional[Topology], f: Finding, gpu: int, pair: tuple, link_class: Optional[str]) -> bool:
    other = pair[1] if pair[0] == gpu else pair[0]
    nvlink_pair = bool(link_class and link_class.startswith("NV"))
    ev = f.evidence or {}
    mark = marks_pairs(f.kind)
    if mark == "all":
        return True
    if mark == "pcie":
        return not nvlink_pair
    if mark == "counter":  # a growing counter: its link's pairs (the NIC's or memory's none)
        counter = str(ev.get("counter") or "")
        nv_errors, pcie_errors = counter.startswith("nvlink_"), counter == "pcie_replay"
    else:
        nv_errors = mark == "nvlink" or any(k.startswith("nvlink") for k in ev)
        pcie_errors = mark == "link-evidence" and "pcie.replay" in ev
    if pcie_errors and not nvlink_pair:
        return True
    if not nv_errors:
        return False
    peers = nvlink_peers(topo, gpu)
    if peers is not None:
        return other in peers
    return nvlink_pair or (f.kind == "nvlink-down" and (f.evidence or {}).get("active") == 0)


def class_median(values: List[float]) -> Optional[float]:
    return statistics.median(values) if values else None
