"""Health of a simulated GPU: what its description declares, and how the fake NVML and the fake
kernel log answer for it the way a real driver does.

Which GPUs have what (as the real parts do): data-centre GPUs have ECC (on by default);
GeForce cards have none, so every ECC, retired-page and remapped-row call is NOT_SUPPORTED;
Ampere-and-later parts remap rows and answer NOT_SUPPORTED for page retirement: NVIDIA's memory
error guide ("Supported GPUs", https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/supported-gpus.html)
lists row remapping on GA100, GA10x, Ada AD10x, GH100 and GB10x, so the GDDR ones (A40, A10,
RTX A6000, L40S, L4, RTX 6000 Ada) remap rows as the HBM ones (A100, H100, H200, B200) do;
Pascal/Volta (P100, V100) retire pages and answer NOT_SUPPORTED for remapped rows; other
data-centre parts (T4, Quadro RTX) have ECC only (RTX A cards ship with ECC off). ECC counters of
a GPU with ECC off are NOT_SUPPORTED, as NVML says.

The description keys (per GPU or in [defaults]) are HEALTH_KEYS; see docs/sim-format.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from gputopo.model.xid import xid_info
from gputopo.probe.health import CLOCK_EVENT_BITS as PROBE_CLOCK_EVENT_BITS

#: GPU description keys that declare health.
HEALTH_KEYS = {
    "ecc", "ecc_pending", "ecc_corrected", "ecc_uncorrected", "ecc_corrected_aggregate",
    "ecc_uncorrected_aggregate", "retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending",
    "remapped_rows_corrected", "remapped_rows_uncorrected", "remapped_rows_pending",
    "remapped_rows_failure", "temperature_c", "power_w", "power_limit_w", "persistence",
    "clock_events", "xid", "recovery_action",
}
#: clock_events names -> nvmlClocksEventReason bit (the probe's table, inverted).
CLOCK_EVENT_BITS = {name: bit for bit, name in PROBE_CLOCK_EVENT_BITS.items()}
#: GPUs that remap rows (the guide above): GA100 (A100, A30), GA10x (A40, A10/A10G, A16, A2, RTX A
#: cards), AD10x (L40/L40S, L4, L20, RTX <n> Ada), GH100 (H100, H200, H20, GH200), GB10x (B100,
#: B200, GB200). Whole words of the upper-cased NVML name ("A10" never matches "A100" by chance).
_ROW_REMAP_RE = re.compile(r"\b(A100|A30|A40|A10G?|A16|A2|RTX A\d{4}|L40S?|L4|L20|RTX \d{4} ADA|"
                           r"H100|H200|H20|GH200|B100|B200|GB200)\b")
_PAGE_RETIRE_MODELS = ("V100", "P100")
_NO_ECC_MODELS = ("GEFORCE", "RTX 30", "RTX 40", "RTX 20")
_ECC_OFF_MODELS = ("RTX A",)
_POWER_LIMITS_W = (("B200", 1000.0), ("H100 80GB HBM3", 700.0), ("H200", 700.0), ("A100-SXM", 400.0))  # workstation cards ship with ECC available but off


@dataclass
class HealthDesc:
    """One simulated GPU's health (defaults: a healthy, cool, idle data-centre GPU)."""

    ecc: str = "enabled"  # "enabled" | "disabled" | "unsupported"
    ecc_pending: Optional[str] = None  # None: same as ecc
    ecc_counts: Dict[str, int] = field(default_factory=dict)  # "volatile_corrected", ...
    memory_repair: str = "none"  # "row_remap" | "page_retire" | "none"
    retired_pages: Dict[str, int] = field(default_factory=lambda: {"sbe": 0, "dbe": 0})
    retired_pages_pending: bool = False
    remapped_rows: Dict[str, Any] = field(default_factory=lambda: {
        "corrected": 0, "uncorrected": 0, "pending": False, "failure": False})
    temperature_c: int = 34
    power_w: float = 62.0
    power_limit_w: float = 400.0
    persistence: bool = True
    clock_events: List[str] = field(default_factory=lambda: ["gpu_idle"])
    xid: List[int] = field(default_factory=list)
    #: NVML's recovery action (field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, nvmlGpuRecoveryAction_t);
    #: None: the driver does not report it (the field answers NOT_SUPPORTED, as older drivers do)
    recovery_action: Optional[int] = None


