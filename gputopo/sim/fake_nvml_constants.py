"""The NVML constants the fake NVML answers with, under pynvml's names and values
(nvidia-ml-py 13.x), and the tables that turn a simulated machine's facts into them.

Return codes, their names and messages are gputopo.probe.nvml_codes (NVML's numbers, written once
for the probe and the fake); every NVML_* here and there is set on FakeNvml too, as pynvml has
them at module level.
"""

from __future__ import annotations

from gputopo.model.topology import P2P_STATUS_NAMES
from gputopo.probe import nvml_codes as _codes  # plain data: the fake never imports pynvml

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
P2P_STATUS_CODE = {name: code for code, name in P2P_STATUS_NAMES.items()}

NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1
