"""NVLink fabric of a simulated GPU: what its description declares (``fabric_*`` keys) and how
the fake NVML answers ``nvmlDeviceGetGpuFabricInfoV`` / ``nvmlDeviceGetGpuFabricInfo`` for it,
with pynvml's structures (nvidia-ml-py 13.x layout, built here: the fake never imports pynvml).

As the real driver does: a Hopper-or-later GPU (NVLink 4+) of an NVSwitch box (``nvswitch =
true``) is registered with the fabric (state completed, status success, clique 0); every other
GPU (PCIe cards, pre-Hopper GPUs, a GPU alone in a VM) answers NOT_SUPPORTED. The caller
passes ``ctypes.byref(structure)``; the versioned call checks the structure's ``version``
(ARGUMENT_VERSION_MISMATCH otherwise, as NVML does).
"""

from __future__ import annotations

import ctypes
import uuid as uuid_mod
from dataclasses import dataclass
from typing import Any, Dict, Optional

from gputopo.model.fabric import FABRIC_STATES
from gputopo.probe.nvml_codes import (ERROR_NAMES, NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
                                      NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_SUPPORTED, NVML_SUCCESS)

#: GPU description keys that declare the fabric.
FABRIC_KEYS = {"fabric_state", "fabric_status", "fabric_clique_id", "fabric_cluster_uuid", "fabric_health_mask"}
#: fabric_state values: "unsupported" (the call answers NOT_SUPPORTED) or an NVML state.
STATE_CODES = {name: code for code, name in FABRIC_STATES.items()}

# pynvml's names and values (nvidia-ml-py 13.x).
NVML_GPU_FABRIC_UUID_LEN = 16
NVML_GPU_FABRIC_STATE_NOT_SUPPORTED = 0
NVML_GPU_FABRIC_STATE_NOT_STARTED = 1
NVML_GPU_FABRIC_STATE_IN_PROGRESS = 2
NVML_GPU_FABRIC_STATE_COMPLETED = 3
nvmlGpuFabricInfo_v2 = 0x02000024
nvmlGpuFabricInfo_v3 = 0x3000028
NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE = 1
NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW = 0
NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_RECOVERY_TRUE = 1
NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_RECOVERY = 2
NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_TRUE = 1
NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY = 4
NVML_GPU_FABRIC_HEALTH_MASK_ACCESS_TIMEOUT_RECOVERY_TRUE = 1
NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ACCESS_TIMEOUT_RECOVERY = 6


class c_nvmlGpuFabricInfo_t(ctypes.Structure):
    _fields_ = [("clusterUuid", ctypes.c_uint8 * NVML_GPU_FABRIC_UUID_LEN), ("status", ctypes.c_uint),
                ("cliqueId", ctypes.c_uint32), ("state", ctypes.c_uint)]


class c_nvmlGpuFabricInfo_v2_t(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("clusterUuid", ctypes.c_uint8 * NVML_GPU_FABRIC_UUID_LEN),
                ("status", ctypes.c_uint), ("cliqueId", ctypes.c_uint32), ("state", ctypes.c_uint),
                ("healthMask", ctypes.c_uint32)]

    def __init__(self):
        super().__init__(version=nvmlGpuFabricInfo_v2)


class c_nvmlGpuFabricInfo_v3_t(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("clusterUuid", ctypes.c_uint8 * NVML_GPU_FABRIC_UUID_LEN),
                ("status", ctypes.c_uint), ("cliqueId", ctypes.c_uint32), ("state", ctypes.c_uint),
                ("healthMask", ctypes.c_uint32), ("healthSummary", ctypes.c_uint8)]

    def __init__(self):
        super().__init__(version=nvmlGpuFabricInfo_v3)


c_nvmlGpuFabricInfoV_t = c_nvmlGpuFabricInfo_v2_t

#: What FakeNvml carries at class level, as pynvml has it at module level.
BINDING_NAMES: Dict[str, Any] = {
    k: v for k, v in list(globals().items())
    if k.startswith(("NVML_GPU_FABRIC_", "nvmlGpuFabricInfo_", "c_nvmlGpuFabricInfo"))}


@dataclass
class FabricDesc:
    """One simulated GPU's fabric registration (None on a GpuDesc: NOT_SUPPORTED)."""

    state: int  # NVML_GPU_FABRIC_STATE_*
    status: int = NVML_SUCCESS  # NVML return code of the registration (read once completed)
    clique_id: int = 0
    cluster_uuid: bytes = bytes(NVML_GPU_FABRIC_UUID_LEN)
    #: the v2/v3 structure's healthMask (NVML_GPU_FABRIC_HEALTH_MASK_*); 0: every field NOT_SUPPORTED
    health_mask: int = 0