def model_traits(name: str) -> Dict[str, Any]:
    """{"ecc": default ECC state, "memory_repair": kind, "power_limit_w": board power} of a GPU
    model by its NVML name."""
    upper = name.upper()
    limit = next((w for key, w in _POWER_LIMITS_W if key in upper), 300.0)
    return dict(_repair_traits(upper), power_limit_w=limit)


def _repair_traits(upper: str) -> Dict[str, str]:
    if any(k in upper for k in _NO_ECC_MODELS):
        return {"ecc": "unsupported", "memory_repair": "none"}
    ecc = "disabled" if any(k in upper for k in _ECC_OFF_MODELS) else "enabled"
    if _ROW_REMAP_RE.search(upper):
        return {"ecc": ecc, "memory_repair": "row_remap"}
    if any(k in upper for k in _PAGE_RETIRE_MODELS):
        return {"ecc": "enabled", "memory_repair": "page_retire"}
    return {"ecc": ecc, "memory_repair": "none"}


def parse_health(ctx, spec: Dict[str, Any], where, name: str) -> HealthDesc:
    """The HealthDesc of one GPU from its merged description entry. ``where(key)`` gives the
    key path for error messages; ``ctx.error`` builds an InputFileError."""
    traits = model_traits(name)
    h = HealthDesc(ecc=traits["ecc"], memory_repair=traits["memory_repair"],
                   power_limit_w=traits["power_limit_w"])

    def count(key, hi=2**32 - 1):
        v = spec[key]
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= hi:
            raise ctx.error(f"expected a count (integer >= 0), got {v!r}", *where(key))
        return v

    def flag(key):
        if not isinstance(spec[key], bool):
            raise ctx.error(f"expected true or false, got {spec[key]!r}", *where(key))
        return spec[key]

    def number(key, lo, hi):
        v = spec[key]
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not lo <= v <= hi:
            raise ctx.error(f"expected a number in {lo}..{hi}, got {v!r}", *where(key))
        return v

    for key in ("ecc", "ecc_pending"):
        if key in spec:
            if spec[key] not in ("enabled", "disabled", "unsupported"):
                raise ctx.error(f'expected "enabled", "disabled" or "unsupported", got {spec[key]!r}', *where(key))
            if traits["ecc"] == "unsupported" and spec[key] != "unsupported":
                raise ctx.error(f"{name} has no ECC memory (NVML answers NOT_SUPPORTED)", *where(key))
    h.ecc = spec.get("ecc", h.ecc)
    h.ecc_pending = spec.get("ecc_pending")
    for kind in ("corrected", "uncorrected"):
        for key, counter in ((f"ecc_{kind}", "volatile"), (f"ecc_{kind}_aggregate", "aggregate")):
            if key in spec:
                if h.ecc != "enabled":
                    raise ctx.error(f"ECC counts need ecc = \"enabled\" (this GPU's ECC is {h.ecc})", *where(key))
                h.ecc_counts[f"{counter}_{kind}"] = count(key)
        # the lifetime count includes the errors since the driver loaded
        vol = h.ecc_counts.get(f"volatile_{kind}", 0)
        h.ecc_counts[f"aggregate_{kind}"] = max(h.ecc_counts.get(f"aggregate_{kind}", 0), vol)
    for key, repair in (("retired_pages_sbe", "page_retire"), ("retired_pages_dbe", "page_retire"),
                        ("retired_pages_pending", "page_retire"), ("remapped_rows_corrected", "row_remap"),
                        ("remapped_rows_uncorrected", "row_remap"), ("remapped_rows_pending", "row_remap"),
                        ("remapped_rows_failure", "row_remap")):
        if key in spec and h.memory_repair != repair:
            which = "remaps rows" if h.memory_repair == "row_remap" else (
                "retires pages" if h.memory_repair == "page_retire" else "neither retires pages nor remaps rows")
            raise ctx.error(f"{name} {which} (NVML answers NOT_SUPPORTED for {key})", *where(key))
    for k in ("sbe", "dbe"):
        if f"retired_pages_{k}" in spec:
            h.retired_pages[k] = count(f"retired_pages_{k}")
    if "retired_pages_pending" in spec:
        h.retired_pages_pending = flag("retired_pages_pending")
    for k in ("corrected", "uncorrected"):
        if f"remapped_rows_{k}" in spec:
            h.remapped_rows[k] = count(f"remapped_rows_{k}")
    for k in ("pending", "failure"):
        if f"remapped_rows_{k}" in spec:
            h.remapped_rows[k] = flag(f"remapped_rows_{k}")
    if "temperature_c" in spec:
        h.temperature_c = int(number("temperature_c", 0, 150))
    if "power_w" in spec:
        h.power_w = float(number("power_w", 0, 5000))
    if "power_limit_w" in spec:
        h.power_limit_w = float(number("power_limit_w", 1, 5000))
    if "persistence" in spec:
        h.persistence = flag("persistence")
    if "clock_events" in spec:
        ev = spec["clock_events"]
        if not isinstance(ev, list) or any(e not in CLOCK_EVENT_BITS for e in ev):
            raise ctx.error(f"expected a list of {', '.join(CLOCK_EVENT_BITS)}, got {ev!r}", *where("clock_events"))
        h.clock_events = list(ev)
    if "xid" in spec:
        xs = spec["xid"]
        if not isinstance(xs, list) or any(not isinstance(x, int) or isinstance(x, bool) or not 0 < x < 1000
                                           for x in xs):
            raise ctx.error(f"expected a list of Xid codes such as [79], got {xs!r}", *where("xid"))
        h.xid = list(xs)
    if "recovery_action" in spec:
        from gputopo.model.xid import NVML_RECOVERY_ACTIONS

        names = {name: n for n, (name, _text) in NVML_RECOVERY_ACTIONS.items()}
        if spec["recovery_action"] not in names:
            raise ctx.error(f"expected one of {', '.join(names)} (NVML's nvmlGpuRecoveryAction_t), got "
                            f"{spec['recovery_action']!r}", *where("recovery_action"))
        h.recovery_action = names[spec["recovery_action"]]
    return h


