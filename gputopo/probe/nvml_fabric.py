"""NVML -> a GPU's NVLink fabric information (model.fabric.GpuFabric), or a typed n/a.

``nvmlDeviceGetGpuFabricInfoV(device, byref(info))`` fills a structure the caller builds:
``c_nvmlGpuFabricInfoV_t`` (nvidia-ml-py 13.x: an alias of ``c_nvmlGpuFabricInfo_v2_t``, whose
constructor sets ``version = nvmlGpuFabricInfo_v2`` = 0x02000024, NVML's ``sizeof | 2 << 24``).
Older bindings and drivers have only ``nvmlDeviceGetGpuFabricInfo`` with the unversioned
``c_nvmlGpuFabricInfo_t`` (clusterUuid, status, cliqueId, state: no ``healthMask``, which
the v2 structure adds, a uint32 of 2-bit fields, model/fabric.py HEALTH_FIELDS), and older
ones still neither. So:

- the versioned call first; where the bindings lack it or its structure (AttributeError), the
  driver's library lacks it (FUNCTION_NOT_FOUND) or takes another structure version
  (ARGUMENT_VERSION_MISMATCH), the unversioned one;
- where neither can be asked, NotAvailable saying why; NOT_SUPPORTED (a GPU in no fabric: PCIe
  cards, pre-Hopper GPUs, a GPU alone in a VM) is NotAvailable too, and so is a state of
  NVML_GPU_FABRIC_STATE_NOT_SUPPORTED; any other error Failed; a lost GPU raises GpuLost.

Part of gputopo.probe.nvml_reader (read once per GPU by nvml_gpu.read_gpu). Errors are
classified by nvml_query.nvml_failure, as every other NVML call's.
"""

from __future__ import annotations

import ctypes
from typing import Any, Optional

from gputopo.model.fabric import FABRIC_STATES, FABRIC_SUCCESS, GpuFabric
from gputopo.model.values import NotAvailable
from gputopo.probe.nvml_codes import (ERROR_NAMES, NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
                                      NVML_ERROR_FUNCTION_NOT_FOUND)
from gputopo.probe.nvml_query import error_code, nvml_failure

WHAT = "GPU fabric"
#: (function, its structure's class in the bindings), newest first.
CALLS = (("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfoV_t"),
         ("nvmlDeviceGetGpuFabricInfo", "c_nvmlGpuFabricInfo_t"))
#: Codes after which the older call is asked instead.
_TRY_OLDER = (NVML_ERROR_FUNCTION_NOT_FOUND, NVML_ERROR_ARGUMENT_VERSION_MISMATCH)


def _structure(cls: Any) -> Any:
    """A fresh structure; a versioned one whose constructor left ``version`` 0 gets NVML's
    ``sizeof | version << 24`` (v3 is the one with healthSummary)."""
    info = cls()
    names = [f[0] for f in getattr(cls, "_fields_", ())]
    if "version" in names and not info.version:
        info.version = ctypes.sizeof(info) | ((3 if "healthSummary" in names else 2) << 24)
    return info


def status_text(code: Any) -> str:
    """NVML's return code of a completed registration: 'success' or the error's name."""
    try:
        code = int(code)
    except (TypeError, ValueError):
        return f"unknown status {code!r}"
    if code == 0:
        return FABRIC_SUCCESS
    name = ERROR_NAMES.get(code)
    return f"NVML_ERROR_{name} ({code})" if name else f"NVML error code {code}"


def uuid_text(raw: Any) -> Any:
    """The cluster UUID bytes as 8-4-4-4-12 hex; NotAvailable when all zero (no cluster)."""
    try:
        data = bytes(int(b) & 0xFF for b in raw)
    except (TypeError, ValueError):
        return NotAvailable(f"{WHAT}: cluster UUID unreadable ({raw!r})")
    if not any(data):
        return NotAvailable(f"{WHAT}: NVML gives no cluster UUID (all zero)")
    h = data.hex()
    return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _from_structure(info: Any, fn_name: str) -> Any:
    state = int(info.state)
    name = FABRIC_STATES.get(state, f"unknown ({state})")
    if state == 0:
        return NotAvailable(f"{WHAT}: {fn_name} says the GPU is in no NVLink fabric "
                            "(NVML_GPU_FABRIC_STATE_NOT_SUPPORTED)")
    status: Any = (status_text(info.status) if name == "completed" else
                   NotAvailable(f"{WHAT}: registration status is only set once the state is completed"))
    names = [f[0] for f in getattr(type(info), "_fields_", ())]
    mask: Any = (int(info.healthMask) if "healthMask" in names else
                 NotAvailable(f"{WHAT}: {fn_name}'s structure has no health mask (driver or bindings too old)"))
    return GpuFabric(state=name, status=status, clique_id=int(info.cliqueId),
                     cluster_uuid=uuid_text(info.clusterUuid), health_mask=mask)


def read_fabric(lib: Any, handle: Any) -> Any:
    """GpuFabric, NotAvailable(why) or Failed(error) for one GPU; raises GpuLost."""
    why: Optional[Any] = None
    for fn_name, struct_name in CALLS:
        fn = getattr(lib, fn_name, None)
        cls = getattr(lib, struct_name, None)
        if fn is None or cls is None:
            missing = fn_name if fn is None else struct_name
            why = why or NotAvailable(f"{WHAT}: {missing} is not in these NVML bindings (nvidia-ml-py too old)")
            continue
        try:
            info = _structure(cls)
            fn(handle, ctypes.byref(info))
        except Exception as exc:  # noqa: BLE001 - every failure becomes a typed value
            result = nvml_failure(exc, fn_name, WHAT, _TRY_OLDER)  # raises GpuLost
            if error_code(exc) in _TRY_OLDER or (error_code(exc) is None and isinstance(exc, AttributeError)):
                why = why or result
                continue
            return result
        return _from_structure(info, fn_name)
    return why if why is not None else NotAvailable(f"{WHAT}: not read")
