"""Read each GPU's health through NVML (nvml_query.query) and the kernel log (kernel_log.py).

NVML calls and what they answer (nvidia-ml-py's pynvml.py):

- ``nvmlDeviceGetEccMode`` -> [current, pending] enable states; counts from
  ``nvmlDeviceGetTotalEccErrors(h, errorType, counterType)``, errorType 0 corrected /
  1 uncorrected, counterType 0 volatile (since driver load) / 1 aggregate (GPU lifetime); not
  asked when ECC mode is unsupported (consumer GPUs) or off.
- ``nvmlDeviceGetRetiredPages(h, cause)`` -> page addresses, cause 0 multiple single-bit /
  1 double-bit; ``nvmlDeviceGetRetiredPagesPendingStatus`` -> 0/1 (Kepler..Volta; Ampere and
  later answer NOT_SUPPORTED and remap rows instead).
- ``nvmlDeviceGetRemappedRows`` -> (corrected rows, uncorrected rows, pending, failure).
- ``nvmlDeviceGetCurrentClocksEventReasons`` (driver 535+, bindings 12.535+) else the older
  ``nvmlDeviceGetCurrentClocksThrottleReasons`` -> bit mask, bits as nvmlClocksEventReason*.
- ``nvmlDeviceGetTemperature(h, 0)`` (GPU sensor) in °C; ``nvmlDeviceGetPowerUsage`` and
  ``nvmlDeviceGetEnforcedPowerLimit`` in milliwatts; ``nvmlDeviceGetPersistenceMode`` 0/1.

A GPU lost while its health is read gets ``health = Failed(...)``; the others are read fully. A
GPU NVML had already lost has every NVML value NotAvailable("GPU lost") and still gets the Xid
events of its bus id (Xid 79 says why it is gone).
"""

from __future__ import annotations

from typing import Any, Dict, List

from gputopo.model.health import GpuHealth
from gputopo.model.topology import Topology
from gputopo.model.values import Failed, NotAvailable, is_value
from gputopo.probe.nvml_query import GpuLost, query

#: nvmlClocksEventReason* / nvmlClocksThrottleReason* bits -> names: every bit pynvml defines
#: (nvidia-ml-py 13: nvmlClocksEventReasonGpuIdle = 0x1 ... DisplayClockSetting = 0x100, and under the
#: older ThrottleReason names only, BoardLimit = 0x200, Reliability = 0x400). The one table the
#: probe, the sim and the report use; a bit none of them names is said as hex.
CLOCK_EVENT_BITS = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting", 0x200: "board_limit",
    0x400: "reliability",
}
NVML_TEMPERATURE_GPU = 0
ECC_ERROR_TYPES = {"corrected": 0, "uncorrected": 1}
ECC_COUNTERS = {"volatile": 0, "aggregate": 1}
RETIREMENT_CAUSES = {"single_bit": 0, "double_bit": 1}


def _enabled(v: Any) -> Any:
    return ("enabled" if int(v) else "disabled") if is_value(v) else v


def _watts(v: Any) -> Any:
    return round(int(v) / 1000.0, 1) if is_value(v) else v


def clock_event_names(mask: int) -> List[str]:
    """Names of the set bits of a clocks event (throttle) reason mask; unknown bits as hex."""
    names = [name for bit, name in CLOCK_EVENT_BITS.items() if mask & bit]
    rest = mask & ~sum(CLOCK_EVENT_BITS)
    return names + ([f"0x{rest:x}"] if rest else [])


def _clock_events(lib, handle) -> Any:
    mask = query(lib, "nvmlDeviceGetCurrentClocksEventReasons", handle,
                 default_reason="clocks event reasons")
    if isinstance(mask, NotAvailable) and ("bindings" in mask.reason or "driver too old" in mask.reason):
        mask = query(lib, "nvmlDeviceGetCurrentClocksThrottleReasons", handle,
                     default_reason="clocks throttle reasons")
    return clock_event_names(int(mask)) if is_value(mask) else mask


def _ecc(lib, handle, h: GpuHealth) -> None:
    modes = query(lib, "nvmlDeviceGetEccMode", handle, default_reason="ECC mode")
    if is_value(modes):
        h.ecc_mode_current, h.ecc_mode_pending = _enabled(modes[0]), _enabled(modes[1])
    else:
        h.ecc_mode_current = h.ecc_mode_pending = modes
    if h.ecc_mode_current != "enabled":
        why = modes if not is_value(modes) else NotAvailable("ECC errors: ECC is disabled on this GPU")
        h.ecc_errors = why
        return
    h.ecc_errors = {
        counter: {etype: query(lib, "nvmlDeviceGetTotalEccErrors", handle, code, ccode,
                               default_reason=f"{counter} {etype} ECC errors")
                  for etype, code in ECC_ERROR_TYPES.items()}
        for counter, ccode in ECC_COUNTERS.items()
    }


def _retired_pages(lib, handle, h: GpuHealth) -> None:
    pages: Dict[str, Any] = {}
    for cause, code in RETIREMENT_CAUSES.items():
        v = query(lib, "nvmlDeviceGetRetiredPages", handle, code, default_reason=f"{cause} retired pages")
        if isinstance(v, NotAvailable) and code == 0:
            h.retired_pages = h.retired_pages_pending = v  # not on this GPU: one reason for both
            return
        pages[cause] = len(v) if is_value(v) else v
    h.retired_pages = pages
    pending = query(lib, "nvmlDeviceGetRetiredPagesPendingStatus", handle,
                    default_reason="retired pages pending")
    h.retired_pages_pending = bool(int(pending)) if is_value(pending) else pending


