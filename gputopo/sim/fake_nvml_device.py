"""The fake NVML's system calls and per-GPU getters (name, UUID, PCI info, NUMA node, CPU
affinity, PCIe link, MIG mode), answered from a simulated machine's description with pynvml's
return shapes (see gputopo.sim.fake_nvml).
"""

from __future__ import annotations

import ctypes

from gputopo.probe.nvml_codes import NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_SUPPORTED

from .fake_nvml_constants import NVML_DEVICE_MIG_DISABLE, NVML_DEVICE_MIG_ENABLE
from .fake_nvml_plumbing import NvmlPlumbing, device_call, nvmlPciInfo_t, system_call


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


class SystemCalls(NvmlPlumbing):
    """nvmlInit/nvmlShutdown, versions, GPU count and handles."""

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



class DeviceCalls(NvmlPlumbing):
    """One GPU's own facts."""

    @device_call()
    def nvmlDeviceGetName(self, i):
        return self._text(self._gpu(i).name)

    @device_call()
    def nvmlDeviceGetUUID(self, i):
        return self._text(self._gpu(i).uuid)

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
