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

The module reads top down: pynvml's constants, the error classes, the handle and PCI info
struct, the checks every call goes through (``system_call`` / ``device_call``), then
:class:`FakeNvml` with the system calls, one GPU's getters, the NVLink getters and the pair calls.
Two topics keep their calls beside what the description declares of them and add them to
FakeNvml here: sim.health (ECC, retired pages, remapped rows, clocks, temperature, power,
persistence) and sim.fabric (GPU fabric info).
"""

from __future__ import annotations

import ctypes
import functools
from types import SimpleNamespace
from typing import TYPE_CHECKING, Dict, Iterable, Optional, Tuple

from gputopo.model.bus_id import PciAddress
from gputopo.model.topology import NVLINK_ERROR_COUNTERS, P2P_CAPS, P2P_STATUS_NAMES
from gputopo.probe import nvml_codes  # plain data: the fake never imports pynvml
from gputopo.probe.nvml_codes import (NVML_ERROR_GPU_IS_LOST, NVML_ERROR_INVALID_ARGUMENT,
                                      NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_UNINITIALIZED)

from .fabric import BINDING_NAMES as FABRIC_BINDING_NAMES
from .fabric import install_fabric_calls
from .health import install_health_calls
from .processes import install_process_calls

if TYPE_CHECKING:
    from .records import MachineDesc

__all__ = ["FakeNvml", "NVLINK_VERSION_FROM_NVML", "NVLINK_VERSION_TO_NVML", "NVMLError", "nvmlPciInfo_t"]


# --------------------------------------------------------------------------- constants

# pynvml's names and values (nvidia-ml-py 13.x). Return codes, their names and messages are
# gputopo.probe.nvml_codes (NVML's numbers, written once for the probe and the fake); every NVML_*
# here and there is a module-level name and a FakeNvml attribute too, as pynvml has them.

NVML_TOPOLOGY_INTERNAL = 0
NVML_TOPOLOGY_SINGLE = 10
NVML_TOPOLOGY_MULTIPLE = 20
NVML_TOPOLOGY_HOSTBRIDGE = 30
NVML_TOPOLOGY_NODE = 40
NVML_TOPOLOGY_CPU = 40
NVML_TOPOLOGY_SYSTEM = 50
TOPOLOGY_LEVEL_OF_KIND = {"PIX": 10, "PXB": 20, "PHB": 30, "NODE": 40, "SYS": 50}

NVML_NVLINK_MAX_LINKS = 18
NVML_FI_DEV_NVLINK_LINK_COUNT = 91
NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_NVLINK_DEVICE_TYPE_GPU = 0
NVML_NVLINK_DEVICE_TYPE_IBMNPU = 1
NVML_NVLINK_DEVICE_TYPE_SWITCH = 2
NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 255
NVML_NVLINK_ERROR_DL_REPLAY = 0
NVML_NVLINK_ERROR_DL_RECOVERY = 1
NVML_NVLINK_ERROR_DL_CRC_FLIT = 2
NVML_NVLINK_ERROR_DL_CRC_DATA = 3
NVML_NVLINK_ERROR_DL_ECC_DATA = 4
NVML_NVLINK_VERSION_INVALID = 0
NVML_NVLINK_VERSION_1_0 = 1
NVML_NVLINK_VERSION_2_0 = 2
NVML_NVLINK_VERSION_2_2 = 3
NVML_NVLINK_VERSION_3_0 = 4
NVML_NVLINK_VERSION_3_1 = 5
NVML_NVLINK_VERSION_4_0 = 6
NVML_NVLINK_VERSION_5_0 = 7
#: NVLink generation -> what nvmlDeviceGetNvLinkVersion returns for it (A100/RTX 30: 3.1).
NVLINK_VERSION_TO_NVML = {1: 1, 2: 2, 3: 5, 4: 6, 5: 7, 6: 8}
#: nvmlNvlinkVersion_t -> NVLink generation (what a reader should map the answer back with).
NVLINK_VERSION_FROM_NVML = nvml_codes.NVLINK_GENERATION

NVML_P2P_CAPS_INDEX_READ = (0,)  # sic: a stray comma in nvidia-ml-py makes this a tuple
NVML_P2P_CAPS_INDEX_WRITE = 1
NVML_P2P_CAPS_INDEX_NVLINK = 2
NVML_P2P_CAPS_INDEX_ATOMICS = 3
NVML_P2P_CAPS_INDEX_PCI = 4
NVML_P2P_CAPS_INDEX_PROP = 4
NVML_P2P_CAPS_INDEX_UNKNOWN = 5
NVML_P2P_STATUS_OK = 0
NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED = 1
NVML_P2P_STATUS_GPU_NOT_SUPPORTED = 2
NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED = 3
NVML_P2P_STATUS_DISABLED_BY_REGKEY = 4
NVML_P2P_STATUS_NOT_SUPPORTED = 5
NVML_P2P_STATUS_UNKNOWN = 6
P2P_STATUS_CODE = {name: code for code, name in P2P_STATUS_NAMES.items()}

NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1

# the return codes (NVML_SUCCESS, NVML_ERROR_*) at module level too, as pynvml has them
globals().update({k: v for k, v in vars(nvml_codes).items() if k.startswith("NVML_")})


# --------------------------------------------------------------------------- errors


class NVMLError(Exception):
    """Like pynvml.NVMLError: ``NVMLError(code)`` builds the subclass for that code; ``.value``."""

    _valClassMapping: Dict[int, type] = {}

    def __new__(cls, value):
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value):
        super().__init__(value)
        self.value = value

    def __str__(self):
        return nvml_codes.PYNVML_MESSAGES.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other):  # as pynvml (which makes the errors unhashable, as here)
        return self.value == getattr(other, "value", None)

    __hash__ = None  # type: ignore[assignment]


def _make_error_classes() -> Dict[str, type]:
    out = {}
    for code in nvml_codes.ERROR_NAMES:
        name = nvml_codes.pynvml_class_name(code)
        cls = type(name, (NVMLError,), {
            "__new__": lambda typ, *args, _code=code: NVMLError.__new__(typ, _code),
            "__init__": lambda self, *args, _code=code: NVMLError.__init__(self, _code),
        })
        NVMLError._valClassMapping[code] = cls
        out[name] = cls
    return out


#: pynvml's error subclasses by name (``NVMLError_GpuIsLost``...), module-level names here too.
ERROR_CLASSES = _make_error_classes()
globals().update(ERROR_CLASSES)


# --------------------------------------------------------------------------- small structs


class DeviceHandle:
    """Opaque device handle (pynvml's is a c_nvmlDevice_t pointer)."""

    __slots__ = ("_owner", "_index")

    def __init__(self, owner, index):
        self._owner = owner
        self._index = index

    def __repr__(self):
        return f"<c_nvmlDevice_t object at {id(self):#x}>"


class nvmlPciInfo_t:
    """The fields of pynvml's nvmlPciInfo_t the probe can read (strings decoded like pynvml)."""

    def __init__(self, addr: PciAddress, device_id: int, as_bytes: bool):
        conv = (lambda s: s.encode()) if as_bytes else (lambda s: s)
        self.busId = conv(addr.nvml)
        self.busIdLegacy = conv(f"{addr.domain:04X}:{addr.bus:02X}:{addr.device:02X}.{addr.function}")
        self.domain = addr.domain
        self.bus = addr.bus
        self.device = addr.device
        self.pciDeviceId = (device_id << 16) | 0x10DE
        self.pciSubSystemId = (0x1000 + (device_id & 0xFF)) << 16 | 0x10DE

    def __str__(self):
        return (f"nvmlPciInfo_t(busId: {self.busId}, domain: 0x{self.domain:08X}, bus: 0x{self.bus:02X}, "
                f"device: 0x{self.device:02X}, pciDeviceId: 0x{self.pciDeviceId:08X})")


def _cpulist_words(cpulist: str, n_words: int):
    """A CPU list ("0-31,64-95") as pynvml returns an affinity: ``n_words`` c_ulonglong words,
    word 0 holding CPUs 0-63 (CPUs past the last word are left out)."""
    words = (ctypes.c_ulonglong * n_words)()
    values = [0] * n_words
    for part in cpulist.split(","):
        lo, _, hi = part.partition("-")
        for cpu in range(int(lo), int(hi or lo) + 1):
            w = cpu // 64
            if w < n_words:
                values[w] |= 1 << (cpu % 64)
    for k, v in enumerate(values):
        words[k] = v
    return words


# --------------------------------------------------------------------------- the checks of every call


def system_call(fn):
    """A system call: needs nvmlInit; injected errors / unsupported apply."""
    name = fn.__name__

    @functools.wraps(fn)
    def wrapper(self, *args):
        self._check(name, ())
        return fn(self, *args)

    return wrapper


def device_call(n_handles=1, name: Optional[str] = None):
    """A per-device call taking ``n_handles`` handles first: they are resolved to GPU indices.
    ``name``: the NVML function it answers (counted, and matched by injected errors and
    ``unsupported``), when not the wrapped function's own name. (The two-GPU calls a scan makes
    per pair answer the common case inline before coming here: FakeNvml's pair calls.)"""

    def deco(fn):
        call = name or fn.__name__

        @functools.wraps(fn)
        def wrapper(self, *args):
            if len(args) < n_handles:
                raise TypeError(f"{call}() missing device handle")
            indices: Tuple[int, ...]
            if n_handles == 1:
                indices = (self._index_of(args[0]),)
            else:
                indices = (self._index_of(args[0]), self._index_of(args[1]))
            self._check(call, indices)
            return fn(self, *indices, *args[n_handles:])

        return wrapper

    return deco


@device_call(2, "nvmlDeviceGetTopologyCommonAncestor")
def _checked_common_ancestor(self, i, j):
    if i == j:
        return NVML_TOPOLOGY_INTERNAL
    return TOPOLOGY_LEVEL_OF_KIND[self.desc.pcie_class(i, j).kind]


@device_call(2, "nvmlDeviceGetP2PStatus")
def _checked_p2p_status(self, i, j, p2pIndex):
    if isinstance(p2pIndex, bool) or not isinstance(p2pIndex, int):
        raise ctypes.ArgumentError("argument 3: TypeError: Don't know how to convert parameter 3")
    if not 0 <= p2pIndex < len(P2P_CAPS):
        self._raise(NVML_ERROR_INVALID_ARGUMENT)
    if i == j:
        self._raise(NVML_ERROR_INVALID_ARGUMENT)
    return self._p2p_codes(i, j)[p2pIndex]


class _Missing:
    """A class attribute that does not exist for ``hasattr``/``getattr`` (AttributeError)."""

    def __init__(self, name):
        self.name = name

    def __get__(self, obj, objtype=None):
        raise AttributeError(f"module 'pynvml' has no attribute '{self.name}'")


# --------------------------------------------------------------------------- the library


class FakeNvml:
    """NVML for a simulated machine (see the module docstring)."""

    NVMLError = NVMLError

    def __init__(self, desc: "MachineDesc", *, lost: Iterable[int] = (), unsupported: Iterable[str] = (),
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

    # ------------------------------------------------------------------ what every call uses

    @property
    def _plain(self) -> bool:
        """Initialised, and nothing injected that a call must check for (the pair calls)."""
        return self._init_count > 0 and not (self.errors or self.unsupported or self.lost)

    def _raise(self, code: int):
        raise NVMLError(code)

    def _check(self, name: str, indices: Tuple[int, ...]):
        calls = self.calls
        calls[name] = calls.get(name, 0) + 1
        if self._init_count <= 0 and name != "nvmlInit":
            self._raise(NVML_ERROR_UNINITIALIZED)
        errors = self.errors
        if errors:
            for key in [(name, None)] + [(name, i) for i in indices]:
                if key in errors:
                    self._raise(errors[key])
        if self.unsupported and name in self.unsupported:
            self._raise(NVML_ERROR_NOT_SUPPORTED)
        if self.lost:
            for i in indices:
                if i in self.lost:
                    self._raise(NVML_ERROR_GPU_IS_LOST)

    def _index_of(self, handle) -> int:
        if handle.__class__ is not DeviceHandle or handle._owner is not self:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return handle._index

    def _text(self, s: str):
        return s.encode() if self.bytes_strings else s

    def _gpu(self, i):
        return self.desc.gpus[i]

    def _link(self, i, link):
        if isinstance(link, bool) or not isinstance(link, int):
            raise ctypes.ArgumentError(f"argument 2: TypeError: wrong type ({type(link).__name__})")
        links = self._gpu(i).nvlinks
        if not links:
            self._raise(NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < len(links):
            self._raise(NVML_ERROR_INVALID_ARGUMENT)
        return links[link]

    # ------------------------------------------------------------------ system: init, versions, handles

    def nvmlInit(self):
        self._check("nvmlInit", ())
        self._init_count += 1

    def nvmlShutdown(self):
        self._check("nvmlShutdown", ())
        self._init_count -= 1

    @system_call
    def nvmlSystemGetDriverVersion(self):
        return self._text(self.desc.host.driver_version)

    @system_call
    def nvmlSystemGetNVMLVersion(self):
        return self._text(self.desc.host.nvml_version)

    @system_call
    def nvmlSystemGetCudaDriverVersion(self):
        return int(self.desc.host.cuda_driver_version)

    @system_call
    def nvmlDeviceGetCount(self):
        return len(self.desc.gpus)

    @system_call
    def nvmlDeviceGetHandleByIndex(self, index):
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self._handles):
            self._raise(NVML_ERROR_INVALID_ARGUMENT)
        key = ("nvmlDeviceGetHandleByIndex", index)
        if key in self.errors:
            self._raise(self.errors[key])
        return self._handles[index]

    # ------------------------------------------------------------------ one GPU's own facts

    @device_call()
    def nvmlDeviceGetName(self, i):
        return self._text(self._gpu(i).name)

    @device_call()
    def nvmlDeviceGetUUID(self, i):
        return self._text(self._gpu(i).uuid)

    @device_call()
    def nvmlDeviceGetMinorNumber(self, i):
        return self._gpu(i).minor

    @device_call()
    def nvmlDeviceGetPciInfo(self, i):
        return nvmlPciInfo_t(self._addrs[i], self._gpu(i).pci_device_id, self.bytes_strings)

    @device_call()
    def nvmlDeviceGetNumaNodeId(self, i):
        # The GPU memory's own NUMA node: only coherent CPU-GPU systems (Grace Hopper, GB200)
        # have one; a real driver on an x86 host answers NOT_SUPPORTED. Every simulated host is
        # x86 (sim.records.CPU_VENDORS); the socket's node is in the fake host's sysfs.
        self._gpu(i)
        if self.desc.host.cpu_vendor in ("intel", "amd"):
            self._raise(NVML_ERROR_NOT_SUPPORTED)
        node = self._gpu(i).numa_node
        if node is None:
            self._raise(NVML_ERROR_NOT_SUPPORTED)
        return node

    @device_call()
    def nvmlDeviceGetCpuAffinity(self, i, cpuSetSize):
        if isinstance(cpuSetSize, bool) or not isinstance(cpuSetSize, int) or cpuSetSize <= 0:
            self._raise(NVML_ERROR_INVALID_ARGUMENT)
        cpus = self._gpu(i).cpu_affinity
        if cpus is None:
            self._raise(NVML_ERROR_NOT_SUPPORTED)
        return _cpulist_words(cpus, cpuSetSize)

    @device_call()
    def nvmlDeviceGetCurrPcieLinkGeneration(self, i):
        return self._gpu(i).pcie_gen

    @device_call()
    def nvmlDeviceGetMaxPcieLinkGeneration(self, i):
        return self._gpu(i).pcie_gen_max

    @device_call()
    def nvmlDeviceGetCurrPcieLinkWidth(self, i):
        return self._gpu(i).pcie_width

    @device_call()
    def nvmlDeviceGetMaxPcieLinkWidth(self, i):
        return self._gpu(i).pcie_width_max

    @device_call()
    def nvmlDeviceGetPcieReplayCounter(self, i):
        return self._gpu(i).pcie_replay

    @device_call()
    def nvmlDeviceGetMigMode(self, i):
        mode = self._gpu(i).mig_mode
        if mode is None:
            self._raise(NVML_ERROR_NOT_SUPPORTED)
        value = NVML_DEVICE_MIG_ENABLE if mode == "enabled" else NVML_DEVICE_MIG_DISABLE
        return [value, value]

    # ------------------------------------------------------------------ NVLinks, per port
    # (a GPU without NVLink: NOT_SUPPORTED; past the last port: INVALID_ARGUMENT)

    @device_call()
    def nvmlDeviceGetFieldValues(self, i, fieldIds):
        """pynvml's list of nvmlFieldValue_t: NVML_FI_DEV_NVLINK_LINK_COUNT (the GPU's NVLinks) and
        NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (where the description sets ``recovery_action``) are
        answered; any other field comes back with nvmlReturn NOT_SUPPORTED."""
        from gputopo.sim.health import recovery_action_value

        out = []
        for fid in fieldIds:
            value: Optional[int] = None
            if fid == NVML_FI_DEV_NVLINK_LINK_COUNT:
                value = len(self._gpu(i).nvlinks)
            elif fid == NVML_FI_DEV_GET_GPU_RECOVERY_ACTION:
                value = recovery_action_value(self, i)
            out.append(SimpleNamespace(
                fieldId=fid, scopeId=0, timestamp=0, latencyUsec=0,
                valueType=NVML_VALUE_TYPE_UNSIGNED_INT,
                nvmlReturn=0 if value is not None else NVML_ERROR_NOT_SUPPORTED,
                value=SimpleNamespace(uiVal=value or 0)))
        return out

    @device_call()
    def nvmlDeviceGetNvLinkState(self, i, link):
        return 1 if self._link(i, link).active else 0

    @device_call()
    def nvmlDeviceGetNvLinkVersion(self, i, link):
        lk = self._link(i, link)
        if not lk.active and lk.remote_bus_id is None:  # a port nothing ever trained on (no bridge):
            return NVML_NVLINK_VERSION_INVALID  # an H100's inactive links answer this (cuda-python #2154)
        return NVLINK_VERSION_TO_NVML.get(self._gpu(i).nvlink_version or 0, NVML_NVLINK_VERSION_INVALID)

    @device_call()
    def nvmlDeviceGetNvLinkRemotePciInfo(self, i, link):
        lk = self._link(i, link)
        if lk.remote_bus_id is None:  # nothing plugged into this port
            self._raise(NVML_ERROR_NOT_SUPPORTED)
        remote = PciAddress.parse(lk.remote_bus_id)
        device_id = 0x1AF1 if lk.remote_type == "SWITCH" else self._device_id_at(lk.remote_bus_id)
        return nvmlPciInfo_t(remote, device_id, self.bytes_strings)

    def _device_id_at(self, bus_id: str) -> int:
        for g in self.desc.gpus:
            if g.bus_id == bus_id:
                return g.pci_device_id
        return 0

    @device_call()
    def nvmlDeviceGetNvLinkRemoteDeviceType(self, i, link):
        lk = self._link(i, link)
        if lk.remote_bus_id is None:
            return NVML_NVLINK_DEVICE_TYPE_UNKNOWN
        return NVML_NVLINK_DEVICE_TYPE_SWITCH if lk.remote_type == "SWITCH" else NVML_NVLINK_DEVICE_TYPE_GPU

    @device_call()
    def nvmlDeviceGetNvLinkErrorCounter(self, i, link, counter):
        lk = self._link(i, link)
        if isinstance(counter, bool) or not isinstance(counter, int) or not 0 <= counter <= 4:
            self._raise(NVML_ERROR_INVALID_ARGUMENT)
        if counter == NVML_NVLINK_ERROR_DL_ECC_DATA:
            return 0
        return int(lk.errors.get(NVLINK_ERROR_COUNTERS[counter], 0))

    # ------------------------------------------------------------------ two GPUs
    # A scan makes six calls per pair: 3 million on 1,024 GPUs. So the common case (handles of
    # this NVML, valid arguments, nothing injected) is answered inline from per-pair tables;
    # anything else goes through the checked calls (_checked_common_ancestor,
    # _checked_p2p_status), which answer the same and raise what pynvml raises. Either way the
    # call is counted once.

    def nvmlDeviceGetTopologyCommonAncestor(self, *args):
        if len(args) == 2 and self._plain:
            a, b = args
            if (a.__class__ is DeviceHandle and a._owner is self and b.__class__ is DeviceHandle
                    and b._owner is self and a._index != b._index):
                calls = self.calls
                calls["nvmlDeviceGetTopologyCommonAncestor"] = calls.get("nvmlDeviceGetTopologyCommonAncestor", 0) + 1
                return TOPOLOGY_LEVEL_OF_KIND[self.desc.pcie_class(a._index, b._index).kind]
        return _checked_common_ancestor(self, *args)

    def nvmlDeviceGetP2PStatus(self, *args):
        if len(args) == 3 and self._plain:
            a, b, cap = args
            if (a.__class__ is DeviceHandle and a._owner is self and b.__class__ is DeviceHandle
                    and b._owner is self and cap.__class__ is int and 0 <= cap < len(P2P_CAPS)
                    and a._index != b._index):
                calls = self.calls
                calls["nvmlDeviceGetP2PStatus"] = calls.get("nvmlDeviceGetP2PStatus", 0) + 1
                i, j = a._index, b._index
                codes = self._p2p_cache.get((i, j) if i < j else (j, i)) or self._p2p_codes(i, j)
                return codes[cap]
        return _checked_p2p_status(self, *args)

    def _p2p_codes(self, i: int, j: int) -> Tuple[int, ...]:
        """The pair's NVML P2P status code per capability (P2P_CAPS order), worked out once."""
        key = (i, j) if i < j else (j, i)
        codes = self._p2p_cache.get(key)
        if codes is None:
            status = self.desc.p2p_status(i, j)
            codes = self._p2p_cache[key] = tuple(P2P_STATUS_CODE[status[c]] for c in P2P_CAPS)
        return codes


# ECC, retired pages, remapped rows, clocks events, temperature, power, persistence: health.py
install_health_calls(FakeNvml, device_call)
# GPU fabric info (nvmlDeviceGetGpuFabricInfoV and its structures): fabric.py
install_fabric_calls(FakeNvml, device_call)
# compute running processes (nvmlDeviceGetComputeRunningProcesses): processes.py
install_process_calls(FakeNvml, device_call)
globals().update(FABRIC_BINDING_NAMES)

# pynvml's module-level names: the error classes and the NVML_* constants, on the fake too.
for _name, _value in list(globals().items()):
    if _name.startswith(("NVML_", "NVMLError_")) or _name == "NVLINK_VERSION_FROM_NVML":
        setattr(FakeNvml, _name, _value)
del _name, _value
