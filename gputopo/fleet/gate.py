"""`gputopo gate`'s verdict: each GPU and pair of a job's set judged on three layers, the
narrowest part to blame, an action of that size, and the node verdict. The one place gate's
verdicts are decided (docs/fleet.md says so); gputopo/bench/gate_copies.py only measures.

Layers, per GPU and per pair:

- **declared**: what the machine should be: the machine's own history (fleet/gate_declared.py:
  the link class each pair had, the NVLinks each GPU had, an NVSwitch fabric, the copy rates its
  own bench runs measured at gate's size): a pair that had NVLink and now reads PCIe, or fewer
  NVLinks than before, is degraded (link) even where NVML flags nothing; without history, the
  link class of each pair as its model reports it (an NVSwitch box: NVLink on every pair), and
  an NVLink pair's rate is judged against the theoretical rate of its reported class
  (gputopo/report/expected.py); each verdict says which (no spec is read yet);
- **reported**: what NVML says now: the scan's findings (gputopo/report/rules.py): GPUs lost,
  health, NVLinks down, fabric registration and health, P2P status, Xids with a recovery action;
- **measured**: one verified peer copy per pair each way (and the all_reduce over the set).

The GPU count and NVSwitch presence are looked at before the fabric state (as gpud does): a GPU
alone has no pair and no fabric to judge, a PCIe pair without a bridge has no NVLink to judge;
both are "not applicable", never failures.

Statuses: ``ok`` (judged against something stated), ``not-applicable``, ``degraded`` (works, but
slower or short of what it should be), ``broken`` (wrong data, hang, crash, an error NVML
reports) and ``not-judged`` (with why: the budget, a step never started). Scopes, narrowest
first: ``gpu``, ``link``, ``host-path``, ``fabric-manager``, ``node``.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from gputopo import SCHEMA_VERSION
from gputopo.model import Finding, Measurement, Topology, is_value
from gputopo.model.fabric import GpuFabric
from gputopo.model.health import GpuHealth
from gputopo.model.finding_kinds import kinds_where, spec
from gputopo.model.reason import MAX_REASON, Segment, reason, segment
from gputopo.model.step_failure import StepFailure
from gputopo.model.xid import RECOVERY_ACTIONS

if TYPE_CHECKING:
    from gputopo.fleet.gate_declared import Declared

GATE_SCHEMA = 1
OK, NOT_APPLICABLE, DEGRADED, BROKEN, NOT_JUDGED = "ok", "not-applicable", "degraded", "broken", "not-judged"
#: worst first
STATUS_ORDER = (BROKEN, DEGRADED, NOT_JUDGED, OK, NOT_APPLICABLE)
SCOPES = ("gpu", "link", "host-path", "fabric-manager", "node")

#: A pair whose NVLinks are up but whose copies reach at most this multiple of the PCIe rate
#: (the pair's narrower PCIe link, theoretical) moves its bytes over PCIe or through host memory.
PCIE_RATE_MARGIN = 1.25
#: An NVLink pair below this fraction of its theoretical NVLink rate (and above PCIe's) is slow.
SLOW_FRACTION = 0.5

Pair = Tuple[int, int]


@dataclass
class Judgement:
    status: str
    #: the narrowest part blamed (SCOPES), None where nothing is wrong
    scope: Optional[str] = None
    #: the finding kind a reason names it by (model/finding_kinds.py), None when ok
    kind: Optional[str] = None
    #: what is wrong, or what it was judged against, or why it was not judged
    detail: str = ""
    #: the named cause, only where facts read support it
    cause: Optional[str] = None
    action: Optional[str] = None
    evidence: Dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> Dict[str, Any]:
        return {"status": self.status, "scope": self.scope, "kind": self.kind, "detail": self.detail,
                "cause": self.cause, "action": self.action, "evidence": self.evidence}


def _worse(a: Judgement, b: Judgement) -> Judgement:
    return a if STATUS_ORDER.index(a.status) <= STATUS_ORDER.index(b.status) else b


@dataclass
class GpuResult:
    index: int
    uuid: str
    bus_id: str
    layers: Dict[str, str]
    judgement: Judgement
    findings: List[Finding] = field(default_factory=list)

    def to_json(self) -> Dict[str, Any]:
        return {"gpu": self.index, "uuid": self.uuid, "bus_id": self.bus_id, "layers": self.layers,
                **self.judgement.to_json(), "findings": [f.to_json() for f in self.findings]}


@dataclass
class PairResult:
    gpus: Pair
    link_class: str
    layers: Dict[str, str]
    judgement: Judgement
    copies: List[Dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> Dict[str, Any]:
        return {"gpus": list(self.gpus), "link_class": self.link_class, "layers": self.layers,
                **self.judgement.to_json(), "copies": self.copies}


@dataclass
class GateVerdict:
    gpus: List[GpuResult]
    pairs: List[PairResult]
    selection: Dict[str, Any]
    budget_s: float
    used_s: float
    time_s: float
    machine: str = ""
    source: str = ""
    simulated: bool = False
    fabric: str = ""
    plan: Dict[str, Any] = field(default_factory=dict)
    allreduce: Optional[Judgement] = None
    node: List[Judgement] = field(default_factory=list)
    best_other: Optional[Dict[str, Any]] = None
    notes: List[str] = field(default_factory=list)

    def judgements(self) -> List[Judgement]:
        out = [g.judgement for g in self.gpus] + [p.judgement for p in self.pairs] + list(self.node)
        if self.allreduce is not None:
            out.append(self.allreduce)
        return out

    @property
    def verdict(self) -> str:
        """fail (something broken), warn (degraded), not-judged (something could not be judged,
        or nothing was), else pass: a pass means every GPU and pair was judged ok or is not
        applicable."""
        st = {j.status for j in self.judgements()}
        if BROKEN in st:
            return "fail"
        if DEGRADED in st:
            return "warn"
        if NOT_JUDGED in st or OK not in st:
            return "not-judged"
        return "pass"

    def problems(self) -> List[Tuple[str, Judgement, List[str]]]:
        """(subject, judgement, the other subjects of the same cause) of what is broken or
        degraded, worst first; one per cause: a GPU's, the fabric manager's, the node's or the
        host path's fault is named once, not again on each of its pairs. The subject is the
        narrowest part: ``gpu3``, ``gpus2,5`` (a link), ``host`` (the host path), ``node``."""
        items: List[Tuple[str, Judgement]] = [("node", n) for n in self.node]
        items += [(f"gpu{g.index}", g.judgement) for g in self.gpus]
        items += [(f"gpus{p.gpus[0]},{p.gpus[1]}", p.judgement) for p in self.pairs
                  if p.judgement.evidence.get("explained_by") is None]
        if self.allreduce is not None:
            items.append(("node", self.allreduce))
        bad = [(s, j) for s, j in items if j.status in (BROKEN, DEGRADED)]
        seen: Dict[Tuple[Optional[str], ...], int] = {}
        out: List[Tuple[str, Judgement, List[str]]] = []
        for s, j in sorted(bad, key=lambda x: STATUS_ORDER.index(x[1].status)):
            wide = j.scope in ("fabric-manager", "node", "host-path")
            key = (j.scope, j.kind, j.cause) if wide else (s, j.kind)
            if key in seen:
                out[seen[key]][2].append(s)
                continue
            seen[key] = len(out)
            subject = {"fabric-manager": "node", "node": "node", "host-path": "host"}.get(j.scope or "", s)
            out.append((subject, j, [s] if wide else []))
        return out

    def segments(self) -> List[Segment]:
        out = []
        for subject, j, also in self.problems():
            detail = j.detail
            if j.scope == "host-path":
                detail = f"{len(also)} PCIe pair(s): {j.detail}"
            out.append(segment(j.kind or "gate", subject, detail))
        return out

    def reason(self, limit: int = MAX_REASON) -> str:
        return reason(self.segments(), limit)

    def not_judged(self) -> List[str]:
        out = [f"gpu{g.index}: {g.judgement.detail}" for g in self.gpus if g.judgement.status == NOT_JUDGED]
        left = [p for p in self.pairs if p.judgement.status == NOT_JUDGED]
        if left:
            whys = sorted({p.judgement.detail for p in left})
            out.append(f"{len(left)} pair(s): " + "; ".join(whys))
        if self.allreduce is not None and self.allreduce.status == NOT_JUDGED:
            out.append(f"all_reduce: {self.allreduce.detail}")
        return out

    def counts(self) -> Dict[str, int]:
        out: Dict[str, int] = {}
        for j in [g.judgement for g in self.gpus] + [p.judgement for p in self.pairs]:
            out[j.status] = out.get(j.status, 0) + 1
        return out

    def summary(self) -> str:
        """``8 GPUs, 28 pairs: 36 ok; not judged: ...``."""
        c = self.counts()
        parts = [f"{c[s]} {s}" for s in STATUS_ORDER if c.get(s)]
        text = f"{len(self.gpus)} GPU(s), {len(self.pairs)} pair(s): " + ", ".join(parts or ["none"])
        measured = sum(1 for p in self.pairs if p.copies)
        text += f"; {measured} pair(s) measured"
        if self.allreduce is not None:
            text += f"; all_reduce {self.allreduce.status}"
        nj = self.not_judged()
        if nj:
            text += "; not judged: " + "; ".join(nj)
        return text

    def time_text(self) -> str:
        return _dt.datetime.fromtimestamp(self.time_s, _dt.timezone.utc).isoformat(timespec="seconds")

    def to_json(self) -> Dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "gate_schema": GATE_SCHEMA, "command": "gate",
                "verdict": self.verdict, "reason": self.reason() or None, "time": self.time_text(),
                "budget_s": self.budget_s, "used_s": round(self.used_s, 3), "machine": self.machine,
                "source": self.source, "simulated": self.simulated, "fabric": self.fabric,
                "selection": self.selection, "summary": self.summary(), "plan": self.plan,
                "node": [j.to_json() for j in self.node],
                "gpus": [g.to_json() for g in self.gpus], "pairs": [p.to_json() for p in self.pairs],
                "allreduce": self.allreduce.to_json() if self.allreduce is not None else None,
                "best_other_set": self.best_other, "not_judged": self.not_judged(), "notes": list(self.notes)}


# ----------------------------------------------------------------------------- facts


def nvswitch_present(topo: Topology, gpus: Sequence[int]) -> bool:
    """Whether any of ``gpus`` reaches an NVSwitch (an NVLink whose far end is a switch) or is
    in an NVLink fabric (NVML fabric info)."""
    for g in gpus:
        gpu = topo.gpu(g)
        if isinstance(gpu.fabric, GpuFabric):
            return True
        if any(lk.remote_type == "SWITCH" for lk in gpu.nvlinks if is_value(lk.remote_type)):
            return True
    return False


def _text(x: Any) -> str:
    return str(x) if is_value(x) else "n/a"


def _smi_id(topo: Topology, g: int) -> str:
    bus = topo.gpu(g).pci_bus_id
    return str(bus) if is_value(bus) else str(g)


def _gbps(m: Measurement) -> Optional[float]:
    if not m.samples_s or m.samples_s[0] <= 0:
        return None
    return m.size_bytes / min(m.samples_s) / 1e9


def _round(x: Optional[float]) -> Optional[float]:
    return round(x, 2) if x is not None else None


def _recovery(f: Finding) -> Optional[str]:
    action = (f.evidence or {}).get("recovery_action")
    return str(action) if action and action != "None" else None


def _gpu_judgement(topo: Topology, g: int, findings: List[Finding], fm_down: bool) -> Judgement:
    """The reported layer of one GPU: its own scan findings (errors: broken; warnings: degraded)."""
    smi = _smi_id(topo, g)
    reset = f"reset GPU {g} (nvidia-smi -r -i {smi}) when no job uses it"
    best = Judgement(OK, detail="NVML: no error or warning on this GPU (health, Xids, links)")
    for f in findings:
        if f.severity not in ("error", "warning"):
            continue
        status = BROKEN if f.severity == "error" else DEGRADED
        detail = f.message
        if f.kind == "nvlink-fabric" and fm_down:
            j = Judgement(status, "fabric-manager", f.kind, "fabric not registered: the Fabric Manager registered no GPU",
                          cause=("every NVSwitch GPU of the set reports NVML fabric state 'not-started': the "
                                 "Fabric Manager has not registered them (not running or not started); the "
                                 "nvidia-fabricmanager service itself was not read"),
                          action="restart the fabric manager (systemctl restart nvidia-fabricmanager) and read "
                                 "its log; its version must match the driver's",
                          evidence={"finding": f.to_json()})
        elif f.kind == "xid" and _recovery(f):
            act = _recovery(f) or ""
            todo = RECOVERY_ACTIONS.get(act, (f"the driver's recovery action {act!r}", False))[0]
            node = act == "Node Reboot Required"
            j = Judgement(status, "node" if node else "gpu", "xid", f"recovery action pending: {act}",
                          cause=f"the driver set GPU {g}'s recovery action to '{act}' (Xid 154 in the kernel log)",
                          action=todo.replace("BUS_ID", smi) if not node else "reboot the node",
                          evidence={"recovery_action": act, "finding": f.to_json()})
        elif spec(f.kind).marks_pairs in ("nvlink", "link-evidence"):  # a GPU's NVLinks: down, errors, fabric
            j = Judgement(status, "link", f.kind, detail,
                          action=f"{reset} to retrain its NVLinks; if they stay down, service the NVLink "
                                 "(bridge, baseboard)", evidence={"finding": f.to_json()})
        elif f.kind == "gpu-lost":
            j = Judgement(status, "gpu", f.kind, detail, action=f"{reset}; reboot the node if the reset fails",
                          evidence={"finding": f.to_json()})
        else:
            j = Judgement(status, "gpu", f.kind, detail, action=reset, evidence={"finding": f.to_json()})
        best = _worse(best, j) if best.status != OK else j
    return best


def _nvml_recovery(gpu) -> Optional[str]:
    """The recovery action NVML reports pending on ``gpu`` (not "None"), None where none is or the
    driver does not report it."""
    act = gpu.health.recovery_action if isinstance(gpu.health, GpuHealth) else None
    return str(act) if is_value(act) and act is not None and str(act) != "None" else None


def _nvml_recovery_judgement(topo: Topology, g: int, act: str) -> Judgement:
    """A recovery action NVML reports (field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION): broken unless
    NVIDIA's catalog lets the GPU keep working meanwhile (Drain P2P, Drain and Reset: degraded)."""
    smi = _smi_id(topo, g)
    todo, usable = RECOVERY_ACTIONS.get(act, (f"the driver's recovery action {act!r} (NVML's "
                                              "nvmlGpuRecoveryAction_t)", False))
    node = act in ("Node Reboot Required", "SYSTEM_REBOOT")
    return Judgement(DEGRADED if usable else BROKEN, "node" if node else "gpu", "xid",
                     f"recovery action pending: {act} (NVML)",
                     cause=(f"NVML reports GPU {g}'s recovery action as '{act}' (field "
                            "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)"),
                     action="reboot the node" if node else todo.replace("BUS_ID", smi),
                     evidence={"recovery_action": act, "source": "nvml"})