def gpu_fabric_desc(ctx, spec: Dict[str, Any], where, model, nvswitch: bool) -> Optional[FabricDesc]:
    """The FabricDesc of one GPU from its merged description entry (see the module docstring
    for the default); ``where(key)`` gives the key path for error messages."""
    hopper = (model.nvlink_version or 0) >= 4
    default = "completed" if nvswitch and hopper else "unsupported"
    state = spec.get("fabric_state", default)
    if state != "unsupported" and state not in STATE_CODES:
        raise ctx.error(f"expected \"unsupported\" or one of {', '.join(STATE_CODES)}, got {state!r}",
                        *where("fabric_state"))
    if state == "unsupported":
        extra = sorted(k for k in FABRIC_KEYS - {"fabric_state"} if k in spec)
        if extra:
            raise ctx.error(f"{extra[0]} needs a fabric_state other than \"unsupported\" (this GPU's "
                            "fabric call answers NOT_SUPPORTED)", *where(extra[0]))
        return None
    out = FabricDesc(state=STATE_CODES[state])
    if "fabric_status" in spec:
        status = spec["fabric_status"]  # any state may carry it: a reader reads it once completed
        codes = {name.lower(): code for code, name in ERROR_NAMES.items()}
        text = str(status).lower().removeprefix("nvml_error_")
        if text == "success":
            out.status = NVML_SUCCESS
        elif text in codes:
            out.status = codes[text]
        else:
            raise ctx.error(f"expected \"success\" or an NVML error name (e.g. \"NOT_READY\"), got "
                            f"{status!r}", *where("fabric_status"))
    if "fabric_clique_id" in spec:
        v = spec["fabric_clique_id"]
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 2**32:
            raise ctx.error(f"expected an integer 0..4294967295, got {v!r}", *where("fabric_clique_id"))
        out.clique_id = v
    if "fabric_health_mask" in spec:
        v = spec["fabric_health_mask"]
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 2**32:
            raise ctx.error(f"expected an integer 0..4294967295 (NVML's healthMask), got {v!r}",
                            *where("fabric_health_mask"))
        out.health_mask = v
    if "fabric_cluster_uuid" in spec:
        try:
            out.cluster_uuid = uuid_mod.UUID(str(spec["fabric_cluster_uuid"])).bytes
        except ValueError:
            raise ctx.error(f"expected a UUID (8-4-4-4-12 hex), got {spec['fabric_cluster_uuid']!r}",
                            *where("fabric_cluster_uuid")) from None
    return out


# --------------------------------------------------------------------------- fake NVML calls


def _target(self, arg, versioned: bool):
    """The structure behind ``byref(info)`` (or a pointer to it); anything else, as a structure
    passed by value, is INVALID_ARGUMENT. The versioned call checks ``version``."""
    info = getattr(arg, "_obj", None)
    if info is None and hasattr(arg, "contents"):
        info = arg.contents
    if not isinstance(info, ctypes.Structure):
        self._raise(NVML_ERROR_INVALID_ARGUMENT)
    if versioned and getattr(info, "version", None) not in (nvmlGpuFabricInfo_v2, nvmlGpuFabricInfo_v3):
        self._raise(NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
    return info


def _fill(self, i, info) -> int:
    fabric = self._gpu(i).fabric
    if fabric is None:
        self._raise(NVML_ERROR_NOT_SUPPORTED)
    info.clusterUuid[:] = list(fabric.cluster_uuid)
    info.status = fabric.status  # NVML: to be read only once the state is completed
    info.cliqueId = fabric.clique_id
    info.state = fabric.state
    if hasattr(info, "healthMask"):
        info.healthMask = fabric.health_mask  # default 0: every field NOT_SUPPORTED
    if hasattr(info, "healthSummary"):
        info.healthSummary = 0
    return NVML_SUCCESS


def nvmlDeviceGetGpuFabricInfoV(self, i, gpuFabricInfo):
    return _fill(self, i, _target(self, gpuFabricInfo, versioned=True))


def nvmlDeviceGetGpuFabricInfo(self, i, gpuFabricInfo):
    return _fill(self, i, _target(self, gpuFabricInfo, versioned=False))


def install_fabric_calls(cls, device_decorator) -> None:
    """Add the fabric calls and pynvml's fabric names to the fake NVML class."""
    for fn in (nvmlDeviceGetGpuFabricInfoV, nvmlDeviceGetGpuFabricInfo):
        setattr(cls, fn.__name__, device_decorator()(fn))
    for name, value in BINDING_NAMES.items():
        setattr(cls, name, value)