def recovery_action_value(nvml, i) -> Optional[int]:
    """The simulated GPU's NVML recovery action (nvmlGpuRecoveryAction_t), None: not reported."""
    return _health(nvml, i).recovery_action


# --------------------------------------------------------------------------- fake NVML calls


def _health(nvml, i) -> HealthDesc:
    return nvml._gpu(i).health


def _state(value: str) -> int:
    return 1 if value == "enabled" else 0


def nvmlDeviceGetEccMode(self, i):
    h = _health(self, i)
    if h.ecc == "unsupported":
        self._raise(self.NVML_ERROR_NOT_SUPPORTED)
    return [_state(h.ecc), _state(h.ecc_pending or h.ecc)]


def nvmlDeviceGetTotalEccErrors(self, i, errorType, counterType):
    h = _health(self, i)
    if h.ecc != "enabled":
        self._raise(self.NVML_ERROR_NOT_SUPPORTED)
    if errorType not in (0, 1) or counterType not in (0, 1):
        self._raise(self.NVML_ERROR_INVALID_ARGUMENT)
    key = ("volatile", "aggregate")[counterType] + "_" + ("corrected", "uncorrected")[errorType]
    return int(h.ecc_counts.get(key, 0))


def nvmlDeviceGetRetiredPages(self, i, sourceFilter):
    h = _health(self, i)
    if h.memory_repair != "page_retire":
        self._raise(self.NVML_ERROR_NOT_SUPPORTED)
    if sourceFilter not in (0, 1):
        self._raise(self.NVML_ERROR_INVALID_ARGUMENT)
    n = h.retired_pages["sbe" if sourceFilter == 0 else "dbe"]
    base = 0x7F0000000 + sourceFilter * 0x100000
    return [base + k * 0x1000 for k in range(n)]  # page addresses, as pynvml returns them


