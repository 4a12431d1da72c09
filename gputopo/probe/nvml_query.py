"""The one door every NVML call goes through: value, NotAvailable(reason), Failed(message), or GpuLost.

Like nvitop's ``nvmlQuery``, callers never write try/except around NVML: a function the GPU or
driver does not support, one the driver's library lacks (old driver) or one the Python bindings
lack (old nvidia-ml-py: AttributeError) becomes ``NotAvailable(reason)``; any other NVML error
becomes ``Failed(message)``. A lost GPU (NVML_ERROR_GPU_IS_LOST) is different in kind: nothing
more can be read from that device, so it raises :class:`GpuLost` and the reader marks the GPU
lost and goes on with the others.

Errors are classified by their integer ``.value`` code, not by class, so the same code works with
``pynvml`` and with any look-alike (the fake NVML of a simulated machine) whose exceptions carry a
``.value``. This module does not import pynvml (see nvml_lib.py).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Optional, Tuple

from gputopo.model.values import Failed, NotAvailable, is_value
from gputopo.probe.nvml_codes import (ERROR_NAMES, NVML_ERROR_FUNCTION_NOT_FOUND, NVML_ERROR_GPU_IS_LOST,
                                      NVML_ERROR_NO_PERMISSION, NVML_ERROR_NOT_SUPPORTED)

#: P2P capability -> nvmlGpuP2PCapsIndex_t as an int. Never pass pynvml's constants:
#: NVML_P2P_CAPS_INDEX_READ is the tuple ``(0,)`` there (a stray comma in nvidia-ml-py).
P2P_CAP_INDEX = {"read": 0, "write": 1, "nvlink": 2, "atomics": 3, "pci": 4}

#: Codes that mean "this value does not exist here", with the reason's wording.
_NOT_AVAILABLE_WHY = {
    NVML_ERROR_NOT_SUPPORTED: "not supported by this GPU or driver",
    NVML_ERROR_FUNCTION_NOT_FOUND: "not in this driver's NVML library (driver too old)",
    NVML_ERROR_NO_PERMISSION: "needs more permissions (NVML_ERROR_NO_PERMISSION)",
}


class GpuLost(Exception):
    """NVML says the GPU fell off the bus (NVML_ERROR_GPU_IS_LOST); nothing more can be read from it."""

    def __init__(self, fn_name: str, message: str):
        super().__init__(f"GPU is lost (NVML_ERROR_GPU_IS_LOST from {fn_name})")
        self.fn_name = fn_name


def error_code(exc: BaseException) -> Optional[int]:
    """The NVML return code an exception carries in ``.value``, or None when it is not an NVML error."""
    code = getattr(exc, "value", None)
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def describe_error(exc: BaseException) -> str:
    """One line naming the NVML error: ``'Unknown Error (NVML_ERROR_UNKNOWN, 999)'``."""
    code = error_code(exc)
    try:
        text = str(exc)
    except Exception:  # pynvml's __str__ calls into the library, which may be gone
        text = ""
    if code is None:
        return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    name = ERROR_NAMES.get(code)
    tag = f"NVML_ERROR_{name}, {code}" if name else f"NVML error code {code}"
    return f"{text or 'NVML error'} ({tag})"


def as_text(value: Any) -> Any:
    """Decode bytes (old bindings return char arrays as bytes); anything else unchanged."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace").rstrip("\x00")
    return value


def query(lib: Any, fn_name: str, *args: Any, default_reason: Optional[str] = None,
          not_available_codes: Iterable[int] = ()) -> Any:
    """Call ``lib.<fn_name>(*args)`` and return its value, bytes decoded to str.

    Returns ``NotAvailable(reason)`` when the function is not supported, not in the driver's
    library, not in the bindings, not permitted, or fails with one of ``not_available_codes``
    (e.g. INVALID_ARGUMENT for an NVLink index past the GPU's last link). ``default_reason``
    starts the reason text (what could not be read, e.g. "NUMA node"); the function name and
    why follow. Returns ``Failed(message)`` for any other error. Raises :class:`GpuLost` on
    NVML_ERROR_GPU_IS_LOST.
    """
    return asker(lib, fn_name, default_reason=default_reason,
                 not_available_codes=not_available_codes)(*args)


