"""A pynvml look-alike answering for a simulated machine.

It implements exactly the NVML surface gputopo's probe reads (docs/architecture.md, "The seams"), with pynvml's
function names, argument order and return shapes (checked against nvidia-ml-py 13.x):

- strings are ``str`` (pynvml decodes them); ``bytes_strings=True`` returns ``bytes`` like old
  bindings did;
- ``nvmlDeviceGetPciInfo`` and ``nvmlDeviceGetNvLinkRemotePciInfo`` return a struct with
  ``busId`` (NVML form ``"00000000:1B:00.0"``), ``busIdLegacy``, ``domain``, ``bus``, ``device``,
  ``pciDeviceId``, ``pciSubSystemId``;
- ``nvmlDeviceGetCpuAffinity(handle, n)`` returns a ctypes array of ``n`` c_ulonglong words,
  word 0 holding CPUs 0-63, as pynvml does;
- ``nvmlDeviceGetMigMode`` returns ``[current, pending]``; ``nvmlSystemGetCudaDriverVersion`` an
  int such as 12040;
- ``nvmlDeviceGetNvLinkVersion`` returns NVML's ``nvmlNvlinkVersion_t`` *enum*, not the NVLink
  generation: NVLink 1 -> 1, 2 -> 2, 3 -> 5 (3.1), 4 -> 6, 5 -> 7 (an A100 really reports 5);
  a reader must map it back (NVLINK_VERSION_FROM_NVML);
- errors are ``FakeNvml.NVMLError`` with ``.value`` set to NVML's code, raised as the matching
  subclass (``NVMLError_GpuIsLost``...) as pynvml does; every call before ``nvmlInit`` raises
  UNINITIALIZED (1); NVLink calls on a GPU without NVLink raise NOT_SUPPORTED (3), and for a link
  index past the GPU's last port INVALID_ARGUMENT (2), which is how a reader finds the end;
- P2P cap index 0 must be an int: pynvml's ``NVML_P2P_CAPS_INDEX_READ`` is the tuple ``(0,)``
  (kept here too), and passing it fails with ctypes.ArgumentError as it does with real NVML.

- ``nvmlDeviceGetGpuFabricInfoV(handle, byref(c_nvmlGpuFabricInfoV_t()))`` fills the caller's
  structure (version checked) and ``nvmlDeviceGetGpuFabricInfo`` the unversioned one; a GPU in
  no fabric answers NOT_SUPPORTED (gputopo.sim.fabric);

Test hooks: ``lost`` GPU indices (every per-device call raises GPU_IS_LOST (15); getting the
handle still works, as with real NVML), ``unsupported`` function names (NOT_SUPPORTED (3)),
``missing`` function or structure names (not attributes at all: AttributeError, like old
bindings; e.g. ``nvmlDeviceGetGpuFabricInfoV`` and ``c_nvmlGpuFabricInfoV_t`` before 12.550), and
``errors`` {(function name, GPU index or None for any/system): NVML code}.

This module is the entry (FakeNvml and pynvml's module-level names); its parts, each importing
only downwards: fake_nvml_constants (NVML_* values, the tables behind them), fake_nvml_plumbing
(error classes, handle, PCI info struct, the checks every call goes through),
fake_nvml_device (system calls, per-GPU getters), fake_nvml_links (NVLink getters, pair calls)
and sim.health (ECC, retired pages, remapped rows, clocks, temperature, power, persistence).
"""

from __future__ import annotations

from typing import Dict, Iterable, Optional, Tuple

from gputopo.probe import nvml_codes as _codes  # plain data: the fake never imports pynvml

from . import fake_nvml_constants as _constants
from .fake_nvml_constants import NVLINK_VERSION_FROM_NVML, NVLINK_VERSION_TO_NVML
from .fake_nvml_device import DeviceCalls, SystemCalls
from .fake_nvml_links import NvLinkCalls, PairCalls
from .fake_nvml_plumbing import ERROR_CLASSES, DeviceHandle, NVMLError, device_call, nvmlPciInfo_t
from .fabric import BINDING_NAMES as _FABRIC_NAMES
from .fabric import install_fabric_calls
from .health import install_health_calls
from .pci import PciAddress

__all__ = ["FakeNvml", "NVLINK_VERSION_FROM_NVML", "NVLINK_VERSION_TO_NVML", "NVMLError", "nvmlPciInfo_t"]

# pynvml's module-level names here too: the NVML_* codes and constants, the error classes.
globals().update({k: v for k, v in list(vars(_codes).items()) + list(vars(_constants).items())
                  if k.startswith("NVML_")})
globals().update(ERROR_CLASSES)


class _Missing:
    """A class attribute that does not exist for ``hasattr``/``getattr`` (AttributeError)."""

    def __init__(self, name):
        self.name = name

    def __get__(self, obj, objtype=None):
        raise AttributeError(f"module 'pynvml' has no attribute '{self.name}'")


class FakeNvml(PairCalls, NvLinkCalls, DeviceCalls, SystemCalls):
    """NVML for a simulated machine (see the module docstring)."""

    NVMLError = NVMLError

    def __init__(self, desc, *, lost: Iterable[int] = (), unsupported: Iterable[str] = (),
                 missing: Iterable[str] = (), errors: Optional[Dict[Tuple[str, Optional[int]], int]] = None,
                 bytes_strings: bool = False):
        self.desc = desc
        self.lost = frozenset(lost)
        self.unsupported = frozenset(unsupported)
        self.errors = dict(errors or {})
        self.bytes_strings = bytes_strings
        self._init_count = 0
        self._handles = [DeviceHandle(self, k) for k in range(len(desc.gpus))]
        self._addrs = [PciAddress.parse(g.bus_id) for g in desc.gpus]
        self.calls: Dict[str, int] = {}
        self._p2p_cache: Dict[Tuple[int, int], Tuple[int, ...]] = {}  # pair -> P2P codes
        missing = tuple(missing)
        if missing:
            for m in missing:
                if not m.startswith(("nvml", "c_nvml")):
                    raise ValueError(f"missing names NVML functions or structures (nvml..., c_nvml...), "
                                     f"got {m!r}")
            self.__class__ = type("FakeNvml", (FakeNvml,), {m: _Missing(m) for m in missing})


# ECC, retired pages, remapped rows, clocks events, temperature, power, persistence: health.py
install_health_calls(FakeNvml, device_call)
# GPU fabric info (nvmlDeviceGetGpuFabricInfoV and its structures): fabric.py
install_fabric_calls(FakeNvml, device_call)
globals().update(_FABRIC_NAMES)

# pynvml's module-level names: the error classes and the NVML_* constants, on the fake too.
for _name, _value in list(vars(_codes).items()) + list(globals().items()):
    if _name.startswith(("NVML_", "NVMLError_")) or _name == "NVLINK_VERSION_FROM_NVML":
        setattr(FakeNvml, _name, _value)
del _name, _value
