"""The only module in gputopo that imports ``pynvml`` (package nvidia-ml-py).

Everything else reads NVML through the "NVML library object" this module returns: on a real
machine that is the initialised ``pynvml`` module itself, on a simulated one the fake NVML
(gputopo.sim.fake_nvml) that answers the same calls. ``import pynvml`` works without a driver;
``nvmlInit()`` is what fails (NVMLError_LibraryNotFound, value 12), so the import stays inside
:func:`load_nvml` and ``import gputopo.probe`` costs nothing.
"""

from __future__ import annotations

from typing import Any

from gputopo.errors import NoHardwareError
from gputopo.probe.nvml_codes import NVML_ERROR_DRIVER_NOT_LOADED, NVML_ERROR_LIBRARY_NOT_FOUND
from gputopo.probe.nvml_query import P2P_CAP_INDEX, describe_error, error_code

#: P2P capability indices as integers (pynvml's NVML_P2P_CAPS_INDEX_READ is the tuple ``(0,)``).
P2P_CAPS_INDEX = P2P_CAP_INDEX


def load_nvml() -> Any:
    """Import and initialise pynvml; return it as the NVML library object.

    Raises NoHardwareError when the bindings are not installed, when there is no driver
    (LIBRARY_NOT_FOUND / DRIVER_NOT_LOADED), when NVML cannot start for another reason, or when
    the driver sees zero GPUs. Call :func:`close_nvml` when done.
    """
    try:
        import pynvml  # the one import of pynvml in gputopo
    except ImportError as exc:
        raise NoHardwareError(f"no NVIDIA driver found (NVML bindings missing: {exc}; "
                              "pip install nvidia-ml-py)") from None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - pynvml.NVMLError or OSError from ctypes
        code = error_code(exc)
        if code in (NVML_ERROR_LIBRARY_NOT_FOUND, NVML_ERROR_DRIVER_NOT_LOADED) or code is None:
            raise NoHardwareError(f"no NVIDIA driver found (NVML: {describe_error(exc)})") from None
        raise NoHardwareError(f"NVIDIA driver found but NVML could not start "
                              f"(NVML: {describe_error(exc)})") from None
    try:
        count = pynvml.nvmlDeviceGetCount()
    except Exception as exc:  # noqa: BLE001
        close_nvml(pynvml)
        raise NoHardwareError(f"NVIDIA driver found but NVML cannot count GPUs "
                              f"(NVML: {describe_error(exc)})") from None
    if count == 0:
        close_nvml(pynvml)
        raise NoHardwareError("NVIDIA driver found but it sees no GPUs (NVML: 0 devices)")
    return pynvml


def close_nvml(lib: Any) -> None:
    """Shut NVML down; errors are ignored (there is nothing left to do about them)."""
    shutdown = getattr(lib, "nvmlShutdown", None)
    if shutdown is None:
        return
    try:
        shutdown()
    except Exception:  # noqa: BLE001
        pass