def _p2p_not_ok(pair) -> Dict[str, str]:
    """The P2P capabilities NVML reports as other than OK for a pair (NVLink pairs: read, write,
    nvlink)."""
    out = {}
    for cap in ("read", "write", "nvlink"):
        v = pair.p2p.get(cap)
        if is_value(v) and str(v) != "OK":
            out[cap] = str(v)
    return out


def judge_gate(topo: Topology, findings: List[Finding], gpus: Sequence[int], selection: Dict[str, Any], *,
          measurements: Sequence[Measurement] = (), failures: Sequence[StepFailure] = (),
          not_measured: Optional[Dict[Pair, str]] = None, allreduce_wanted: bool = False,
          allreduce_why: str = "", fabric_name: str = "", stands_in: bool = False,
          budget_s: float = 0.0, used_s: float = 0.0, time_s: float = 0.0,
          plan: Optional[Dict[str, Any]] = None, declared: Optional["Declared"] = None) -> GateVerdict:
    """The verdict of ``gpus`` (NVML indices) from the scan ``topo`` and its ``findings``, the
    gate's ``measurements`` and step ``failures``; ``not_measured``: pairs left out, with why;
    ``declared``: what the machine's own history says it had (fleet/gate_declared.py)."""
    from gputopo.fleet.gate_declared import day

    gpus = sorted(gpus)
    hist = declared if declared is not None and declared.known else None
    no_hist = (f"; declared: {declared.why_none}" if declared is not None and declared.why_none
               else "; declared: no history read")
    not_measured = dict(not_measured or {})
    n = len(gpus)
    switch = nvswitch_present(topo, gpus)
    host_dma = [f for f in findings if spec(f.kind).breaks_peer_dma and f.severity in ("error", "warning")]

    # the fabric manager: every NVSwitch GPU of the set not started (checked only with a peer)
    fabric_gpus = [g for g in gpus if isinstance(topo.gpu(g).fabric, GpuFabric)]
    fm_down = (n > 1 and switch and bool(fabric_gpus)
               and all(topo.gpu(g).fabric.state == "not-started" for g in fabric_gpus))

    gpu_results: List[GpuResult] = []
    for g in gpus:
        gpu = topo.gpu(g)
        own = [f for f in findings if f.gpus and g in f.gpus and spec(f.kind).scope == "gpu"]
        if n < 2:  # a GPU alone: its fabric and NVLink state is said, not judged
            own = [f for f in own if spec(f.kind).health_check not in ("nvlink", "fabric")]
        j = _gpu_judgement(topo, g, own, fm_down)
        nvml_act = _nvml_recovery(gpu)
        if nvml_act is not None and not (j.kind == "xid" and j.evidence.get("recovery_action")):
            ja = _nvml_recovery_judgement(topo, g, nvml_act)
            j = ja if j.status == OK else _worse(j, ja)
        fab = gpu.fabric.text() if isinstance(gpu.fabric, GpuFabric) else "not in a fabric"
        seen = hist.gpus.get(g) if hist is not None else None
        if seen is None:
            said = ("NVSwitch fabric expected" if switch else "no NVSwitch seen: no fabric expected") + no_hist
        else:
            when = f"run {seen.run_id} of {day(seen.time_s)}"
            said = (f"this machine's history: {seen.nvlinks} active NVLink(s)"
                    + (", in an NVSwitch fabric" if seen.fabric else "") + f" ({when})")
            now = len(gpu.active_nvlinks())
            if n > 1 and now < seen.nvlinks and j.status == OK:
                smi = _smi_id(topo, g)
                j = Judgement(DEGRADED, "link", "nvlink-down",
                              f"{now} active NVLink(s), {seen.nvlinks} in this machine's history ({when})",
                              cause=(f"NVML reports {now} active NVLink(s) on GPU {g}; the history recorded "
                                     f"{seen.nvlinks} on the same GPU (UUID {_text(gpu.uuid)}) in {when}"),
                              action=(f"reset GPU {g} (nvidia-smi -r -i {smi}) when no job uses it to retrain its "
                                      "NVLinks; if they stay down, service the NVLink (bridge, baseboard)"),
                              evidence={"active_nvlinks": now, "history_nvlinks": seen.nvlinks,
                                        "history_run": seen.run_id})
        layers = {"declared": said,
                  "reported": f"NVML: {len(gpu.active_nvlinks())} active NVLink(s); fabric: "
                              f"{fab if n > 1 else fab + ' (a GPU alone: not applicable)'}; recovery action: "
                              + _text(gpu.health.recovery_action if isinstance(gpu.health, GpuHealth) else None),
                  "measured": "copies with each peer (its pairs)" if n > 1 else
                              "not applicable: a GPU alone has no peer to copy to"}
        gpu_results.append(GpuResult(g, _text(gpu.uuid), _text(gpu.pci_bus_id), layers, j, own))
    gpu_bad = {r.index: r for r in gpu_results if r.judgement.status in (BROKEN, DEGRADED)}

    by_pair: Dict[Pair, List[Measurement]] = {}
    for m in measurements:
        if m.test == "p2p.copy" and len(m.gpus) == 2:
            by_pair.setdefault((min(m.gpus), max(m.gpus)), []).append(m)
    failed = {(min(f.gpus), max(f.gpus)): f for f in failures if f.group == "p2p" and len(f.gpus) == 2}

    from gputopo.report.expected import gpu_pcie_rate, pair_rate

    def own_bench(ms: List[Measurement]) -> Optional[Dict[str, Any]]:
        """Each measured direction's own bench figure at the same size and time source, or None
        unless every direction has one."""
        if declared is None:
            return None
        out = {}
        for m in ms:
            fig = declared.copies.get(((min(m.gpus), max(m.gpus)), str(m.direction), m.timing))
            if fig is None:
                return None
            out[str(m.direction)] = fig
        return out or None

    pair_results: List[PairResult] = []
    for k, a in enumerate(gpus):
        for b in gpus[k + 1:]:
            p = (a, b)
            pair = topo.pair(a, b)
            lc = pair.link_class
            nv = lc.is_nvlink
            had = hist.pairs.get(p) if hist is not None else None
            if had is None:
                said_pair = (f"{lc} (NVSwitch: NVLink on every pair)" if switch else
                            f"{lc}: NVLink bridge" if nv else
                            f"{lc}: PCIe, no NVLink bridge (NVLink not applicable)") + no_hist
            else:
                said_pair = f"this machine's history: {had.link_class} (run {had.run_id} of {day(had.time_s)})"
            reported_bits = [f"class {lc}"]
            j = Judgement(NOT_JUDGED)
            now_links = pair.nvlink_count or lc.nvlinks
            lost_links: Optional[Judgement] = None
            if had is not None and had.nvlinks > now_links:
                when = f"run {had.run_id} of {day(had.time_s)}"
                lost_links = Judgement(
                    DEGRADED, "link", "nvlink-down",
                    (f"reads {lc}, was {had.link_class} in this machine's history ({when})" if not nv else
                     f"{now_links} NVLink(s), {had.nvlinks} in this machine's history ({when})"),
                    cause=(f"the scan reads the pair {a},{b} as {lc} ({now_links} NVLink(s)); the history recorded "
                           f"{had.link_class} ({had.nvlinks} NVLink(s)) for the same two GPUs in {when}"),
                    action=f"reset GPUs {a} and {b} to retrain their NVLinks; if it stays, service the NVLink "
                           "(bridge, baseboard)",
                    evidence={"link_class": str(lc), "history_link_class": had.link_class,
                              "history_nvlinks": had.nvlinks, "history_run": had.run_id})
            # reported: an NVLink pair's P2P status
            bad_caps = _p2p_not_ok(pair) if nv else {}
            if nv:
                reported_bits.append("P2P " + (", ".join(f"{c} {v}" for c, v in bad_caps.items()) if bad_caps
                                               else "OK"))
            reported = lost_links or Judgement(OK)
            if bad_caps and lost_links is None:
                caps = ", ".join(f"{c}={v}" for c, v in bad_caps.items())
                reported = Judgement(DEGRADED, "link", "p2p-unsupported", f"NVLink pair, NVML P2P status {caps}",
                                     cause=f"NVML reports the NVLink pair {a},{b}'s P2P status as {caps}: CUDA "
                                           "peer access over its NVLinks is refused or limited",
                                     action=f"reset GPUs {a} and {b} (their NVLinks retrain); if it stays, check "
                                            "the NVLink fabric and the driver",
                                     evidence={"p2p": {c: str(v) for c, v in pair.p2p.items()}})
            # measured
            ms = by_pair.get(p, [])
            copies = [{"direction": m.direction, "gbps": _round(_gbps(m)),
                       "size_bytes": m.size_bytes, "wrong": m.wrong, "timing": m.timing} for m in ms]
            measured_layer = "not measured"
            measured = Judgement(NOT_JUDGED, detail=not_measured.get(p, "not measured"))
            if p in failed:
                fl = failed[p]
                scope = "host-path" if (not nv and host_dma) else "link"
                measured = Judgement(BROKEN, scope, fl.kind, f"peer copy {fl.kind}: {fl.what}",
                                     action=f"take the pair out (best other set below); reset GPUs {a} and {b}",
                                     evidence={"step": fl.step})
                measured_layer = f"copy {fl.kind}"
            elif ms:
                wrong = [m for m in ms if m.wrong]
                rates = [r for r in (_gbps(m) for m in ms) if r is not None]
                low = min(rates) if rates else None
                measured_layer = (f"{len(ms)} verified cop{'y' if len(ms) == 1 else 'ies'}, "
                                  + (f"slowest {low:.1f} GB/s" if low is not None else "no time"))
                if wrong:
                    facts = ", ".join(f.kind for f in host_dma)
                    scope = "host-path" if (not nv and host_dma) else "link"
                    measured = Judgement(
                        BROKEN, scope, "corrupt",
                        f"peer copy wrong data ({max(m.wrong or 0 for m in wrong)} elements)",
                        cause=(f"PCIe peer DMA through a host path the scan flags ({facts})" if scope == "host-path"
                               else None),
                        action=("fix the host's peer DMA path (IOMMU passthrough, ACS redirect off) or run with "
                                "NCCL_P2P_DISABLE=1" if scope == "host-path" else
                                f"take the pair out (best other set below); reset GPUs {a} and {b}"),
                        evidence={"wrong": [m.wrong for m in wrong]})
                    measured_layer += ", wrong data"
                elif len(ms) < 2:
                    measured = Judgement(NOT_JUDGED, detail="only one direction measured")
                elif stands_in or low is None:
                    measured = Judgement(OK, detail="copies verified both ways (rate not judged: "
                                         + ("the cpu fabric stands in for GPUs)" if stands_in else "no time)"))
                elif nv:
                    exp = pair_rate(topo, a, b)
                    pcie = min((r for r in (gpu_pcie_rate(topo, a).gbps, gpu_pcie_rate(topo, b).gbps)
                                if r is not None), default=None)
                    if pcie is not None and low <= PCIE_RATE_MARGIN * pcie:
                        measured = Judgement(
                            DEGRADED, "link", "slow", f"NVLinks up but copies at PCIe/staged rate {low:.1f} GB/s",
                            cause=(f"NVML reports {pair.nvlink_count or lc.nvlinks} NVLink(s) on the pair, but its "
                                   f"copies reach {low:.1f} GB/s, at most {PCIE_RATE_MARGIN:g}x the PCIe rate "
                                   f"({pcie:g} GB/s theoretical): the bytes take PCIe or host memory, not NVLink"),
                            action=f"reset GPUs {a} and {b}; check their P2P status and the NVLink fabric",
                            evidence={"gbps": round(low, 2), "pcie_gbps": pcie, "nvlink_gbps": exp.gbps})
                    elif own_bench(ms) is not None:
                        measured = _against_own_bench(a, b, ms, own_bench(ms) or {}, nv)
                    elif exp.gbps is not None and low < SLOW_FRACTION * exp.gbps:
                        measured = Judgement(
                            DEGRADED, "link", "slow", f"copies at {low:.1f} GB/s, under half of {exp.gbps:g}",
                            action=f"reset GPUs {a} and {b}; if it stays, service the NVLink",
                            evidence={"gbps": round(low, 2), "expected": exp.basis})
                    else:
                        against = exp.basis if exp.gbps is not None else "no NVLink rate known"
                        measured = Judgement(OK, detail=f"copies verified both ways, slowest {low:.1f} GB/s "
                                             f"(against {against})")
                elif own_bench(ms) is not None:
                    measured = _against_own_bench(a, b, ms, own_bench(ms) or {}, nv)
                else:
                    measured = Judgement(OK, detail=f"copies verified both ways, slowest {low:.1f} GB/s (a PCIe "
                                         "pair: data judged, rate not: no rate declared for it)")
            j = _worse(reported, measured) if reported.status != OK else measured
            if reported.status == OK and measured.status == OK:
                j = measured
            # a GPU's own fault explains its pairs' trouble (named once, on the GPU): a broken GPU
            # every pair of it, a GPU whose NVLinks or fabric are at fault its NVLink pairs
            for g in p:
                gj = gpu_bad[g].judgement if g in gpu_bad else None
                if gj is None or not (gj.status == BROKEN or ((nv or lost_links is not None)
                                                             and gj.scope in ("link", "fabric-manager"))):
                    continue
                if j.status in (OK, NOT_JUDGED) or STATUS_ORDER.index(gj.status) <= STATUS_ORDER.index(j.status):
                    j = Judgement(gj.status, gj.scope, gj.kind, f"GPU {g}: {gj.detail}", gj.cause, gj.action,
                                  {"explained_by": f"gpu{g}"})
            layers = {"declared": said_pair, "reported": "; ".join(reported_bits), "measured": measured_layer}
            pair_results.append(PairResult(p, str(lc), layers, j, copies))

    _localise(gpu_results, pair_results, topo)

    ar: Optional[Judgement] = None
    if allreduce_wanted:
        ms = [m for m in measurements if m.test == "collective.all_reduce"]
        ar_failed = [f for f in failures if f.group == "collectives"]
        if ar_failed:
            f0 = ar_failed[0]
            ar = Judgement(BROKEN, "node", f0.kind, f"all_reduce over the set: {f0.kind}: {f0.what}",
                           action="run `gputopo bench --tests collectives` on the pairs to localise it")
        elif ms and any(m.wrong for m in ms):
            ar = Judgement(BROKEN, "node", "corrupt", "all_reduce over the set gave wrong data",
                           action="run `gputopo bench --tests collectives` on the pairs to localise it")
        elif ms:
            algbw = _gbps(ms[0])
            ar = Judgement(OK, detail=f"all_reduce over {n} GPUs verified"
                           + (f", algbw {algbw:.2f} GB/s (rate not judged)" if algbw is not None else ""))
        else:
            ar = Judgement(NOT_JUDGED, detail=allreduce_why or "not run")

    node: List[Judgement] = []
    v = GateVerdict(gpu_results, pair_results, selection, budget_s, used_s, time_s, machine=topo.machine,
                    source=topo.source, simulated=topo.simulated, fabric=fabric_name, plan=dict(plan or {}),
                    allreduce=ar, node=node)
    if n > 1 and not switch:
        v.notes.append("no NVSwitch seen: the fabric is not applicable")
    if n == 1:
        v.notes.append("one GPU: no pair, no fabric to judge (not applicable); the GPU is judged on what NVML reports")
    return v


