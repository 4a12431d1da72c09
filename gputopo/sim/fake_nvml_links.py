"""The fake NVML's NVLink getters (per link: state, version, remote PCI info and type, error
counters; the link-count field) and its pair calls (topology common ancestor, P2P status),
answered from a simulated machine's description (see gputopo.sim.fake_nvml).
"""

from __future__ import annotations

import ctypes
from typing import Tuple

from gputopo.model.topology import NVLINK_ERROR_COUNTERS, P2P_CAPS
from gputopo.probe.nvml_codes import NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_SUPPORTED

from .fake_nvml_constants import (NVLINK_VERSION_TO_NVML, NVML_FI_DEV_NVLINK_LINK_COUNT,
                                  NVML_NVLINK_DEVICE_TYPE_GPU, NVML_NVLINK_DEVICE_TYPE_SWITCH,
                                  NVML_NVLINK_DEVICE_TYPE_UNKNOWN, NVML_NVLINK_ERROR_DL_ECC_DATA,
                                  NVML_NVLINK_VERSION_INVALID, NVML_TOPOLOGY_INTERNAL,
                                  NVML_VALUE_TYPE_UNSIGNED_INT, P2P_STATUS_CODE, TOPOLOGY_LEVEL_OF_KIND)
from .fake_nvml_plumbing import DeviceHandle, NvmlPlumbing, device_call, nvmlPciInfo_t
from .pci import PciAddress


class NvLinkCalls(NvmlPlumbing):
    """Per NVLink port of one GPU (a GPU without NVLink: NOT_SUPPORTED; past the last port:
    INVALID_ARGUMENT)."""

    @device_call()
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



@device_call(2)
def nvmlDeviceGetTopologyCommonAncestor(self, i, j):
    if i == j:
        return NVML_TOPOLOGY_INTERNAL
    return TOPOLOGY_LEVEL_OF_KIND[self.desc.pcie_class(i, j).kind]


@device_call(2)
def nvmlDeviceGetP2PStatus(self, i, j, p2pIndex):
    if isinstance(p2pIndex, bool) or not isinstance(p2pIndex, int):
        raise ctypes.ArgumentError("argument 3: TypeError: Don't know how to convert parameter 3")
    if not 0 <= p2pIndex < len(P2P_CAPS):
        self._raise(NVML_ERROR_INVALID_ARGUMENT)
    if i == j:
        self._raise(NVML_ERROR_INVALID_ARGUMENT)
    return self._p2p_codes(i, j)[p2pIndex]


class PairCalls(NvmlPlumbing):
    """Calls on two GPUs. A scan makes six per pair: 3 million on 1,024 GPUs. So the common case
    (handles of this NVML, valid arguments, nothing injected) is answered inline from per-pair
    tables; anything else goes through the checked calls above (device_call), which answer the
    same and raise what pynvml raises. Either way the call is counted once."""

    _checked_ancestor = nvmlDeviceGetTopologyCommonAncestor
    _checked_p2p = nvmlDeviceGetP2PStatus

    def nvmlDeviceGetTopologyCommonAncestor(self, *args):
        if len(args) == 2 and self._plain:
            a, b = args
            if (a.__class__ is DeviceHandle and a._owner is self and b.__class__ is DeviceHandle
                    and b._owner is self and a._index != b._index):
                calls = self.calls
                calls["nvmlDeviceGetTopologyCommonAncestor"] = calls.get("nvmlDeviceGetTopologyCommonAncestor", 0) + 1
                return TOPOLOGY_LEVEL_OF_KIND[self.desc.pcie_class(a._index, b._index).kind]
        return self._checked_ancestor(*args)

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
        return self._checked_p2p(*args)

    def _p2p_codes(self, i: int, j: int) -> Tuple[int, ...]:
        """The pair's NVML P2P status code per capability (P2P_CAPS order), worked out once."""
        key = (i, j) if i < j else (j, i)
        codes = self._p2p_cache.get(key)
        if codes is None:
            status = self.desc.p2p_status(i, j)
            codes = self._p2p_cache[key] = tuple(P2P_STATUS_CODE[status[c]] for c in P2P_CAPS)
        return codes
