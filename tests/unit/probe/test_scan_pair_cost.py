"""What a big machine's scan costs per GPU pair, as counts (never as wall time: benchmarks/
scan_speed.py measures that), and that the fast paths taken for it answer exactly as the
checked ones.

A 1,024-GPU scan reads 523,776 pairs; it took about two minutes because each pair cost tens of
Python calls (checks, lookups, the description's P2P rules worked out five times per pair).
"""

from __future__ import annotations

import pytest

from gputopo.model.topology import P2P_CAPS, topology_to_json
from gputopo.probe.nvml_codes import (NVML_ERROR_GPU_IS_LOST, NVML_ERROR_INVALID_ARGUMENT,
                                      NVML_ERROR_NO_PERMISSION, NVML_ERROR_NOT_SUPPORTED,
                                      NVML_ERROR_UNKNOWN)
from gputopo.probe.nvml_pairs import _p2p_reader
from gputopo.probe.nvml_query import GpuLost, query
from gputopo.probe.nvml_reader import read_topology
from gputopo.sim.description import load_description
from gputopo.sim.fake_nvml import FakeNvml

ENV = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def _read(desc, **fake_options):
    lib = FakeNvml(desc, **fake_options)
    lib.nvmlInit()
    return lib, read_topology(lib, env=ENV)


@pytest.mark.parametrize("n", [8, 32])
def test_each_pair_costs_six_nvml_calls_and_one_p2p_rule_lookup(n, monkeypatch):
    """Six NVML calls per pair (common ancestor + five P2P capabilities) and the description's
    P2P rules worked out once per pair, whatever n: the cost per pair does not grow with n."""
    from gputopo.sim.description import generate_description

    desc = generate_description(n)
    looked_up = []
    real = type(desc).p2p_status
    def counted(self, i, j):
        looked_up.append((i, j))
        return real(self, i, j)

    monkeypatch.setattr(type(desc), "p2p_status", counted)
    lib, topo = _read(desc)
    pairs = n * (n - 1) // 2
    assert len(topo.pairs) == pairs
    assert lib.calls["nvmlDeviceGetP2PStatus"] == len(P2P_CAPS) * pairs
    assert lib.calls.get("nvmlDeviceGetTopologyCommonAncestor", 0) <= pairs
    assert sorted(looked_up) == sorted(desc.pairs())  # once each


@pytest.mark.parametrize("machine", ["seed-8gpu", "dgx-h100", "degraded-nvlink", "pcie-4gpu"])
def test_fast_and_checked_pair_calls_read_the_same_machine(machine):
    """The fake answers pair calls inline only when nothing is injected; an injected error on a
    function the probe never calls sends every call through the checked path: same topology,
    same number of calls."""
    desc = load_description(machine)
    fast_lib, fast = _read(desc)
    checked_lib, checked = _read(desc, errors={("nvmlDeviceGetBoardId", None): NVML_ERROR_UNKNOWN})
    assert topology_to_json(fast) == topology_to_json(checked)
    assert fast_lib.calls == checked_lib.calls


def test_pair_calls_still_check_their_arguments():
    desc = load_description("seed-8gpu")
    lib = FakeNvml(desc)
    lib.nvmlInit()
    h0, h1 = lib.nvmlDeviceGetHandleByIndex(0), lib.nvmlDeviceGetHandleByIndex(1)
    assert lib.nvmlDeviceGetP2PStatus(h0, h1, 0) == 0
    for args in [(h0, h0, 0), (h0, h1, 5), (h0, object(), 0)]:
        with pytest.raises(lib.NVMLError) as e:
            lib.nvmlDeviceGetP2PStatus(*args)
        assert e.value.value == NVML_ERROR_INVALID_ARGUMENT
    with pytest.raises(Exception, match="argument 3"):
        lib.nvmlDeviceGetP2PStatus(h0, h1, True)
    lib.nvmlShutdown()
    with pytest.raises(lib.NVMLError):
        lib.nvmlDeviceGetTopologyCommonAncestor(h0, h1)


class _Failing:
    """nvmlDeviceGetP2PStatus raising ``exc`` (or returning ``value``)."""

    def __init__(self, exc=None, value=0):
        self.exc, self.value = exc, value

    def nvmlDeviceGetP2PStatus(self, a, b, cap):
        if self.exc is not None:
            raise self.exc
        return self.value


class _Err(Exception):
    def __init__(self, code):
        super().__init__(f"error {code}")
        self.value = code


@pytest.mark.parametrize("lib", [
    _Failing(_Err(NVML_ERROR_NOT_SUPPORTED)), _Failing(_Err(NVML_ERROR_NO_PERMISSION)),
    _Failing(_Err(NVML_ERROR_UNKNOWN)), _Failing(AttributeError("no symbol")),
    _Failing(RuntimeError("odd")), _Failing(value=4), _Failing(value=b"0"), _Failing(value=42),
    object(),  # bindings without the function
])
def test_the_pair_loops_p2p_reader_makes_of_each_answer_what_query_makes(lib):
    from gputopo.model.topology import P2P_STATUS_NAMES
    from gputopo.model.values import NotAvailable, is_value
    from gputopo.probe.nvml_query import P2P_CAP_INDEX

    got = _p2p_reader(lib)("a", "b")
    for cap in P2P_CAPS:
        v = query(lib, "nvmlDeviceGetP2PStatus", "a", "b", P2P_CAP_INDEX[cap], default_reason=f"P2P {cap} status")
        if is_value(v):
            v = P2P_STATUS_NAMES.get(int(v), NotAvailable(f"unrecognised NVML P2P status {v}"))
        assert got[cap] == v


def test_a_lost_gpu_in_the_p2p_reader_is_failed_per_capability():
    got = _p2p_reader(_Failing(_Err(NVML_ERROR_GPU_IS_LOST)))("a", "b")
    want = str(GpuLost("nvmlDeviceGetP2PStatus", ""))
    assert all(got[cap].error == want for cap in P2P_CAPS)


@pytest.mark.parametrize("machine, options", [
    ("seed-8gpu", {}), ("dgx-h100", {}), ("h100-pcie-1gpu", {}),
    ("seed-8gpu", {"lost": [2]}),  # its pairs' P2P values are NotAvailable, not strings
    ("seed-8gpu", {"errors": {("nvmlDeviceGetP2PStatus", 3): 999}}),  # Failed values
])
def test_scan_json_writes_the_pairs_exactly_as_json_dumps(machine, options):
    """scan --json writes its pairs itself (a 1,024-GPU machine has 523,776): the text is the
    standard library's, byte for byte, whatever the pairs hold."""
    import json

    from gputopo.model.topology import topology_to_json
    from gputopo.report.network_checks import network_json
    from gputopo.report.pairs_json import pairs_json_text
    from gputopo.report.scan_view import SCHEMA_VERSION, scan_json

    _, topo = _read(load_description(machine), **options)
    plain = json.dumps({"schema_version": SCHEMA_VERSION, **topology_to_json(topo),
                        "network": network_json(topo), "problems": [], "kernel_log_notes": []}, indent=2)
    assert scan_json(topo, []) == plain
    nested = json.dumps({"pairs": topology_to_json(topo)["pairs"]}, indent=2)
    assert nested == '{\n  "pairs": ' + pairs_json_text(topo.pairs) + "\n}"
