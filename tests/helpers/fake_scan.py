"""The NVML part of a scan of a simulated machine described in a test: the description's text
written under ``tmp_path``, read through the fake NVML by the real NVML reader (no fake host:
for the whole scan, gputopo.sim.scan.scan_simulated)."""

from __future__ import annotations

from gputopo.model import Topology
from gputopo.probe.nvml_reader import read_topology
from gputopo.sim.description import load_description
from gputopo.sim.fake_nvml import FakeNvml


def nvml_topology(tmp_path, text: str, name: str = "t") -> Topology:
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    lib = FakeNvml(load_description(str(path)))
    lib.nvmlInit()
    try:
        return read_topology(lib, env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    finally:
        lib.nvmlShutdown()
