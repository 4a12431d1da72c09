"""GPU health as findings: memory errors, repairs waiting for a reset, Xid events from the kernel
log, clocks held down by heat or power. These are facts about one GPU, read by the scan; a
benchmark's corrupt or crashed pair on such a GPU is explained by them.

Kinds (finding.py): ``ecc`` (uncorrectable errors; ECC mode changing at the next reboot), ``remapped-rows``
(a row remap pending or failed), ``retired-pages`` (page retirement pending, double-bit
retirements), ``xid`` (Xid events known to mean a bad GPU or link, with their meaning: model/xid.py),
``thermal`` (hardware/thermal slowdown or power brake active).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, List

from gputopo.model import Finding, NotAvailable, Topology, is_value
from gputopo.model.bus_id import try_parse
from gputopo.model.health import KERNEL_LOG_NUMBERED, GpuHealth, xid_list
from gputopo.model.xid import (CATALOG_ACTIONS, NVLINK5_PROMOTABLE, NVLINK5_XIDS, RECOVERY_ACTIONS, nvlink5_fatality,
                               nvlink5_unit_status, recovery_action, xid63_by_form, xid_info)
from gputopo.report.why.causes import REMEDY_GPU_HEALTH

REMEDY_RESET = "drain the GPU and reset it (`nvidia-smi -r -i N`) or reboot, so the pending repair takes effect"
REMEDY_RMA = "take the GPU out of service and run NVIDIA's field diagnostic; replace it (RMA) if it fails"
#: A Nonfatal Xid 144-150 line NVIDIA's decode asks nothing of the GPU for (IGNORE, or XID_154_EVAL).
REMEDY_NVLINK5_NONFATAL = ("nothing is needed on the GPU now: NVIDIA's decode of this Nonfatal line asks for no action, "
                           "or for what an Xid 154 that follows names (NVIDIA's Xid catalog, XID 144-150 Decode)")
#: A pending row remap where NVIDIA says work is unaffected until the reset applies it.
REMEDY_REMAP_PENDING = ("nothing is needed now: reset the GPU at its next planned drain (`nvidia-smi -r -i N`) so "
                        "the remap takes effect; reset it before a live VM is migrated onto it (NVIDIA's GPU memory "
                        "error management guide)")
#: Chips NVIDIA's GPU memory error guide lists with error containment and dynamic page offlining
#: (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/supported-gpus.html): GA100 (A100, A800, A30),
#: GH100 (H100, H800, H20, H200, GH200) and, in its current table, Blackwell GB10x (B100, B200,
#: GB200). GA10x and AD10x parts remap rows too but are listed without either feature.
_PAGE_OFFLINING = re.compile(r"\b(A100|A800|A30|H100|H800|H20|H200|GH200|B100|B200|GB200)\b")
REMEDY_COOLING = "check airflow, fans and the power supply; `nvidia-smi -q -d PERFORMANCE` names the slowdown"
#: Clock event reasons that mean the hardware is protecting itself (not idle or a user setting).
SLOWDOWN_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown", "hw_power_brake_slowdown")
#: Those that name heat or the power supply. The bare ``hw_slowdown`` bit does not: nvml.h (DCGM's
#: field constants, docs.nvidia.com/datacenter/dcgm/latest/dcgm-api/dcgm-api-field-constants.html)
#: says it "may be also reported during PState or clock change".
NAMED_SLOWDOWNS = ("hw_thermal_slowdown", "sw_thermal_slowdown", "hw_power_brake_slowdown")
REMEDY_READ_AGAIN = ("read it again (`nvidia-smi -q -d PERFORMANCE`); if HW Slowdown stays set, the power draw is "
                     "too high and Fast Trigger protection is cutting the clocks: check the power supply and cabling")


@dataclass(frozen=True)
class Who:
    """How a health finding names its GPU so that the operator finds the card (``text``), the
    facts for its evidence, and the ``-i`` of an `nvidia-smi` command for it."""

    index: int
    text: str  # "GPU 2 (0000:1b:00.0)" | "GPU at 0000:a1:00.0 on node4"
    evidence: Dict[str, Any]  # {"bus_id": ...} (+ "host", + "place" for the tables' GPUs column)
    smi_id: str  # "00000000:1B:00.0" (nvidia-smi -i takes a bus id) or the index


def gpu_who(topo: Topology, g: Any) -> Who:
    """The NVML index with the bus id (``GPU 2 (0000:1b:00.0)``); a GPU numbered only by a kernel
    log's bus order (KERNEL_LOG_NUMBERED: its number is no index nvidia-smi knows) by its bus id
    alone, with the log's host when it names one (``GPU at 0000:a1:00.0 on node4``)."""
    addr = try_parse(str(g.pci_bus_id)) if is_value(g.pci_bus_id) else None
    bus = addr.lspci if addr is not None else None
    evidence: Dict[str, Any] = {"bus_id": bus} if bus else {}
    smi_id = addr.nvml if addr is not None else str(g.nvml_index)
    if topo.source == KERNEL_LOG_NUMBERED and bus:
        host = str(topo.host.hostname) if is_value(topo.host.hostname) and topo.host.hostname else None
        on = f" on {host}" if host else ""
        evidence.update({"host": host} if host else {})
        evidence["place"] = bus + on
        return Who(g.nvml_index, f"GPU at {bus}{on}", evidence, smi_id)
    return Who(g.nvml_index, f"GPU {g.nvml_index}" + (f" ({bus})" if bus else ""), evidence, smi_id)


