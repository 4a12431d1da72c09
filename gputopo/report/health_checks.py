"""GPU health as findings: memory errors, repairs waiting for a reset, Xid events from the kernel
log, clocks held down by heat or power. These are facts about one GPU, read by the scan; a
benchmark's corrupt or crashed pair on such a GPU is explained by them.

Kinds (finding.py): ``ecc`` (uncorrectable errors; ECC mode changing at the next reboot), ``remapped-rows``
(a row remap pending or failed), ``retired-pages`` (page retirement pending, double-bit
retirements), ``xid`` (Xid events known to mean a bad GPU or link, with their meaning: model/xid.py),
``thermal`` (hardware/thermal slowdown or power brake active).
"""

from __future__ import annotations

from typing import Any, Dict, List

from gputopo.model import Finding, NotAvailable, Topology, is_value
from gputopo.model.health import GpuHealth, xid_list
from gputopo.model.xid import xid_info
from gputopo.report.causes import REMEDY_GPU_HEALTH

REMEDY_RESET = "drain the GPU and reset it (`nvidia-smi -r -i N`) or reboot, so the pending repair takes effect"
REMEDY_RMA = "take the GPU out of service and run NVIDIA's field diagnostic; replace it (RMA) if it fails"
REMEDY_COOLING = "check airflow, fans and the power supply; `nvidia-smi -q -d PERFORMANCE` names the slowdown"
#: Clock event reasons that mean the hardware is protecting itself (not idle or a user setting).
SLOWDOWN_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown", "hw_power_brake_slowdown")


def health_findings(topo: Topology) -> List[Finding]:
    """Health findings of every GPU whose health was read, in GPU order."""
    out: List[Finding] = []
    for g in topo.gpus:
        h = g.health
        if not isinstance(h, GpuHealth):
            continue
        k = g.nvml_index
        out += _ecc(k, h) + _remapped(k, h) + _retired(k, h) + _xids(k, h) + _thermal(k, h)
    return out


def _count(d: Any, *path: str) -> int:
    for p in path:
        d = d.get(p) if isinstance(d, dict) else None
    return d if is_value(d) and isinstance(d, int) else 0


def _ecc(k: int, h: GpuHealth) -> List[Finding]:
    out = []
    vol = _count(h.ecc_errors, "volatile", "uncorrected")
    agg = _count(h.ecc_errors, "aggregate", "uncorrected")
    if vol or agg:
        when = (f"{vol} since the driver loaded" + (f", {agg} over its life" if agg != vol else "")
                if vol else f"{agg} over its life, none since the driver loaded")
        out.append(Finding(
            "ecc", "error" if vol else "warning",
            f"GPU {k}: uncorrectable ECC errors in its memory ({when}): data it held was lost; "
            "results computed on it may be wrong",
            gpus=[k], evidence={"ecc_errors": h.ecc_errors},
            cause="failing GPU memory cells (DRAM/HBM); rows or pages are being repaired",
            remedies=[REMEDY_RESET, REMEDY_GPU_HEALTH, REMEDY_RMA]))
    if is_value(h.ecc_mode_pending) and is_value(h.ecc_mode_current) and h.ecc_mode_pending != h.ecc_mode_current:
        out.append(Finding(
            "ecc", "info", f"GPU {k}: ECC is {h.ecc_mode_current} now and becomes {h.ecc_mode_pending} "
            "after the next reboot", gpus=[k],
            evidence={"ecc_mode_current": h.ecc_mode_current, "ecc_mode_pending": h.ecc_mode_pending}))
    return out