def _against_own_bench(a: int, b: int, ms: List[Measurement], figs: Dict[str, Any], nv: bool) -> Judgement:
    """A pair's copies, each direction against the median of the machine's own bench runs at the
    same size and time source (history/query.py baseline): slow under SLOW_FRACTION of it."""
    from gputopo.fleet.gate_declared import day

    worst: Optional[Tuple[float, float, Measurement]] = None
    for m in ms:
        r = _gbps(m)
        fig = figs[str(m.direction)]
        if r is None:
            continue
        if worst is None or r / fig.median_gbps < worst[0] / worst[1]:
            worst = (r, fig.median_gbps, m)
    if worst is None:
        return Judgement(OK, detail="copies verified both ways (rate not judged: no time)")
    rate, base, m = worst
    fig = figs[str(m.direction)]
    bench = (f"this machine's own bench of {day(fig.last_s)} ({fig.runs} run(s), median {base:.1f} GB/s "
             f"{m.direction} at {m.size_bytes} B, {m.timing} time)")
    if rate < SLOW_FRACTION * base:
        return Judgement(DEGRADED, "link", "slow", f"copies at {rate:.1f} GB/s {m.direction}, under half of {bench}",
                         action=(f"reset GPUs {a} and {b}; if it stays, service the "
                                 + ("NVLink" if nv else "PCIe path")),
                         evidence={"gbps": round(rate, 2), "history_gbps": round(base, 2),
                                   "history_runs": fig.runs, "against": "history"})
    return Judgement(OK, detail=f"copies verified both ways, slowest {rate:.1f} GB/s {m.direction} (against {bench})")