def health_findings(topo: Topology) -> List[Finding]:
    """Health findings of every GPU whose health was read, in GPU order, then those of the kernel
    log the scan read (kernel_log_findings.py)."""
    out: List[Finding] = []
    for g in topo.gpus:
        h = g.health
        if not isinstance(h, GpuHealth):
            continue
        w = gpu_who(topo, g)
        out += _ecc(w, h, g.name) + _remapped(w, h, g.name) + _retired(w, h) + _xids(w, h) + _thermal(w, h)
    # The kernel log's driver lines that are no Xid and its unreadable lines, by the rules `import
    # kernel-log` uses (a scan's log: host.kernel_log_facts; an import's is judged from kernel_log.json).
    from gputopo.report.kernel_log_findings import scan_kernel_log_findings

    return out + scan_kernel_log_findings(topo)


def _count(d: Any, *path: str) -> int:
    for p in path:
        d = d.get(p) if isinstance(d, dict) else None
    return d if is_value(d) and isinstance(d, int) else 0


def _ecc(w: Who, h: GpuHealth, name: Any = None) -> List[Finding]:
    """Uncorrectable ECC errors. NVIDIA's memory error guide (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/):
    on A100/H100-class GPUs (error containment, dynamic page offlining: ``offlines_pages``) the
    impact "will be limited to the applications that encounter the error", other workloads run on,
    new ones launch, and they "do not require a GPU reset when memory errors occur": a warning,
    with the reset only to apply a pending row remap when convenient. Before them a double-bit
    error stops new contexts until the page is mapped out at the next reattachment
    (docs.nvidia.com/deploy/dynamic-page-retirement/): errors since the driver loaded are an error
    with the reset first. Errors only over the GPU's life are a warning."""
    out = []
    vol = _count(h.ecc_errors, "volatile", "uncorrected")
    agg = _count(h.ecc_errors, "aggregate", "uncorrected")
    if vol or agg:
        # Volatile counts start at the driver's load; with persistence mode off the driver unloads
        # when no client holds it (nvidia-smi --help-query-gpu), so it may have loaded for this scan.
        unpersisted = (", but persistence mode is off, so the driver may have loaded for this scan"
                       if h.persistence_mode == "disabled" else "")
        when = (f"{vol} since the driver loaded" + (f", {agg} over its life" if agg != vol else "")
                if vol else f"{agg} over its life, none since the driver loaded{unpersisted}")
        contained = offlines_pages(name)
        if contained:
            what = ("the data hit was lost and the work that read it was stopped; NVIDIA: on this A100/H100-class "
                    "GPU other work runs on, new work can start and no reset is needed for the error itself")
        else:
            what = ("the data hit was lost and the work that read it was stopped (NVIDIA: detected, not corrected; "
                    "without error containment all work on the GPU, and new work waits for the reset)")
        if _repair_waits(h) and contained:
            first = [REMEDY_REMAP_PENDING.replace("-i N", f"-i {w.smi_id}")]
        elif _repair_waits(h) or (vol and not contained):
            first = [REMEDY_RESET]
        else:
            first = []
        out.append(Finding(
            "ecc", "error" if vol and not contained else "warning",
            f"{w.text}: uncorrectable ECC errors in its memory ({when}): {what}",
            gpus=[w.index], evidence={**w.evidence, "ecc_errors": h.ecc_errors},
            cause="failing GPU memory cells (DRAM/HBM); rows or pages are being repaired",
            remedies=first + [REMEDY_GPU_HEALTH, REMEDY_RMA]))
    if is_value(h.ecc_mode_pending) and is_value(h.ecc_mode_current) and h.ecc_mode_pending != h.ecc_mode_current:
        out.append(Finding(
            "ecc", "info", f"{w.text}: ECC is {h.ecc_mode_current} now and becomes {h.ecc_mode_pending} "
            "after the next reboot", gpus=[w.index],
            evidence={**w.evidence, "ecc_mode_current": h.ecc_mode_current, "ecc_mode_pending": h.ecc_mode_pending}))
    return out


