"""Scan a machine: NVML for the GPUs and links, the host's sysfs/lspci for IOMMU, ACS and NICs.

`read_machine` is the one sequence both a real scan and a simulated one run; only the NVML
library object and the host root/command runner differ.
"""

from __future__ import annotations

import socket

from gputopo.model import Topology


def read_machine(lib, root, run, machine: str, source: str, simulated: bool = False,
                 saved_kernel_log=None) -> Topology:
    """Read GPUs, links, host facts, NICs and GPU health through an initialised NVML library object
    (``saved_kernel_log``: (text, where from) read for Xid events instead of the live kernel log)."""
    from gputopo.model import is_value
    from gputopo.probe.health import read_health
    from gputopo.probe.host import read_host
    from gputopo.probe.gdr_kernel import read_gdr_kernel
    from gputopo.probe.nics import read_nics
    from gputopo.probe.nvml_reader import gpu_bus_ids, read_topology

    host = read_host(root=root, run=run, gpu_bus_ids=gpu_bus_ids(lib))
    topo = read_topology(lib, host=host, machine=machine, source=source, simulated=simulated,
                         sysfs_root=root)
    topo.nics = read_nics(root, {g.nvml_index: g.pci_bus_id for g in topo.gpus
                                 if g.lost is None and is_value(g.pci_bus_id)}, run=run)
    topo.host.gpudirect_rdma = read_gdr_kernel(root, topo.host.kernel)
    return read_health(lib, topo, run, saved_kernel_log=saved_kernel_log)


def scan_real(saved_kernel_log=None) -> Topology:
    """Read this machine. Raises NoHardwareError when there is no driver or no GPU."""
    from gputopo.probe.host import default_run
    from gputopo.probe.nvml_lib import close_nvml, load_nvml

    lib = load_nvml()
    try:
        return read_machine(lib, "/", default_run, machine=socket.gethostname(), source="nvml",
                            saved_kernel_log=saved_kernel_log)
    finally:
        close_nvml(lib)
