"""nvml_query.query and nvml_lib.load_nvml: every NVML outcome becomes a typed value."""

import sys
import types

import pytest

from gputopo.errors import NoHardwareError
from gputopo.model.values import Failed, NotAvailable
from gputopo.probe import nvml_lib
from gputopo.probe.nvml_query import GpuLost, as_text, describe_error, error_code, query


class CodeError(Exception):
    """Any exception with an int ``.value`` is an NVML error to the probe (the fake NVML's kind)."""

    def __init__(self, value):
        super().__init__(f"code {value}")
        self.value = value


def raiser(code):
    def fn(*args):
        raise CodeError(code)
    return fn


def make_lib(**fns):
    return types.SimpleNamespace(**fns)


def test_value_returned_and_bytes_decoded():
    lib = make_lib(nvmlDeviceGetName=lambda h: b"NVIDIA H100 80GB HBM3", nvmlDeviceGetCount=lambda: 8)
    assert query(lib, "nvmlDeviceGetName", object()) == "NVIDIA H100 80GB HBM3"
    assert query(lib, "nvmlDeviceGetCount") == 8


def test_args_are_passed():
    lib = make_lib(nvmlDeviceGetNvLinkErrorCounter=lambda h, link, counter: (h, link, counter))
    assert query(lib, "nvmlDeviceGetNvLinkErrorCounter", "h", 3, 2) == ("h", 3, 2)


@pytest.mark.parametrize("code, words", [
    (3, "not supported"), (13, "driver too old"), (4, "permission"),
])
def test_not_available_codes(code, words):
    lib = make_lib(nvmlDeviceGetNumaNodeId=raiser(code))
    v = query(lib, "nvmlDeviceGetNumaNodeId", None, default_reason="NUMA node")
    assert isinstance(v, NotAvailable)
    assert v.reason.startswith("NUMA node: nvmlDeviceGetNumaNodeId")
    assert words in v.reason


def test_missing_from_bindings_is_not_available():
    v = query(make_lib(), "nvmlDeviceGetNumaNodeId", None)
    assert isinstance(v, NotAvailable)
    assert "not in these NVML bindings" in v.reason


def test_extra_not_available_codes():
    lib = make_lib(nvmlDeviceGetNvLinkState=raiser(2))
    assert isinstance(query(lib, "nvmlDeviceGetNvLinkState", None, 7), Failed)
    v = query(lib, "nvmlDeviceGetNvLinkState", None, 7, not_available_codes=(2,))
    assert isinstance(v, NotAvailable) and "INVALID_ARGUMENT" in v.reason


@pytest.mark.parametrize("code", [999, 1, 10, 17])
def test_other_errors_fail_with_message(code):
    v = query(make_lib(nvmlDeviceGetUUID=raiser(code)), "nvmlDeviceGetUUID", None)
    assert isinstance(v, Failed)
    assert v.error.startswith("nvmlDeviceGetUUID:") and str(code) in v.error


def test_unknown_error_names_it():
    v = query(make_lib(nvmlDeviceGetUUID=raiser(999)), "nvmlDeviceGetUUID", None)
    assert "NVML_ERROR_UNKNOWN" in v.error


def test_non_nvml_exception_is_failed_not_raised():
    def boom(h):
        raise RuntimeError("ctypes went wrong")
    v = query(make_lib(nvmlDeviceGetUUID=boom), "nvmlDeviceGetUUID", None)
    assert isinstance(v, Failed) and "RuntimeError" in v.error and "ctypes went wrong" in v.error


def test_gpu_lost_raises():
    with pytest.raises(GpuLost) as ei:
        query(make_lib(nvmlDeviceGetName=raiser(15)), "nvmlDeviceGetName", None)
    assert ei.value.fn_name == "nvmlDeviceGetName"
    assert "GPU is lost" in str(ei.value)


def test_works_with_real_pynvml_errors():
    pynvml = pytest.importorskip("pynvml")

    def ns(h):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def unknown(h):
        raise pynvml.NVMLError_Unknown()

    def lost(h):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)

    lib = make_lib(a=ns, b=unknown, c=lost)
    assert isinstance(query(lib, "a", None), NotAvailable)
    b = query(lib, "b", None)
    assert isinstance(b, Failed) and "Unknown Error" in b.error and "999" in b.error
    with pytest.raises(GpuLost):
        query(lib, "c", None)


def test_error_code_and_text_helpers():
    assert error_code(CodeError(12)) == 12
    assert error_code(ValueError("x")) is None
    assert error_code(types.SimpleNamespace(value=True)) is None
    assert "NVML_ERROR_LIBRARY_NOT_FOUND, 12" in describe_error(CodeError(12))
    assert as_text(b"abc\x00") == "abc" and as_text(5) == 5


# ----------------------------------------------------------------------------- load_nvml


class FakePynvml(types.ModuleType):
    def __init__(self, init_code=None, count=2):
        super().__init__("pynvml")
        self.init_code, self.count, self.shutdowns = init_code, count, 0

    def nvmlInit(self):
        if self.init_code is not None:
            raise CodeError(self.init_code)

    def nvmlDeviceGetCount(self):
        return self.count

    def nvmlShutdown(self):
        self.shutdowns += 1


@pytest.mark.parametrize("code", [12, 9])
def test_load_nvml_without_driver(monkeypatch, code):
    monkeypatch.setitem(sys.modules, "pynvml", FakePynvml(init_code=code))
    with pytest.raises(NoHardwareError) as ei:
        nvml_lib.load_nvml()
    assert "no NVIDIA driver found (NVML:" in str(ei.value)
    assert "--sim" in str(ei.value)


def test_load_nvml_other_init_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", FakePynvml(init_code=18))
    with pytest.raises(NoHardwareError, match="NVML could not start"):
        nvml_lib.load_nvml()


def test_load_nvml_zero_gpus(monkeypatch):
    fake = FakePynvml(count=0)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with pytest.raises(NoHardwareError, match="no GPUs"):
        nvml_lib.load_nvml()
    assert fake.shutdowns == 1


def test_load_nvml_returns_initialised_library(monkeypatch):
    fake = FakePynvml(count=4)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert nvml_lib.load_nvml() is fake
    nvml_lib.close_nvml(fake)
    assert fake.shutdowns == 1


def test_load_nvml_real_pynvml_without_driver():
    """On a machine with no driver, the real bindings end in NoHardwareError, not a traceback."""
    pytest.importorskip("pynvml")
    try:
        lib = nvml_lib.load_nvml()
    except NoHardwareError as e:
        assert "NVML" in str(e)
    else:
        nvml_lib.close_nvml(lib)


def test_p2p_cap_indices_are_ints():
    assert nvml_lib.P2P_CAPS_INDEX == {"read": 0, "write": 1, "nvlink": 2, "atomics": 3, "pci": 4}


def test_only_nvml_lib_imports_pynvml():
    import pathlib
    import re

    import gputopo

    pkg = pathlib.Path(gputopo.__file__).parent
    importers = sorted(str(p.relative_to(pkg)) for p in pkg.rglob("*.py")
                       if re.search(r"^\s*(import pynvml|from pynvml)", p.read_text(), re.M))
    assert importers == ["probe/nvml_lib.py"]