def offlines_pages(name: Any) -> bool:
    """Whether NVIDIA's memory error guide lists the GPU's chip with dynamic page offlining and
    error containment (``_PAGE_OFFLINING``), by its NVML name."""
    return is_value(name) and _PAGE_OFFLINING.search(str(name).upper()) is not None


def _remapped(w: Who, h: GpuHealth, name: Any = None) -> List[Finding]:
    """The row remapper's flags as NVIDIA's GPU memory error management guide reads them
    (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html and
    .../rma-policy-thresholds-for-row-remapping.html).

    Failure: set by an uncorrectable error on a bank that already has eight rows remapped for
    uncorrectable errors, on a row already remapped, or after 512 such remaps; NVIDIA's RMA
    criterion once its field diagnostic validates it: an error.

    Pending: "row-remapping will happen at the next GPU reset. Even with the flag set, unaffected
    applications can continue running without affecting accuracy and performance, and new
    workloads can be launched" (nvmlDeviceGetRemappedRows: "A pending remapping won't affect future
    work on the GPU since error-containment and dynamic page blacklisting will take care of
    that"). Info on chips the guide lists with those features (the GPU waits for a reset, which
    its health cell still says); a warning on others, where gputopo cannot say the bad memory is
    kept out of use until the reset."""
    r = h.remapped_rows
    if not isinstance(r, dict):
        return []
    counts = f"{r.get('uncorrected', 0)} rows remapped for uncorrectable, {r.get('corrected', 0)} for correctable errors"
    if r.get("failure"):
        return [Finding(
            "remapped-rows", "error",
            f"{w.text}: row remapping FAILED ({counts}): a bad memory row could not be replaced; NVIDIA counts "
            "this flag as its RMA criterion once its field diagnostic confirms it",
            gpus=[w.index], evidence={**w.evidence, "remapped_rows": r},
            cause=("an uncorrectable error on a row already remapped, or on a bank that already has eight rows "
                   "remapped for uncorrectable errors, or after 512 such remaps (NVIDIA's RMA policy)"),
            remedies=[REMEDY_RMA])]
    if r.get("pending"):
        if offlines_pages(name):
            return [Finding(
                "remapped-rows", "info",
                f"{w.text}: a memory row remap is pending ({counts}): it takes effect at the GPU's next reset; "
                "until then running work is unaffected and new work can start (NVIDIA: error containment and "
                "dynamic page offlining keep the bad memory out of use)",
                gpus=[w.index], evidence={**w.evidence, "remapped_rows": r},
                cause="an ECC error marked a memory row for replacement",
                remedies=[REMEDY_REMAP_PENDING.replace("-i N", f"-i {w.smi_id}")])]
        return [Finding(
            "remapped-rows", "warning",
            f"{w.text}: a memory row remap is pending ({counts}): it takes effect at the GPU's next reset; "
            "NVIDIA's memory error guide lists dynamic page offlining only for A100/H100-class and Blackwell "
            "data-centre chips, so gputopo cannot say this GPU keeps the bad memory out of use until then",
            gpus=[w.index], evidence={**w.evidence, "remapped_rows": r},
            cause="an ECC error marked a memory row for replacement", remedies=[REMEDY_RESET])]
    return []


