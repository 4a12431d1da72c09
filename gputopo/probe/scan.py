"""Scan a machine: NVML for the GPUs and links, the host's sysfs/lspci for IOMMU and ACS.

`read_machine` is the one sequence both a real scan and a simulated one run; only the NVML
library object and the host root/command runner differ.
"""

from __future__ import annotations

import socket

from gputopo.model import Topology


def read_machine(lib, root, run, machine: str, source: str, simulated: bool = False) -> Topology:
    """Read GPUs, links and host facts through an initialised NVML library object."""
    from gputopo.probe.host import read_host
    from gputopo.probe.nvml_reader import gpu_bus_ids, read_topology

    host = read_host(root=root, run=run, gpu_bus_ids=gpu_bus_ids(lib))
    return read_topology(lib, host=host, machine=machine, source=source, simulated=simulated,
                         sysfs_root=root)


def scan_real() -> Topology:
    """Read this machine. Raises NoHardwareError when there is no driver or no GPU."""
    from gputopo.probe.host import default_run
    from gputopo.probe.nvml_lib import close_nvml, load_nvml

    lib = load_nvml()
    try:
        return read_machine(lib, "/", default_run, machine=socket.gethostname(), source="nvml")
    finally:
        close_nvml(lib)
