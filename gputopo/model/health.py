"""A GPU's health as the scan reads it: memory errors (ECC, retired pages, remapped rows), why its
clocks are held down, temperature, power, persistence mode, and the Xid events the kernel log
holds for it.

Every field is a value or a typed NotAvailable/Failed (values.py): a consumer GPU that has no
ECC says NotAvailable("... not supported ..."), never 0, so "no errors" and "cannot know" never
look alike. Units are in the names (``temperature_c``, ``power_w``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from .values import NotAvailable, field_from_json, field_to_json

_NOT_READ = NotAvailable("not read")

#: ``Topology.source`` of a run folder made from a kernel log alone (`gputopo import kernel-log`
#: without --topo): its GPUs are numbered in the log's bus order, not NVML's, so a GPU's number
#: means nothing on the machine and its PCI bus id is how it is named (report/health_checks.py).
KERNEL_LOG_NUMBERED = "kernel-log"


@dataclass
class XidEvent:
    """One ``NVRM: Xid (PCI:0000:3b:00): 79, ...`` line of the kernel log."""

    xid: int
    text: str  # the rest of the line after the code, as the driver wrote it
    timestamp: str = ""  # the log's own time stamp ("[ 1234.567890]" or a journal date), if any
    #: "..., caused by previous Xid 149": the earlier Xid the driver says made this one.
    caused_by: Optional[int] = None

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"xid": self.xid, "text": self.text, "timestamp": self.timestamp}
        if self.caused_by is not None:
            out["caused_by"] = self.caused_by
        return out


@dataclass
class GpuHealth:
    """What NVML and the kernel log say about one GPU's health (see the module docstring)."""

    ecc_mode_current: Any = _NOT_READ  # "enabled" | "disabled"
    ecc_mode_pending: Any = _NOT_READ  # what it becomes after the next reboot
    #: {"volatile": {"corrected": n, "uncorrected": n}, "aggregate": {...}}; volatile counts
    #: since the driver loaded, aggregate over the GPU's life.
    ecc_errors: Any = _NOT_READ
    #: {"single_bit": n, "double_bit": n} pages retired per cause (pre-Ampere GPUs).
    retired_pages: Any = _NOT_READ
    retired_pages_pending: Any = _NOT_READ  # bool: retirements waiting for a reset/reboot
    #: {"corrected": n, "uncorrected": n, "pending": bool, "failure": bool} (Ampere and later).
    remapped_rows: Any = _NOT_READ
    #: names of the active clocks event (throttle) reasons, e.g. ["hw_thermal_slowdown"].
    clock_event_reasons: Any = _NOT_READ
    temperature_c: Any = _NOT_READ
    power_w: Any = _NOT_READ
    power_limit_w: Any = _NOT_READ
    persistence_mode: Any = _NOT_READ  # "enabled" | "disabled"
    xid_events: Any = _NOT_READ  # List[XidEvent] | NotAvailable (kernel log not readable)
    #: NVML's pending recovery action (field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, newer drivers):
    #: "None", "GPU Reset Required", ... (model/xid.py NVML_RECOVERY_ACTIONS) | NotAvailable
    recovery_action: Any = _NOT_READ

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            v = getattr(self, name)
            if name == "xid_events" and isinstance(v, list):
                out[name] = [e.to_json() for e in v]
            else:
                out[name] = _encode(v)
        return out

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "GpuHealth":
        kw: Dict[str, Any] = {}
        for name in cls.__dataclass_fields__:
            if name not in d:
                continue
            v = d[name]
            if name == "xid_events" and isinstance(v, list):
                kw[name] = [XidEvent(**e) for e in v]
            else:
                kw[name] = _decode(v)
        return cls(**kw)


def _encode(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _encode(x) for k, x in v.items()}
    return field_to_json(v)


def _decode(v: Any) -> Any:
    """A JSON value back to data: typed n/a / error values, nested dicts of them."""
    if isinstance(v, dict) and not _is_typed(v):
        return {k: _decode(x) for k, x in v.items()}
    return field_from_json(v)


def _is_typed(d: dict) -> bool:
    """Whether a JSON dict is an encoded NotAvailable/Failed rather than data."""
    return len(d) == 1 and ("not_available" in d or "error" in d)


def health_to_json(h: Any) -> Any:
    return h.to_json() if isinstance(h, GpuHealth) else field_to_json(h)


def health_from_json(d: Any) -> Any:
    if isinstance(d, dict) and not _is_typed(d):
        return GpuHealth.from_json(d)
    return field_from_json(d) if d is not None else NotAvailable("not read")


def xid_list(h: Any) -> List[XidEvent]:
    """The Xid events of a health record, [] when there are none or they could not be read."""
    return list(h.xid_events) if isinstance(h, GpuHealth) and isinstance(h.xid_events, list) else []