def _repair_waits(h: GpuHealth) -> bool:
    """A row remap or a page retirement waits for the GPU's next reset."""
    r = h.remapped_rows if isinstance(h.remapped_rows, dict) else {}
    return bool(r.get("pending")) or h.retired_pages_pending is True


def _retired(w: Who, h: GpuHealth) -> List[Finding]:
    """Page retirement (before Ampere). Pending: nvidia-smi's retired_pages.pending, "pages that are
    pending retirement can still be allocated, and may cause further reliability issues"; the page
    is mapped out at the GPU's next reattachment (docs.nvidia.com/deploy/dynamic-page-retirement/:
    Xid 63 "reload the driver to activate"): a warning with the reset as remedy."""
    pages = h.retired_pages if isinstance(h.retired_pages, dict) else {}
    dbe = _count(pages, "double_bit")
    if h.retired_pages_pending is True:
        return [Finding(
            "retired-pages", "warning",
            f"{w.text}: memory page retirement pending ({_count(pages, 'single_bit')} single-bit, {dbe} "
            "double-bit pages retired): the bad pages can still be allocated until the GPU is reset or the "
            "driver reloaded",
            gpus=[w.index], evidence={**w.evidence, "retired_pages": pages, "pending": True},
            cause="ECC errors marked memory pages for retirement", remedies=[REMEDY_RESET])]
    if dbe:
        return [Finding(
            "retired-pages", "info", f"{w.text}: {dbe} memory page(s) retired after double-bit ECC errors",
            gpus=[w.index], evidence={**w.evidence, "retired_pages": pages, "pending": False},
            remedies=["watch whether the count grows; NVIDIA's field diagnostic decides on replacement"])]
    return []


def _xids(w: Who, h: GpuHealth) -> List[Finding]:
    """One finding per Xid code seen for the GPU: hardware ones at their severity, others as info,
    each with the remedies NVIDIA's Xid catalog gives for it, in its order (model/xid.py). An Xid
    the driver says was "caused by previous Xid N" is judged as its cause when N is a hardware Xid
    (a benign-looking channel cleanup after an NVLink fault is that fault's); an Xid said to be
    caused by its own code (a second round of Xid 45 cleanups) has no other cause in that. Xid 154
    is judged by the recovery action it names (_xid154); Xid 63 by its form (xid63_by_form: the
    pre-Ampere page retirement line asks for a reset or reboot, the row-remapping one nothing now)."""
    all_events = xid_list(h)
    by_code: Dict[int, list] = {}
    for e in all_events:
        by_code.setdefault(e.xid, []).append(e)
    out = []
    if 154 in by_code:  # first: it says what the GPU needs now, and the story tells a GPU's first finding
        out.append(_xid154(w, by_code[154], all_events))
    for code, events in sorted(by_code.items()):
        if code == 154:
            continue
        info = xid63_by_form([e.text for e in events]) if code == 63 else xid_info(code)
        causes = sorted({e.caused_by for e in events if e.caused_by is not None and e.caused_by != code})
        hardware_causes = [c for c in causes if xid_info(c).hardware]
        judged = xid_info(hardware_causes[0]) if not info.hardware and hardware_causes else info
        fatality, said = _nvlink5_fatality(code, events)
        if fatality == "Fatal":  # the catalog's decode: every Fatal / Link Fatal row asks RESET_GPU
            judged = judged._replace(severity="error", actions=("RESET_GPU",) + judged.actions)
        elif fatality == "Nonfatal" and _nvlink5_settled(events):
            judged = judged._replace(severity="info", advice=(REMEDY_NVLINK5_NONFATAL,))
        times = f" ({len(events)} times)" if len(events) > 1 else ""
        because = "".join(f"; caused by previous Xid {c}: {xid_info(c).meaning}" for c in causes)
        # The immediate bucket, what NVIDIA's text for the code adds (94: reset when convenient),
        # then the investigatory bucket.
        remedies = _catalog_remedies(judged.actions[:1], w) + [a.replace("BUS_ID", w.smi_id) for a in judged.advice]
        remedies += [r for r in _catalog_remedies(judged.actions[1:], w) if r not in remedies]
        # A code whose catalog row names no action (167, 169) or gputopo has not checked: the generic
        # check; one whose row has only a sentence (163-168, 170-172) has it as its advice.
        if not judged.actions and not judged.advice and judged.hardware and judged.severity != "info":
            remedies = [REMEDY_GPU_HEALTH] + ([REMEDY_RMA] if judged.severity == "error" else [])
        out.append(Finding(
            "xid", judged.severity if judged.hardware else "info",
            f"{w.text}: Xid {code} in the kernel log{times}: {info.meaning}{said}{because}",
            gpus=[w.index], evidence={**w.evidence, "xid": code, "events": [e.to_json() for e in events[-5:]],
                                      "count": len(events), **({"caused_by": causes} if causes else {}),
                                      **({"driver_severity": fatality} if fatality else {}),
                                      **({"catalog_actions": list(judged.actions)} if judged.actions else {})},
            cause=judged.meaning if judged.hardware else None, remedies=remedies))
    return out


