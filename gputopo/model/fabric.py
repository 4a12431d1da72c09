"""A GPU's place in an NVLink fabric as NVML reports it (nvmlDeviceGetGpuFabricInfoV).

On an NVSwitch system (HGX/DGX H100 and later) the fabric manager registers every GPU with the
NVLink fabric; until that has completed the GPU cannot reach its peers over NVLink (and CUDA
may refuse to start). NVML says where registration stands: ``state`` (not started, in progress,
completed) and, once completed, ``status`` (NVML's return code of the registration: success or
why it failed), with the fabric clique the GPU is in. A GPU that takes part in no fabric (a PCIe
card, a GPU alone in a VM, an A100) has no fabric information: its field is NotAvailable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .values import Failed, NotAvailable, field_from_json, field_to_json, is_value

#: nvmlGpuFabricState_t -> name (NVML_GPU_FABRIC_STATE_*); 0 (NOT_SUPPORTED) is no fabric at all.
FABRIC_STATES = {0: "not-supported", 1: "not-started", 2: "in-progress", 3: "completed"}
#: The status of a completed registration that succeeded.
FABRIC_SUCCESS = "success"

#: The fields of NVML's fabric health mask (``healthMask`` of nvmlGpuFabricInfo_v2/v3; pynvml
#: NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_* / _WIDTH_* and their values): name -> (shift, width,
#: value -> name). NVIDIA's nvml.h says of each: DEGRADED_BW_TRUE "Bandwidth degraded",
#: ROUTE_RECOVERY_TRUE "Route Recovery in progress", ROUTE_UNHEALTHY_TRUE "Route is unhealthy",
#: ACCESS_TIMEOUT_RECOVERY_TRUE "Access Timeout Recovery in progress"; 0 is "not supported" for
#: every field (a driver or GPU that does not report it: not known, never healthy).
HEALTH_FIELDS = {
    "degraded_bw": (0, 0x3, {0: "not-supported", 1: "true", 2: "false"}),
    "route_recovery": (2, 0x3, {0: "not-supported", 1: "true", 2: "false"}),
    "route_unhealthy": (4, 0x3, {0: "not-supported", 1: "true", 2: "false"}),
    "access_timeout_recovery": (6, 0x3, {0: "not-supported", 1: "true", 2: "false"}),
    "incorrect_configuration": (8, 0xF, {0: "not-supported", 1: "none", 2: "incorrect-sysguid",
                                         3: "incorrect-chassis-sn", 4: "no-partition",
                                         5: "insufficient-nvlinks", 6: "incompatible-gpu-fw",
                                         7: "invalid-location", 8: "gpu-state-invalid"}),
    "partition_assigned": (12, 0x3, {0: "not-supported", 1: "true", 2: "false"}),
    "gfm_state": (14, 0x3, {0: "not-supported", 1: "connected", 2: "disconnected"}),
}


def health_fields(mask: int) -> dict:
    """The health mask decoded: field -> value name (``unknown (N)`` for a value NVML has no name for)."""
    out = {}
    for name, (shift, width, values) in HEALTH_FIELDS.items():
        v = (int(mask) >> shift) & width
        out[name] = values.get(v, f"unknown ({v})")
    return out


@dataclass
class GpuFabric:
    """NVML's fabric information of one GPU (a GPU with none has NotAvailable instead)."""

    state: str  # "not-started" | "in-progress" | "completed" | "unknown (N)"
    #: "success", or the NVML error the registration ended with ("NVML_ERROR_NOT_READY (27)");
    #: NotAvailable while the state is not completed (NVML: only meaningful once completed).
    status: Any = NotAvailable("not read")
    clique_id: Any = NotAvailable("not read")  # int
    cluster_uuid: Any = NotAvailable("not read")  # "xxxxxxxx-xxxx-..." | NotAvailable (all zero)
    #: NVML's fabric health mask (int, decoded by :func:`health_fields`); NotAvailable where the
    #: structure read has none (the unversioned nvmlGpuFabricInfo_t) or a document predates it.
    health_mask: Any = NotAvailable("not read")

    @property
    def health(self) -> Any:
        """The health mask decoded (HEALTH_FIELDS), or None when no mask was read."""
        return health_fields(self.health_mask) if is_value(self.health_mask) else None

    @property
    def health_known(self) -> bool:
        """Whether NVML reports any of the four health conditions (not all 'not supported')."""
        h = self.health
        return h is not None and any(h[k] != "not-supported" for k in
                                     ("degraded_bw", "route_recovery", "route_unhealthy", "access_timeout_recovery"))

    @property
    def completed(self) -> bool:
        return self.state == "completed"

    @property
    def ready(self) -> bool:
        """Registered with the fabric, successfully."""
        return self.completed and self.status == FABRIC_SUCCESS

    @property
    def failed(self) -> bool:
        """Registration completed with an error."""
        return self.completed and is_value(self.status) and self.status != FABRIC_SUCCESS

    def text(self) -> str:
        """'completed, success, clique 0' / 'in-progress' (the clique once registered)."""
        parts = [self.state]
        if is_value(self.status):
            parts.append(str(self.status))
        if self.completed and is_value(self.clique_id):
            parts.append(f"clique {self.clique_id}")
        if self.completed:
            parts.append(self.health_text())
        return ", ".join(parts)

    def health_text(self) -> str:
        """'health ok' / 'health: bandwidth degraded, ...' / 'health not known (...)'."""
        h = self.health
        if h is None:
            return "health not known (no health mask read)"
        if not self.health_known:
            return "health not known (NVML reports its health fields as not supported)"
        bad = [HEALTH_WORDS[k] for k in HEALTH_WORDS if h[k] == "true"]
        if h["incorrect_configuration"] not in ("none", "not-supported"):
            bad.append(f"incorrect configuration ({h['incorrect_configuration']})")
        return "health: " + ", ".join(bad) if bad else "health ok"


#: NVIDIA's words for a health field that is TRUE (nvml.h).
HEALTH_WORDS = {"degraded_bw": "bandwidth degraded", "route_recovery": "route recovery in progress",
                "route_unhealthy": "route is unhealthy",
                "access_timeout_recovery": "access timeout recovery in progress"}


def fabric_to_json(x: Any) -> Any:
    if isinstance(x, GpuFabric):
        return {"state": x.state, "status": field_to_json(x.status),
                "clique_id": field_to_json(x.clique_id), "cluster_uuid": field_to_json(x.cluster_uuid),
                "health_mask": field_to_json(x.health_mask)}
    return field_to_json(x)


def fabric_from_json(x: Any) -> Any:
    """Inverse of :func:`fabric_to_json`; a document written before the field: NotAvailable."""
    if x is None:
        return NotAvailable("not in this document (written before gputopo read the GPU fabric)")
    if isinstance(x, dict) and "state" in x:
        missing = {"not_available": "not in this document"}
        return GpuFabric(state=str(x["state"]), status=field_from_json(x.get("status", missing)),
                         clique_id=field_from_json(x.get("clique_id", missing)),
                         cluster_uuid=field_from_json(x.get("cluster_uuid", missing)),
                         health_mask=field_from_json(x.get("health_mask", missing)))
    value = field_from_json(x)
    if isinstance(value, (NotAvailable, Failed)):
        return value
    raise ValueError(f"GPU fabric: expected an object with 'state' or an n/a value, got {x!r}")
