"""CUDA index from CUDA_VISIBLE_DEVICES / CUDA_DEVICE_ORDER, without CUDA."""

import pytest

from gputopo.model.values import NotAvailable
from gputopo.probe.cuda_index import cuda_indices

BUS = ["00000000:07:00.0", "00000000:0F:00.0", "00000000:47:00.0", "00000000:4E:00.0"]
UUID = ["GPU-aaaa1111-0000", "GPU-bbbb2222-0000", "GPU-aaaa3333-0000", "GPU-dddd4444-0000"]
SAME = ["NVIDIA A100"] * 4
PCI = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def idx(env, bus=BUS, uuid=UUID, names=SAME):
    return [v if isinstance(v, int) else None for v in cuda_indices(bus, uuid, names, env=env)]


def test_unset_is_identity():
    assert idx({}) == [0, 1, 2, 3]
    assert idx(PCI) == [0, 1, 2, 3]


def test_integers_reorder_and_hide():
    assert idx({**PCI, "CUDA_VISIBLE_DEVICES": "2,0"}) == [1, None, 0, None]
    assert idx({**PCI, "CUDA_VISIBLE_DEVICES": " 3 "}) == [None, None, None, 0]


def test_hidden_gpu_reason_names_the_variable():
    v = cuda_indices(BUS, UUID, SAME, env={**PCI, "CUDA_VISIBLE_DEVICES": "1"})
    assert isinstance(v[0], NotAvailable) and "CUDA_VISIBLE_DEVICES=1" in v[0].reason


@pytest.mark.parametrize("visible, expect", [
    ("1,7,2", [None, 0, None, None]),     # stops at the out-of-range entry
    ("1,1,2", [None] * 4),                # a repeat hides every GPU (as torch parses it)
    ("2,0,2", [None] * 4),
    ("1gpu,2x", [None, 0, 1, None]),      # integers read like strtoul
    ("-1", [None] * 4),                   # the usual "hide every GPU"
    ("", [None] * 4),
    ("0,,1", [0, None, None, None]),
])
def test_invalid_entry_stops_parsing(visible, expect):
    assert idx({**PCI, "CUDA_VISIBLE_DEVICES": visible}) == expect


def test_uuids_and_unique_prefixes():
    env = {**PCI, "CUDA_VISIBLE_DEVICES": "GPU-dddd4444-0000,GPU-bbbb"}
    assert idx(env) == [None, 1, None, 0]
    assert idx({**PCI, "CUDA_VISIBLE_DEVICES": "dddd,GPU-AAAA3"}) == [None, None, 1, 0]


def test_ambiguous_uuid_prefix_is_invalid():
    assert idx({**PCI, "CUDA_VISIBLE_DEVICES": "1,GPU-aaaa,0"}) == [None, 0, None, None]


def test_mig_entries_make_every_index_unavailable():
    v = cuda_indices(BUS, UUID, SAME, env={"CUDA_VISIBLE_DEVICES": "MIG-1234-5678"})
    assert all(isinstance(x, NotAvailable) and "MIG" in x.reason for x in v)


def test_pci_bus_order_not_nvml_order():
    """Integers count in PCI bus order, whatever order the GPUs were listed in."""
    bus = [BUS[2], BUS[0], BUS[3], BUS[1]]
    assert idx(PCI, bus=bus) == [2, 0, 3, 1]
    assert idx({**PCI, "CUDA_VISIBLE_DEVICES": "0"}, bus=bus) == [None, 0, None, None]


def test_mixed_models_without_pci_bus_id_order_is_not_available():
    names = ["NVIDIA A100", "NVIDIA A100", "NVIDIA T4", "NVIDIA A100"]
    v = cuda_indices(BUS, UUID, names, env={})
    assert all(isinstance(x, NotAvailable) and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in x.reason for x in v)
    assert idx(PCI, names=names) == [0, 1, 2, 3]


def test_unknown_bus_id_falls_back_to_listed_order():
    assert idx(PCI, bus=[BUS[3], None, BUS[0], BUS[1]]) == [0, 1, 2, 3]


def test_defaults_to_process_environment(monkeypatch):
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,2")
    assert [v if isinstance(v, int) else None for v in cuda_indices(BUS, UUID, SAME)] == [None, None, 1, 0]


def test_worker_order_is_forced_whatever_the_shell_says():
    """Workers run with CUDA_DEVICE_ORDER=PCI_BUS_ID: mixed models still get an index, and
    integers in CUDA_VISIBLE_DEVICES count in PCI bus order."""
    from gputopo.probe.cuda_index import worker_cuda_indices

    names = ["NVIDIA A100", "NVIDIA A100", "NVIDIA T4", "NVIDIA A100"]
    env = {"CUDA_DEVICE_ORDER": "FASTEST_FIRST", "CUDA_VISIBLE_DEVICES": "2,3"}
    assert all(isinstance(x, NotAvailable) for x in cuda_indices(BUS, UUID, names, env=env))
    got = worker_cuda_indices(BUS, UUID, names, env=env)
    assert [v if isinstance(v, int) else None for v in got] == [None, None, 0, 1]