def _nvlink5_settled(events: list) -> bool:
    """Every Nonfatal line shows its unit and errorStatus, and none is one the catalog's decode
    may promote to Fatal (NVLINK5_PROMOTABLE): NVIDIA asks nothing of the GPU for it."""
    shown = [nvlink5_unit_status(e.text) for e in events]
    return all(s is not None and s not in NVLINK5_PROMOTABLE for s in shown)


def _nvlink5_fatality(code: int, events: list):
    """For the Blackwell NVLink Xids 144-150: "Fatal" when any of the GPU's lines says Fatal,
    "Nonfatal" when every line says Nonfatal, else None; with the words the message adds.
    NVIDIA's Xid catalog ("XID 144-150 Decode"): Fatal and Link Fatal rows need the GPU reset
    (a Link Fatal one first drains, then the GPU is "reset required"); Non-fatal rows ask for
    nothing or for what a following Xid 154 names."""
    if code not in NVLINK5_XIDS:
        return None, ""
    words = [nvlink5_fatality(e.text) for e in events]
    if "Fatal" in words:
        return "Fatal", ": the driver's line says Fatal (NVIDIA's Xid catalog: the GPU needs a reset)"
    if words and all(wd == "Nonfatal" for wd in words):
        return "Nonfatal", ": the driver's line says Nonfatal"
    return None, ""


def _catalog_remedies(actions, w: Who) -> List[str]:
    """The catalog's resolution buckets in words, immediate first, IGNORE and repeats left out."""
    out: List[str] = []
    for a in actions:
        text = CATALOG_ACTIONS.get(a)
        if text is not None and text not in out:
            out.append(text.replace("BUS_ID", w.smi_id))
    return out