def _localise(gpus: List[GpuResult], pairs: List[PairResult], topo: Topology) -> None:
    """A GPU every measured pair of which is bad, while pairs without it are good, is the part to
    blame: its pairs name it (and are not named again)."""
    measured_bad: Dict[int, List[PairResult]] = {}
    measured_all: Dict[int, List[PairResult]] = {}
    for p in pairs:
        if not p.copies and p.judgement.kind not in kinds_where(symptom="failure"):  # a hang, a crash
            continue
        if p.judgement.evidence.get("explained_by"):
            continue
        for g in p.gpus:
            measured_all.setdefault(g, []).append(p)
            if p.judgement.status in (BROKEN, DEGRADED) and p.judgement.scope in ("link", "host-path"):
                measured_bad.setdefault(g, []).append(p)
    good_elsewhere = {g: any(p.judgement.status == OK for p in pairs if g not in p.gpus) for g in measured_all}
    for r in gpus:
        g = r.index
        every = measured_all.get(g, [])
        bad = measured_bad.get(g, [])
        if len(every) >= 2 and len(bad) == len(every) and good_elsewhere.get(g):
            worst = min(bad, key=lambda p: STATUS_ORDER.index(p.judgement.status)).judgement
            smi = _smi_id(topo, g)
            r.judgement = Judgement(
                worst.status, "gpu", worst.kind, f"every measured pair of GPU {g} {worst.kind}, its other pairs fine",
                cause=(f"all {len(every)} measured pairs with GPU {g} are {worst.status} while pairs without it are "
                       "ok: the GPU (or its own link), not each link"),
                action=f"reset GPU {g} (nvidia-smi -r -i {smi}) when no job uses it; take it out meanwhile",
                evidence={"pairs": [list(p.gpus) for p in bad]})
            for p in bad:
                p.judgement.evidence["explained_by"] = f"gpu{g}"


