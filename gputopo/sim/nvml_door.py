"""One read through NVML, on this machine or on a simulated one: :func:`read_nvml` opens the
driver's NVML (gputopo/probe/nvml_lib.py) or the simulated machine's fake NVML
(gputopo/sim/fake_nvml.py), hands it to a reader of gputopo/probe/ and closes it again.

It sits in sim/ because sim/ may import probe/ and not the other way round: the readers
themselves (minor numbers, running processes) stay in probe/ and take the library object.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, TypeVar

T = TypeVar("T")


def read_nvml(sim: Optional[str], read: Callable[[Any], T]) -> T:
    """``read(lib)`` on the simulated machine ``sim``'s fake NVML, or on the driver's when ``sim``
    is None (NoHardwareError when there is none)."""
    if sim:
        from gputopo.sim.description import load_description
        from gputopo.sim.fake_nvml import FakeNvml

        fake: Any = FakeNvml(load_description(sim))
        fake.nvmlInit()
        try:
            return read(fake)
        finally:
            fake.nvmlShutdown()
    from gputopo.probe.nvml_lib import close_nvml, load_nvml

    lib = load_nvml()
    try:
        return read(lib)
    finally:
        close_nvml(lib)