def nvmlDeviceGetRetiredPagesPendingStatus(self, i):
    h = _health(self, i)
    if h.memory_repair != "page_retire":
        self._raise(self.NVML_ERROR_NOT_SUPPORTED)
    return 1 if h.retired_pages_pending else 0


def nvmlDeviceGetRemappedRows(self, i):
    h = _health(self, i)
    if h.memory_repair != "row_remap":
        self._raise(self.NVML_ERROR_NOT_SUPPORTED)
    r = h.remapped_rows
    return (r["corrected"], r["uncorrected"], int(r["pending"]), int(r["failure"]))


def nvmlDeviceGetCurrentClocksEventReasons(self, i):
    mask = 0
    for name in _health(self, i).clock_events:
        mask |= CLOCK_EVENT_BITS[name]
    return mask


def nvmlDeviceGetTemperature(self, i, sensor):
    if sensor != 0:
        self._raise(self.NVML_ERROR_NOT_SUPPORTED)
    return _health(self, i).temperature_c


def nvmlDeviceGetPowerUsage(self, i):
    return int(round(_health(self, i).power_w * 1000))  # milliwatts


def nvmlDeviceGetEnforcedPowerLimit(self, i):
    return int(round(_health(self, i).power_limit_w * 1000))


def nvmlDeviceGetPowerManagementLimit(self, i):
    return int(round(_health(self, i).power_limit_w * 1000))


def nvmlDeviceGetPersistenceMode(self, i):
    return 1 if _health(self, i).persistence else 0


_CALLS = (nvmlDeviceGetEccMode, nvmlDeviceGetTotalEccErrors, nvmlDeviceGetRetiredPages,
          nvmlDeviceGetRetiredPagesPendingStatus, nvmlDeviceGetRemappedRows,
          nvmlDeviceGetCurrentClocksEventReasons, nvmlDeviceGetTemperature, nvmlDeviceGetPowerUsage,
          nvmlDeviceGetEnforcedPowerLimit, nvmlDeviceGetPowerManagementLimit, nvmlDeviceGetPersistenceMode)


def install_health_calls(cls, device_decorator) -> None:
    """Add the health calls to the fake NVML class, each wrapped like its other per-device calls
    (handle resolved to a GPU index; init, injected errors, unsupported and lost GPUs checked)."""
    for fn in _CALLS:
        setattr(cls, fn.__name__, device_decorator()(fn))

    def throttle(self, i):  # the pre-535 name of the same mask
        return nvmlDeviceGetCurrentClocksEventReasons(self, i)

    throttle.__name__ = "nvmlDeviceGetCurrentClocksThrottleReasons"
    setattr(cls, throttle.__name__, device_decorator()(throttle))


# --------------------------------------------------------------------------- fake kernel log


def xid_log_lines(desc) -> List[str]:
    """The ``NVRM: Xid`` lines a real driver would have written for the declared Xids."""
    out = []
    t = 4000.0
    for g in desc.gpus:
        addr = g.address
        for code in g.health.xid:
            t += 37.25
            out.append(f"[{t:12.6f}] NVRM: Xid (PCI:{addr.device_text}): "
                       f"{code}, {xid_info(code).log_text}")
    return out