def best_other_set(topo: Topology, findings: List[Finding], v: GateVerdict) -> Optional[Dict[str, Any]]:
    """`place`'s best set of as many GPUs as the gate checked, with the gate's broken and degraded
    GPUs and pairs marked (gputopo/report/placement.py); None when nothing is wrong."""
    if v.verdict not in ("fail", "warn"):
        return None
    from gputopo.report.placement import rank, scan_states

    states, out_gpus = scan_states(topo, findings)
    for g in v.gpus:
        if g.judgement.status == BROKEN:
            out_gpus.setdefault(g.index, f"GPU {g.index}: {g.judgement.detail}")
    for p in v.pairs:
        st = states.get(p.gpus)
        if st is None:
            continue
        if p.judgement.status == BROKEN:
            st.worse("broken", f"gate: {p.judgement.detail}")
        elif p.judgement.status == DEGRADED:
            st.worse("degraded", f"gate: {p.judgement.detail}")
    n = len(v.gpus)
    usable = [g.nvml_index for g in topo.gpus if g.nvml_index not in out_gpus]
    if n > len(usable):
        return {"gpus": None, "why": f"no other set of {n} GPU(s): only {len(usable)} of {len(topo.gpus)} are usable "
                f"({'; '.join(out_gpus.values())})"}
    ranked, _notes = rank(topo, n, states, out_gpus, set(), top=1)
    if not ranked:
        return {"gpus": None, "why": f"no set of {n} GPU(s) without a broken pair"}
    best = ranked[0]
    same = list(best.gpus) == [g.index for g in v.gpus]
    return {"gpus": list(best.gpus), "state": best.state, "worst_link_class": best.worst_class,
            "reasons": list(best.reasons),
            "why": ("the checked set is already the best of its size" if same else
                    "`gputopo place`'s ranking with the gate's broken and degraded parts marked")}