def _remapped(k: int, h: GpuHealth) -> List[Finding]:
    r = h.remapped_rows
    if not isinstance(r, dict):
        return []
    if r.get("failure"):
        return [Finding(
            "remapped-rows", "error",
            f"GPU {k}: row remapping FAILED: a bad memory row could not be replaced; this GPU's memory "
            "cannot be trusted", gpus=[k], evidence={"remapped_rows": r},
            cause="more failing rows than the memory bank has spares", remedies=[REMEDY_RMA])]
    if r.get("pending"):
        return [Finding(
            "remapped-rows", "warning",
            f"GPU {k}: a memory row remap is pending ({r.get('uncorrected', 0)} rows remapped for "
            f"uncorrectable, {r.get('corrected', 0)} for correctable errors): the bad row stays in use "
            "until the GPU is reset", gpus=[k], evidence={"remapped_rows": r},
            cause="an ECC error marked a memory row for replacement", remedies=[REMEDY_RESET])]
    return []


def _retired(k: int, h: GpuHealth) -> List[Finding]:
    pages = h.retired_pages if isinstance(h.retired_pages, dict) else {}
    dbe = _count(pages, "double_bit")
    if h.retired_pages_pending is True:
        return [Finding(
            "retired-pages", "warning",
            f"GPU {k}: memory page retirement pending ({_count(pages, 'single_bit')} single-bit, {dbe} "
            "double-bit pages retired): the bad pages stay in use until the driver reloads",
            gpus=[k], evidence={"retired_pages": pages, "pending": True},
            cause="ECC errors marked memory pages for retirement", remedies=[REMEDY_RESET])]
    if dbe:
        return [Finding(
            "retired-pages", "info", f"GPU {k}: {dbe} memory page(s) retired after double-bit ECC errors",
            gpus=[k], evidence={"retired_pages": pages, "pending": False},
            remedies=["watch whether the count grows; NVIDIA's field diagnostic decides on replacement"])]
    return []


def _xids(k: int, h: GpuHealth) -> List[Finding]:
    """One finding per Xid code seen for the GPU: hardware ones at their severity, others as info.
    An Xid the driver says was "caused by previous Xid N" is judged as its cause when N is a
    hardware Xid (a benign-looking channel cleanup after an NVLink fault is that fault's)."""
    by_code: Dict[int, list] = {}
    for e in xid_list(h):
        by_code.setdefault(e.xid, []).append(e)
    out = []
    for code, events in sorted(by_code.items()):
        info = xid_info(code)
        causes = sorted({e.caused_by for e in events if e.caused_by is not None})
        hardware_causes = [c for c in causes if xid_info(c).hardware]
        judged = xid_info(hardware_causes[0]) if not info.hardware and hardware_causes else info
        times = f" ({len(events)} times)" if len(events) > 1 else ""
        because = "".join(f"; caused by previous Xid {c}: {xid_info(c).meaning}" for c in causes)
        out.append(Finding(
            "xid", judged.severity if judged.hardware else "info",
            f"GPU {k}: Xid {code} in the kernel log{times}: {info.meaning}{because}",
            gpus=[k], evidence={"xid": code, "events": [e.to_json() for e in events[-5:]],
                                "count": len(events), **({"caused_by": causes} if causes else {})},
            cause=judged.meaning if judged.hardware else None,
            remedies=([REMEDY_GPU_HEALTH] + ([REMEDY_RMA] if judged.severity == "error" else []))
            if judged.hardware else []))
    return out


def _thermal(k: int, h: GpuHealth) -> List[Finding]:
    reasons = h.clock_event_reasons if isinstance(h.clock_event_reasons, list) else []
    active = [r for r in reasons if r in SLOWDOWN_REASONS]
    if not active:
        return []
    temp = f", {h.temperature_c} °C" if is_value(h.temperature_c) else ""
    power = (f", {h.power_w:g} of {h.power_limit_w:g} W" if is_value(h.power_w) and is_value(h.power_limit_w)
             else "")
    return [Finding(
        "thermal", "warning",
        f"GPU {k}: clocks held down by {', '.join(active)}{temp}{power}: its measured rates are not its best",
        gpus=[k], evidence={"clock_event_reasons": reasons, "temperature_c": h.temperature_c,
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
    codes = sorted({e.xid for e in xid_list(h) if xid_info(e.xid).hardware})
    if codes:
        flags.append("Xid " + ",".join(map(str, codes)))
    if _slowdowns(h):
        flags.append("slowdown")
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