def asker(lib: Any, fn_name: str, *, default_reason: Optional[str] = None,
          not_available_codes: Iterable[int] = ()) -> Callable[..., Any]:
    """``ask(*args)``: :func:`query` of ``lib.<fn_name>`` with these options, the function
    looked up once. The pair loop asks the same few functions for each of n^2/2 pairs (523,776
    on 1,024 GPUs): each call is still one NVML call, with every error handled as query does."""
    what = default_reason or fn_name
    fn = getattr(lib, fn_name, None)
    if fn is None:
        def not_in_bindings(*args: Any) -> Any:
            return NotAvailable(f"{what}: {fn_name} is not in these NVML bindings "
                                "(nvidia-ml-py too old)")
        return not_in_bindings
    codes = tuple(not_available_codes)

    def ask(*args: Any) -> Any:
        try:
            value = fn(*args)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a typed value
            return nvml_failure(exc, fn_name, what, codes)
        if isinstance(value, (bytes, bytearray)):
            return as_text(value)
        return value
    return ask


def nvml_failure(exc: BaseException, fn_name: str, what: str, codes: Tuple[int, ...] = ()) -> Any:
    """What a failed NVML call stands for (see :func:`query`); raises GpuLost for a lost GPU."""
    code = error_code(exc)
    if code == NVML_ERROR_GPU_IS_LOST:
        raise GpuLost(fn_name, describe_error(exc)) from exc
    if code in _NOT_AVAILABLE_WHY:
        return NotAvailable(f"{what}: {fn_name} {_NOT_AVAILABLE_WHY[code]}")
    if code is not None and code in codes:
        return NotAvailable(f"{what}: {fn_name} returned {describe_error(exc)}")
    if code is None and isinstance(exc, AttributeError):
        # A binding that exists but calls a symbol its ctypes library lacks.
        return NotAvailable(f"{what}: {fn_name} is not available in these NVML bindings ({exc})")
    return Failed(f"{fn_name}: {describe_error(exc)}")


#: nvmlFieldValue_t.valueType -> the c_nvmlValue_t member holding the value.
_FIELD_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
#: pynvml's NVML_FI_DEV_NVLINK_LINK_COUNT (the links a GPU has; drivers >= 450).
NVLINK_LINK_COUNT_FIELD = 91


def nvml_field_value(lib, handle, field_id: int, what: str) -> Any:
    """One NVML field value (nvmlDeviceGetFieldValues) as an int, or NotAvailable (why) where the
    call fails or the driver does not answer the field (its nvmlReturn not SUCCESS)."""
    values = query(lib, "nvmlDeviceGetFieldValues", handle, [field_id], default_reason=what)
    if not is_value(values):
        return values
    try:
        v = values[0]
        ret = int(getattr(v, "nvmlReturn", 1))
        if ret != 0:
            return NotAvailable(f"{what}: the driver does not answer NVML field {field_id} "
                                f"({ERROR_NAMES.get(ret, f'nvmlReturn {ret}')})")
        return int(getattr(v.value, _FIELD_MEMBERS.get(int(getattr(v, "valueType", 1)), "uiVal")))
    except (TypeError, IndexError, AttributeError, ValueError, KeyError) as e:
        return NotAvailable(f"{what}: NVML field {field_id} unreadable ({e})")


def nvlink_count(lib, handle, max_links: int) -> int:
    """How many NVLink indices to ask about: the GPU's NVML_FI_DEV_NVLINK_LINK_COUNT field where
    the driver answers it, else ``max_links`` (NVML_NVLINK_MAX_LINKS)."""
    field_id = getattr(lib, "NVML_FI_DEV_NVLINK_LINK_COUNT", NVLINK_LINK_COUNT_FIELD)
    values = query(lib, "nvmlDeviceGetFieldValues", handle, [field_id],
                   default_reason="NVLink link count")
    try:
        v = values[0]
        if int(getattr(v, "nvmlReturn", 1)) != 0:
            return max_links
        n = int(getattr(v.value, _FIELD_MEMBERS.get(int(getattr(v, "valueType", 1)), "uiVal")))
    except (TypeError, IndexError, AttributeError, ValueError, KeyError):
        return max_links
    return n if 0 <= n <= max_links else max_links
