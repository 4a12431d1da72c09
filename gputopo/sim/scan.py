"""Scan a simulated machine with the very same probe code as a real one.

The probe reads the description's fake NVML (a pynvml look-alike) and a fake host root folder
with its lspci answers; nothing in the probe knows it is simulated. The result is marked
``simulated`` and its source names the machine, so every output can say SIMULATED.
"""

from __future__ import annotations

from gputopo.model import Topology


def scan_simulated(name_or_path: str, saved_kernel_log=None, **fake_nvml_options) -> Topology:
    """Load a description (built-in name or TOML path) and scan it. UsageError/InputFileError on bad input.
    ``saved_kernel_log``: (text, where from) read for Xid events instead of the machine's own log."""
    from gputopo.sim.description import load_description

    return scan_description(load_description(name_or_path), saved_kernel_log=saved_kernel_log,
                            **fake_nvml_options)


def scan_description(desc, saved_kernel_log=None, **fake_nvml_options) -> Topology:
    from gputopo.probe.scan import read_machine
    from gputopo.sim.fake_host import FakeHost
    from gputopo.sim.fake_nvml import FakeNvml

    lib = FakeNvml(desc, **fake_nvml_options)
    lib.nvmlInit()
    try:
        with FakeHost(desc) as fake_host:
            return read_machine(lib, fake_host.root, fake_host.run, machine=desc.name,
                                source=f"sim:{desc.name}", simulated=True,
                                saved_kernel_log=saved_kernel_log)
    finally:
        lib.nvmlShutdown()
