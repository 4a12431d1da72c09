"""A pynvml look-alike answering for a simulated machine.

It implements exactly the NVML surface gputopo's probe reads (CONTRACTS.md), with pynvml's
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

Test hooks: ``lost`` GPU indices (every per-device call raises GPU_IS_LOST (15); getting the
handle still works, as with real NVML), ``unsupported`` function names (NOT_SUPPORTED (3)),
``missing`` function names (not attributes at all: AttributeError, like old bindings), and
``errors`` {(function name, GPU index or None for any/system): NVML code}.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Dict, Iterable, Optional, Tuple

from gputopo.model.topology import NVLINK_ERROR_COUNTERS, P2P_CAPS, P2P_STATUS_NAMES
from gputopo.probe import nvml_codes as _codes  # plain data: the fake never imports pynvml
from gputopo.probe.nvml_codes import (NVML_ERROR_GPU_IS_LOST, NVML_ERROR_INVALID_ARGUMENT,
                                      NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_UNINITIALIZED)

from .health import install_health_calls
from .pci import PciAddress

# --------------------------------------------------------------------------- NVML constants
# Return codes, their names and messages: gputopo.probe.nvml_codes (NVML's numbers, written once
# for the probe and this fake; every NVML_ERROR_* is on the fake too, see the end of the module).
NVML_TOPOLOGY_INTERNAL = 0
NVML_TOPOLOGY_SINGLE = 10
NVML_TOPOLOGY_MULTIPLE = 20
NVML_TOPOLOGY_HOSTBRIDGE = 30
NVML_TOPOLOGY_NODE = 40
NVML_TOPOLOGY_CPU = 40
NVML_TOPOLOGY_SYSTEM = 50
_LEVEL_OF_KIND = {"PIX": 10, "PXB": 20, "PHB": 30, "NODE": 40, "SYS": 50}

NVML_NVLINK_MAX_LINKS = 18
NVML_FI_DEV_NVLINK_LINK_COUNT = 91
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
NVLINK_VERSION_FROM_NVML = _codes.NVLINK_GENERATION

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
_P2P_CODE = {name: code for code, name in P2P_STATUS_NAMES.items()}

NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1


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
        return _codes.PYNVML_MESSAGES.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other):  # as pynvml (which makes the errors unhashable, as here)
        return self.value == getattr(other, "value", None)

    __hash__ = None  # type: ignore[assignment]


def _make_error_classes() -> Dict[str, type]:
    out = {}
    for code in _codes.ERROR_NAMES:
        name = _codes.pynvml_class_name(code)
        cls = type(name, (NVMLError,), {
            "__new__": lambda typ, *args, _code=code: NVMLError.__new__(typ, _code),
            "__init__": lambda self, *args, _code=code: NVMLError.__init__(self, _code),
        })
        NVMLError._valClassMapping[code] = cls
        out[name] = cls
    return out


_ERROR_CLASSES = _make_error_classes()
globals().update(_ERROR_CLASSES)


# --------------------------------------------------------------------------- small structs


class _DeviceHandle:
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


# --------------------------------------------------------------------------- the fake


def _system(fn):
    """A system call: needs nvmlInit; injected errors / unsupported apply."""
    name = fn.__name__

    @functools.wraps(fn)
    def wrapper(self, *args):
        self._check(name, ())
        return fn(self, *args)

    return wrapper


def _device(n_handles=1):
    """A per-device call taking ``n_handles`` handles first: they are resolved to GPU indices."""

    def deco(fn):
        name = fn.__name__

        @functools.wraps(fn)
        def wrapper(self, *args):
            if len(args) < n_handles:
                raise TypeError(f"{name}() missing device handle")
            if n_handles == 1:
                indices = (self._index_of(args[0]),)
            else:
                indices = (self._index_of(args[0]), self._index_of(args[1]))
            self._check(name, indices)
            return fn(self, *indices, *args[n_handles:])

        return wrapper

    return deco


class _Missing:
    """A class attribute that does not exist for ``hasattr``/``getattr`` (AttributeError)."""

    def __init__(self, name):
        self.name = name

    def __get__(self, obj, objtype=None):
        raise AttributeError(f"module 'pynvml' has no attribute '{self.name}'")


class FakeNvml:
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
        self._handles = [_DeviceHandle(self, k) for k in range(len(desc.gpus))]
        self._addrs = [PciAddress.parse(g.bus_id) for g in desc.gpus]
        self.calls: Dict[str, int] = {}
        self._p2p_cache: Dict[Tuple[int, int], Dict[str, str]] = {}
        missing = tuple(missing)
        if missing:
            for m in missing:
                if not m.startswith("nvml"):
                    raise ValueError(f"missing names NVML functions (nvml...), got {m!r}")
            self.__class__ = type("FakeNvml", (FakeNvml,), {m: _Missing(m) for m in missing})

    # ------------------------------------------------------------------ plumbing
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
        if handle.__class__ is not _DeviceHandle or handle._owner is not self:
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

    # ------------------------------------------------------------------ system
    def nvmlInit(self):
        self._check("nvmlInit", ())
        self._init_count += 1

    def nvmlShutdown(self):
        self._check("nvmlShutdown", ())
        self._init_count -= 1

    @_system
    def nvmlSystemGetDriverVersion(self):
        return self._text(self.desc.host.driver_version)

    @_system
    def nvmlSystemGetNVMLVersion(self):
        return self._text(self.desc.host.nvml_version)

    @_system
    def nvmlSystemGetCudaDriverVersion(self):
        return int(self.desc.host.cuda_driver_version)

    @_system
    def nvmlDeviceGetCount(self):
        return len(self.desc.gpus)

    @_system
    def nvmlDeviceGetHandleByIndex(self, index):
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self._handles):
            self._raise(NVML_ERROR_INVALID_ARGUMENT)
        key = ("nvmlDeviceGetHandleByIndex", index)
        if key in self.errors:
            self._raise(self.errors[key])
        return self._handles[index]

    # ------------------------------------------------------------------ one device
    @_device()
    def nvmlDeviceGetName(self, i):
        return self._text(self._gpu(i).name)

    @_device()
    def nvmlDeviceGetUUID(self, i):
        return self._text(self._gpu(i).uuid)

    @_device()
    def nvmlDeviceGetPciInfo(self, i):
        return nvmlPciInfo_t(self._addrs[i], self._gpu(i).pci_device_id, self.bytes_strings)

    @_device()
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

    @_device()
    def nvmlDeviceGetCpuAffinity(self, i, cpuSetSize):
        if isinstance(cpuSetSize, bool) or not isinstance(cpuSetSize, int) or cpuSetSize <= 0:
            self._raise(NVML_ERROR_INVALID_ARGUMENT)
        cpus = self._gpu(i).cpu_affinity
        if cpus is None:
            self._raise(NVML_ERROR_NOT_SUPPORTED)
        return _cpulist_words(cpus, cpuSetSize)

    @_device()
    def nvmlDeviceGetCurrPcieLinkGeneration(self, i):
        return self._gpu(i).pcie_gen

    @_device()
    def nvmlDeviceGetMaxPcieLinkGeneration(self, i):
        return self._gpu(i).pcie_gen_max

    @_device()
    def nvmlDeviceGetCurrPcieLinkWidth(self, i):
        return self._gpu(i).pcie_width

    @_device()
    def nvmlDeviceGetMaxPcieLinkWidth(self, i):
        return self._gpu(i).pcie_width_max

    @_device()
    def nvmlDeviceGetPcieReplayCounter(self, i):
        return self._gpu(i).pcie_replay

    @_device()
    def nvmlDeviceGetMigMode(self, i):
        mode = self._gpu(i).mig_mode
        if mode is None:
            self._raise(NVML_ERROR_NOT_SUPPORTED)
        value = NVML_DEVICE_MIG_ENABLE if mode == "enabled" else NVML_DEVICE_MIG_DISABLE
        return [value, value]

    # ------------------------------------------------------------------ NVLink
    @_device()
    def nvmlDeviceGetFieldValues(self, i, fieldIds):
        """pynvml's list of nvmlFieldValue_t: only NVML_FI_DEV_NVLINK_LINK_COUNT is answered
        (the GPU's NVLinks); any other field comes back with nvmlReturn NOT_SUPPORTED."""
        from types import SimpleNamespace

        out = []
        for fid in fieldIds:
            ok = fid == NVML_FI_DEV_NVLINK_LINK_COUNT
            out.append(SimpleNamespace(
                fieldId=fid, scopeId=0, timestamp=0, latencyUsec=0,
                valueType=NVML_VALUE_TYPE_UNSIGNED_INT,
                nvmlReturn=0 if ok else NVML_ERROR_NOT_SUPPORTED,
                value=SimpleNamespace(uiVal=len(self._gpu(i).nvlinks) if ok else 0)))
        return out

    @_device()
    def nvmlDeviceGetNvLinkState(self, i, link):
        return 1 if self._link(i, link).active else 0

    @_device()
    def nvmlDeviceGetNvLinkVersion(self, i, link):
        self._link(i, link)
        return NVLINK_VERSION_TO_NVML.get(self._gpu(i).nvlink_version or 0, NVML_NVLINK_VERSION_INVALID)

    @_device()
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

    @_device()
    def nvmlDeviceGetNvLinkRemoteDeviceType(self, i, link):
        lk = self._link(i, link)
        if lk.remote_bus_id is None:
            return NVML_NVLINK_DEVICE_TYPE_UNKNOWN
        return NVML_NVLINK_DEVICE_TYPE_SWITCH if lk.remote_type == "SWITCH" else NVML_NVLINK_DEVICE_TYPE_GPU

    @_device()
    def nvmlDeviceGetNvLinkErrorCounter(self, i, link, counter):
        lk = self._link(i, link)
        if isinstance(counter, bool) or not isinstance(counter, int) or not 0 <= counter <= 4:
            self._raise(NVML_ERROR_INVALID_ARGUMENT)
        if counter == NVML_NVLINK_ERROR_DL_ECC_DATA:
            return 0
        return int(lk.errors.get(NVLINK_ERROR_COUNTERS[counter], 0))

    # ------------------------------------------------------------------ pairs
    @_device(2)
    def nvmlDeviceGetTopologyCommonAncestor(self, i, j):
        if i == j:
            return NVML_TOPOLOGY_INTERNAL
        return _LEVEL_OF_KIND[self.desc.pcie_class(i, j).kind]

    @_device(2)
    def nvmlDeviceGetP2PStatus(self, i, j, p2pIndex):
        if isinstance(p2pIndex, bool) or not isinstance(p2pIndex, int):
            raise ctypes.ArgumentError("argument 3: TypeError: Don't know how to convert parameter 3")
        if not 0 <= p2pIndex < len(P2P_CAPS):
            self._raise(NVML_ERROR_INVALID_ARGUMENT)
        if i == j:
            self._raise(NVML_ERROR_INVALID_ARGUMENT)
        key = (i, j) if i < j else (j, i)
        status = self._p2p_cache.get(key)
        if status is None:
            status = self._p2p_cache[key] = self.desc.p2p_status(i, j)
        return _P2P_CODE[status[P2P_CAPS[p2pIndex]]]


# ECC, retired pages, remapped rows, clocks events, temperature, power, persistence: health.py
install_health_calls(FakeNvml, _device)

# pynvml's module-level names: the error classes and the NVML_* constants, on the fake too.
for _name, _value in list(vars(_codes).items()) + list(globals().items()):
    if _name.startswith(("NVML_", "NVMLError_")) or _name == "NVLINK_VERSION_FROM_NVML":
        setattr(FakeNvml, _name, _value)
del _name, _value
