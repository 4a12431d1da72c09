"""The plumbing of the fake NVML: pynvml's error classes, the device handle and PCI info struct,
and the checks every call goes through (nvmlInit first, injected errors, unsupported functions,
lost GPUs), applied by the ``system_call`` / ``device_call`` decorators.

The calls themselves are mixins over NvmlPlumbing (fake_nvml_device, fake_nvml_links,
sim.health); gputopo.sim.fake_nvml puts them together as FakeNvml.
"""

from __future__ import annotations

import ctypes
import functools
from typing import TYPE_CHECKING, Dict, FrozenSet, List, Optional, Tuple

from gputopo.probe import nvml_codes as _codes  # plain data: the fake never imports pynvml
from gputopo.probe.nvml_codes import (NVML_ERROR_GPU_IS_LOST, NVML_ERROR_INVALID_ARGUMENT,
                                      NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_UNINITIALIZED)

from .pci import PciAddress

if TYPE_CHECKING:
    from .records import MachineDesc


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


# --------------------------------------------------------------------------- checks


def system_call(fn):
    """A system call: needs nvmlInit; injected errors / unsupported apply."""
    name = fn.__name__

    @functools.wraps(fn)
    def wrapper(self, *args):
        self._check(name, ())
        return fn(self, *args)

    return wrapper


def device_call(n_handles=1):
    """A per-device call taking ``n_handles`` handles first: they are resolved to GPU indices.
    (The two-GPU calls a scan makes per pair answer the common case inline before coming here:
    fake_nvml_links.PairCalls.)"""

    def deco(fn):
        name = fn.__name__

        @functools.wraps(fn)
        def wrapper(self, *args):
            if len(args) < n_handles:
                raise TypeError(f"{name}() missing device handle")
            indices: Tuple[int, ...]
            if n_handles == 1:
                indices = (self._index_of(args[0]),)
            else:
                indices = (self._index_of(args[0]), self._index_of(args[1]))
            self._check(name, indices)
            return fn(self, *indices, *args[n_handles:])

        return wrapper

    return deco


class NvmlPlumbing:
    """What every call of the fake needs: the checks, handle -> GPU index, strings, NVLink ports.
    The state they read (desc, calls, errors, lost...) is set by FakeNvml.__init__; it is declared
    here, once, so that every mixin (and its reader) knows what it may use."""

    desc: "MachineDesc"
    lost: FrozenSet[int]
    unsupported: FrozenSet[str]
    errors: Dict[Tuple[str, Optional[int]], int]
    bytes_strings: bool
    _init_count: int
    _handles: List[DeviceHandle]
    _addrs: List[PciAddress]
    calls: Dict[str, int]
    _p2p_cache: Dict[Tuple[int, int], Tuple[int, ...]]

    @property
    def _plain(self) -> bool:
        """Initialised, and nothing injected that a call must check for (PairCalls)."""
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
