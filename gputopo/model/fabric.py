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


@dataclass
class GpuFabric:
    """NVML's fabric information of one GPU (a GPU with none has NotAvailable instead)."""

    state: str  # "not-started" | "in-progress" | "completed" | "unknown (N)"
    #: "success", or the NVML error the registration ended with ("NVML_ERROR_NOT_READY (27)");
    #: NotAvailable while the state is not completed (NVML: only meaningful once completed).
    status: Any = NotAvailable("not read")
    clique_id: Any = NotAvailable("not read")  # int
    cluster_uuid: Any = NotAvailable("not read")  # "xxxxxxxx-xxxx-..." | NotAvailable (all zero)

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
        return ", ".join(parts)


def fabric_to_json(x: Any) -> Any:
    if isinstance(x, GpuFabric):
        return {"state": x.state, "status": field_to_json(x.status),
                "clique_id": field_to_json(x.clique_id), "cluster_uuid": field_to_json(x.cluster_uuid)}
    return field_to_json(x)


def fabric_from_json(x: Any) -> Any:
    """Inverse of :func:`fabric_to_json`; a document written before the field: NotAvailable."""
    if x is None:
        return NotAvailable("not in this document (written before gputopo read the GPU fabric)")
    if isinstance(x, dict) and "state" in x:
        missing = {"not_available": "not in this document"}
        return GpuFabric(state=str(x["state"]), status=field_from_json(x.get("status", missing)),
                         clique_id=field_from_json(x.get("clique_id", missing)),
                         cluster_uuid=field_from_json(x.get("cluster_uuid", missing)))
    value = field_from_json(x)
    if isinstance(value, (NotAvailable, Failed)):
        return value
    raise ValueError(f"GPU fabric: expected an object with 'state' or an n/a value, got {x!r}")
