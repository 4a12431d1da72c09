"""Simulated machine descriptions: the TOML format, its loader and validator (the public entry).

Import from here: ``load_description`` (a built-in name, ``synthetic-<N>gpu`` or a path),
``parse_description`` (TOML text), ``build_description`` (parsed TOML) and the records they
build (Description, GpuDesc, NvLinkDesc, HostDesc, Fault, LinkModel). The work is done by the
modules this one re-exports, lowest first: toml_reader (TOML with error lines), records and fault
(the records), description_context (file/key/line errors), description_pairs, _gpus, _nvlinks,
_faults, _host (one table each), description_build (the machine), description_files (text and
``extends``), machine_lookup (which machine a name means; it uses catalog and generate).

A description says what a scan of the machine would see (GPUs, NVLinks, PCIe, pair classes, P2P
status, host IOMMU/ACS facts), how fast each path is when healthy (the link model), and which
faults the simulated transport applies to the bytes it moves. The format is documented with a
complete example in ``docs/sim-format.md``; in short::

    name = "my-box"                      # optional, defaults to the file name
    summary = "one line"
    matrix = \"\"\"<nvidia-smi topo -m text>\"\"\"   # or [pairs], or nvswitch = true
    [defaults]   name = "NVIDIA A100-SXM4-80GB", pcie_gen = 4, pcie_width = 16, ...
    [[gpu]]      bus_id = "0000:07:00.0", numa_node = 0, cpu_affinity = "0-31", overrides...
    [host]       iommu = "translated", acs_redirect = true, driver_version = "535.154.05", ...
    [link_model] NODE = { gbps = 24.0, latency_us = 5.0 }, ...
    [p2p]        SYS = { read = "CNS" }, "0,5" = "NS", ...
    [[fault]]    where = "class:SYS", what = "corrupt", path = "p2p", rate = 0.001

Hardware states a scan sees are applied while building (description_build.py): a GPU's ``nvlinks_down`` and ``link_down`` faults
make NVLinks inactive (so the pair's class drops to its PCIe class), ``downtrained`` faults lower
the GPU's current PCIe width/generation. Everything else a fault does (corrupt, nan, slow, the
throughput loss of a downtrained link, hang, crash) is the transport's job: ``link_model``
stays the healthy model of the pair's class.

Errors in a file raise :class:`gputopo.errors.InputFileError` naming the file, the key
(``gpu[3].numa_node``, ``fault[0].what``) and, where it can be found, the line.
"""

from __future__ import annotations

from .description_build import Description, build_description
from .description_files import parse_description
from .records import FAULT_KINDS, FAULT_PATHS, Fault
from .machine_lookup import SYNTHETIC_GPUS, SYNTHETIC_HELP, load_description
from .records import (CPU_VENDORS, DEFAULT_EFFICIENCY, DEFAULT_LATENCY_US, DEFAULT_NVSWITCHES, IOMMU_MODES,
                      P2P_STATUSES, PCIE_CLASS_DERATE, GpuDesc, HostDesc, LinkModel, MachineDesc, NvLinkDesc)
from .toml_reader import toml_loads as _toml_loads  # the one TOML reader (with line numbers in errors)

__all__ = [
    "CPU_VENDORS", "DEFAULT_EFFICIENCY", "DEFAULT_LATENCY_US", "DEFAULT_NVSWITCHES", "FAULT_KINDS",
    "FAULT_PATHS", "IOMMU_MODES", "P2P_STATUSES", "PCIE_CLASS_DERATE", "SYNTHETIC_GPUS", "SYNTHETIC_HELP",
    "Description", "Fault", "GpuDesc", "HostDesc", "LinkModel", "MachineDesc", "NvLinkDesc",
    "build_description", "load_description", "parse_description", "_toml_loads",
]