def _xid154(w: Who, events: list, all_events: list) -> Finding:
    """Xid 154 says which recovery the GPU needs now (NVIDIA's Xid catalog: it summarises the
    recovery of the Xids before it): 'GPU Reset Required' and 'Node Reboot Required' mean the GPU
    cannot be used until that is done (error); 'Drain P2P' and 'Drain and Reset' a warning;
    'None' (a recovery done) info. The last one the log holds is the GPU's state."""
    named = [(k, recovery_action(e.text)) for k, e in enumerate(all_events) if e.xid == 154]
    known = [(k, a) for k, a in named if a is not None]
    times = f" ({len(events)} times)" if len(events) > 1 else ""
    evidence = {**w.evidence, "xid": 154, "events": [e.to_json() for e in events[-5:]], "count": len(events)}
    last = known[-1] if known else None
    entry = RECOVERY_ACTIONS.get(last[1]) if last else None
    if last is None or entry is None:
        info = xid_info(154)
        said = f" (to {last[1]!r}, an action gputopo does not know)" if last else ""
        return Finding("xid", info.severity, f"{w.text}: Xid 154 in the kernel log{times}: {info.meaning}{said}",
                       gpus=[w.index], evidence=evidence, cause=info.meaning, remedies=[REMEDY_GPU_HEALTH])
    index, action = last
    before = list(dict.fromkeys(e.xid for e in all_events[:index] if e.xid != 154))
    after = ("(after " + ", ".join(f"Xid {c}: {xid_info(c).meaning}" for c in before) + ")") if before else ""
    todo, usable = entry
    evidence["recovery_action"] = action
    if before:
        evidence["after_xids"] = before
    if action == "None":
        return Finding("xid", "info", f"{w.text}: Xid 154 in the kernel log{times}: the driver set the GPU's "
                       f"recovery action to 'None' {after}: no recovery is pending".replace(" :", ":"),
                       gpus=[w.index], evidence=evidence)
    what = ("the GPU cannot be used until that is done" if not usable
            else "the GPU keeps running, but needs this before it is trusted again")
    # The recovery first, then what the catalog asks to find out about the Xids it follows.
    remedies = [todo.replace("BUS_ID", w.smi_id)]
    for c in before:
        remedies += [r for r in _catalog_remedies(xid_info(c).actions[1:], w) if r not in remedies]
    hardware = [xid_info(c).meaning for c in before if xid_info(c).hardware]
    return Finding(
        "xid", "error" if not usable else "warning",
        f"{w.text}: Xid 154 in the kernel log{times}: the driver says the GPU needs '{action}' {after}: "
        f"{what}".replace(" :", ":"),
        gpus=[w.index], evidence=evidence,
        cause="; ".join(hardware) if hardware else f"the driver's recovery action for the GPU: {action}",
        remedies=remedies)


def _thermal(w: Who, h: GpuHealth) -> List[Finding]:
    reasons = h.clock_event_reasons if isinstance(h.clock_event_reasons, list) else []
    active = [r for r in reasons if r in SLOWDOWN_REASONS]
    if not active:
        return []
    temp = f", {h.temperature_c} °C" if is_value(h.temperature_c) else ""
    power = (f", {h.power_w:g} of {h.power_limit_w:g} W" if is_value(h.power_w) and is_value(h.power_limit_w)
             else "")
    if not any(r in NAMED_SLOWDOWNS for r in active):  # hw_slowdown alone
        return [Finding(
            "thermal", "info",
            f"{w.text}: HW Slowdown reported without a thermal or power-brake reason{temp}{power}: NVIDIA says "
            "this bit may also be reported during a PState or clock change, so one reading is no proof the "
            "clocks are held down",
            gpus=[w.index], evidence={**w.evidence, "clock_event_reasons": reasons, "temperature_c": h.temperature_c,
                                "power_w": h.power_w, "power_limit_w": h.power_limit_w},
            remedies=[REMEDY_READ_AGAIN])]
    return [Finding(
        "thermal", "warning",
        f"{w.text}: clocks held down by {', '.join(active)}{temp}{power}: its measured rates are not its best",
        gpus=[w.index], evidence={**w.evidence, "clock_event_reasons": reasons, "temperature_c": h.temperature_c,
                            "power_w": h.power_w, "power_limit_w": h.power_limit_w},
        cause="the GPU protects itself from heat or from its power supply", remedies=[REMEDY_COOLING])]


# --------------------------------------------------------------------------- scan table cells


#: The scan's health table (scan_view.py), one cell each from :func:`health_cells`.
HEALTH_COLUMNS = ("NVML", "temp", "power (limit)", "persist", "ECC", "uncorr. (vol/agg)",
                  "memory repair", "clocks held by", "Xid", "health")


def _na(v: Any, unit: str = "") -> str:
    return f"{v:g}{unit}" if isinstance(v, (int, float)) and is_value(v) and not isinstance(v, bool) else (
        "ERR" if not is_value(v) and not isinstance(v, NotAvailable) else "n/a")


def _repair_cell(h: GpuHealth) -> str:
    r, pages = h.remapped_rows, h.retired_pages
    if isinstance(r, dict):
        state = "FAILED" if r.get("failure") else "pending" if r.get("pending") else "ok"
        return f"rows {r.get('corrected', 0)}c/{r.get('uncorrected', 0)}u {state}"
    if isinstance(pages, dict):
        state = "pending" if h.retired_pages_pending is True else "ok"
        return f"pages {_count(pages, 'single_bit')}sb/{_count(pages, 'double_bit')}db {state}"
    return "n/a"