def _remapped_rows(lib, handle) -> Any:
    rows = query(lib, "nvmlDeviceGetRemappedRows", handle, default_reason="remapped rows")
    if not is_value(rows):
        return rows
    corrected, uncorrected, pending, failure = (int(x) for x in rows)
    return {"corrected": corrected, "uncorrected": uncorrected, "pending": bool(pending),
            "failure": bool(failure)}


def read_gpu_health(lib, handle) -> GpuHealth:
    """Everything NVML says about one GPU's health. Raises GpuLost when the GPU is gone."""
    h = GpuHealth()
    _ecc(lib, handle, h)
    _retired_pages(lib, handle, h)
    h.remapped_rows = _remapped_rows(lib, handle)
    h.clock_event_reasons = _clock_events(lib, handle)
    temp = query(lib, "nvmlDeviceGetTemperature", handle, NVML_TEMPERATURE_GPU, default_reason="temperature")
    h.temperature_c = int(temp) if is_value(temp) else temp
    h.power_w = _watts(query(lib, "nvmlDeviceGetPowerUsage", handle, default_reason="power draw"))
    limit = query(lib, "nvmlDeviceGetEnforcedPowerLimit", handle, default_reason="power limit")
    if isinstance(limit, NotAvailable):
        limit = query(lib, "nvmlDeviceGetPowerManagementLimit", handle, default_reason="power limit")
    h.power_limit_w = _watts(limit)
    h.persistence_mode = _enabled(query(lib, "nvmlDeviceGetPersistenceMode", handle,
                                        default_reason="persistence mode"))
    h.recovery_action = read_recovery_action(lib, handle)
    h.xid_events = NotAvailable("kernel log not read")
    return h


#: nvidia-ml-py's NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (newer drivers; older ones do not answer it).
RECOVERY_ACTION_FIELD = 230


def read_recovery_action(lib, handle) -> Any:
    """The GPU's pending recovery action as NVML reports it (model/xid.py NVML_RECOVERY_ACTIONS:
    "None", "GPU Reset Required", ...), NotAvailable where the driver does not report one."""
    from gputopo.model.xid import NVML_RECOVERY_ACTIONS
    from gputopo.probe.nvml_query import nvml_field_value

    field_id = getattr(lib, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", RECOVERY_ACTION_FIELD)
    n = nvml_field_value(lib, handle, field_id, "recovery action (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)")
    if not isinstance(n, int):
        return n
    return NVML_RECOVERY_ACTIONS[n][1] if n in NVML_RECOVERY_ACTIONS else f"unknown NVML recovery action {n}"


def _lost_health() -> GpuHealth:
    na = NotAvailable("GPU lost")
    return GpuHealth(**{name: na for name in GpuHealth.__dataclass_fields__})


def read_health(lib, topo: Topology, run, saved_kernel_log=None) -> Topology:
    """Fill ``Gpu.health`` of every readable GPU of ``topo`` (in place; returned for chaining),
    with the Xid events of the kernel log read through ``run`` (one read for the machine), or of
    ``saved_kernel_log`` ((what xid_lines read, where from): ``scan --kernel-log FILE``) when given;
    what else the log says (NVIDIA driver lines that are no Xid, lines that could not be read) goes
    to ``host.kernel_log_facts``, the document `import kernel-log` writes as kernel_log.json."""
    from gputopo.probe.kernel_log import SAVED_LOG, read_xid_events
    from gputopo.probe.xid_lines import kernel_log_document

    readable = []
    for g in topo.gpus:
        if g.lost is not None:  # NVML cannot say more; the kernel log may still say why
            g.health = _lost_health()
            readable.append(g)
            continue
        try:
            handle = query(lib, "nvmlDeviceGetHandleByIndex", g.nvml_index, default_reason="device handle")
            g.health = read_gpu_health(lib, handle) if is_value(handle) else handle
        except GpuLost as exc:
            g.health = Failed(str(exc))
        if isinstance(g.health, GpuHealth):
            readable.append(g)
    bus_ids = [str(g.pci_bus_id) for g in readable if is_value(g.pci_bus_id)]
    events, source, unmatched, read = read_xid_events(bus_ids, run, saved=saved_kernel_log)
    for g in readable:
        if isinstance(events, NotAvailable):
            g.health.xid_events = events
        elif is_value(g.pci_bus_id):
            g.health.xid_events = events.get(str(g.pci_bus_id), [])
        else:
            g.health.xid_events = NotAvailable("GPU bus id unknown: Xid lines cannot be matched to it")
    # One GPU whose bus id NVML cannot read (typically lost) and Xid lines for one bus no readable
    # GPU has: those are its lines (the NVLink reader attributes links the same way).
    unknown = [g for g in readable if not is_value(g.pci_bus_id)]
    attributed = None
    if len(unknown) == 1 and len(unmatched) == 1 and not isinstance(events, NotAvailable):
        (bus, evs), = unmatched.items()
        unknown[0].health.xid_events = list(evs)
        attributed = unknown[0].nvml_index
    topo.host.kernel_log = source if source else events
    if read is not None:  # the driver lines and unreadable lines, judged by report/kernel_log_findings.py
        topo.host.kernel_log_facts = kernel_log_document(read, source.removeprefix(SAVED_LOG))
    topo.host.xid_unmatched = {bus: {"events": [e.to_json() for e in evs], "attributed_to_gpu": attributed}
                               for bus, evs in unmatched.items()}
    return topo