def health_flags(h: GpuHealth) -> List[str]:
    """The problems of one GPU in a few words each (``"ECC UE 2"``, ``"remap pending"``)."""
    flags = []
    ue = _count(h.ecc_errors, "volatile", "uncorrected") or _count(h.ecc_errors, "aggregate", "uncorrected")
    if ue:
        flags.append(f"ECC UE {ue}")
    r = h.remapped_rows if isinstance(h.remapped_rows, dict) else {}
    if r.get("failure"):
        flags.append("remap FAILED")
    elif r.get("pending"):
        flags.append("remap pending")
    if h.retired_pages_pending is True:
        flags.append("retire pending")
    # Xids that are a problem: not those NVIDIA asks nothing of the GPU for (63, 92: info); the
    # Xid column lists every code.
    codes = sorted({e.xid for e in xid_list(h) if xid_info(e.xid).hardware and xid_info(e.xid).severity != "info"})
    if codes:
        flags.append("Xid " + ",".join(map(str, codes)))
    slow = _slowdowns(h)
    if any(r in NAMED_SLOWDOWNS for r in slow):
        flags.append("slowdown")
    elif slow:  # hw_slowdown alone: may be a PState or clock change (NAMED_SLOWDOWNS)
        flags.append("hw_slowdown (read again)")
    return flags


def _slowdowns(h: GpuHealth) -> List[str]:
    reasons = h.clock_event_reasons if isinstance(h.clock_event_reasons, list) else []
    return [r for r in reasons if r in SLOWDOWN_REASONS]


def health_cells(h: Any) -> List[str]:
    """One row of the scan's health table (HEALTH_COLUMNS after NVML): figures with their units,
    ``n/a`` where the GPU or driver cannot say, and the verdict: ``ok`` or the problems."""
    if not isinstance(h, GpuHealth):
        why = getattr(h, "reason", None) or getattr(h, "error", None) or "not read"
        return ["n/a"] * (len(HEALTH_COLUMNS) - 2) + [f"n/a ({why})"]
    power = f"{_na(h.power_w, ' W')} ({_na(h.power_limit_w, ' W')})"
    vol = _count(h.ecc_errors, "volatile", "uncorrected")
    agg = _count(h.ecc_errors, "aggregate", "uncorrected")
    ecc_counts = f"{vol}/{agg}" if isinstance(h.ecc_errors, dict) else "n/a"
    xids = xid_list(h)
    xid = (",".join(map(str, sorted({e.xid for e in xids}))) or "none") if isinstance(h.xid_events, list) else "n/a"
    clocks = ", ".join(_slowdowns(h)) or ("-" if isinstance(h.clock_event_reasons, list) else "n/a")
    return [_na(h.temperature_c, " °C"), power, show_state(h.persistence_mode), show_state(h.ecc_mode_current),
            ecc_counts, _repair_cell(h), clocks, xid, ", ".join(health_flags(h)) or "ok"]


def show_state(v: Any) -> str:
    return {"enabled": "on", "disabled": "off"}.get(v, "n/a") if is_value(v) else "n/a"


def kernel_log_line(topo: Topology) -> str:
    """Where the Xid events came from, for the scan: ``kernel log: dmesg (3 Xid lines)``."""
    src = topo.host.kernel_log
    if not is_value(src):
        return f"kernel log: n/a ({getattr(src, 'reason', 'not read')})"
    unmatched = topo.host.xid_unmatched or {}
    n = sum(len(xid_list(g.health)) for g in topo.gpus)
    loose = {bus: u for bus, u in unmatched.items() if u.get("attributed_to_gpu") is None}
    parts = [f"{n} Xid line(s) for these GPUs"]
    parts += [f"bus {bus}'s attributed to GPU {u['attributed_to_gpu']}, whose bus id NVML cannot read"
              for bus, u in unmatched.items() if u.get("attributed_to_gpu") is not None]
    if loose:
        parts.append(f"{sum(len(u.get('events', [])) for u in loose.values())} more for PCI bus(es) no GPU "
                     f"answers on: {', '.join(loose)}")
    return f"kernel log: {src} ({'; '.join(parts)})"
