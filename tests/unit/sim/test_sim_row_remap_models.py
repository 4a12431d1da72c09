"""Which simulated GPUs remap rows: NVIDIA's memory error guide ("Supported GPUs",
https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/supported-gpus.html) lists row remapping on
GA100, GA10x (A40, A10, RTX A6000, ...), Ada AD10x (L40S, L4, RTX 6000 Ada, ...), GH100 and GB10x;
so the fake NVML answers their remapped-row call (not NOT_SUPPORTED), and still answers
NOT_SUPPORTED for page retirement (Pascal/Volta's) and for GeForce cards, which have no ECC."""

from __future__ import annotations

import pytest

from gputopo.sim.description import load_description, parse_description
from gputopo.sim.fake_nvml import FakeNvml, NVMLError
from gputopo.sim.health import model_traits

REMAP = ["NVIDIA RTX A6000", "NVIDIA A40", "NVIDIA A10", "NVIDIA A10G", "NVIDIA RTX A5000", "NVIDIA L40S",
         "NVIDIA L40", "NVIDIA L4", "NVIDIA RTX 6000 Ada Generation", "NVIDIA A100-SXM4-80GB",
         "NVIDIA H100 80GB HBM3", "NVIDIA GH200 480GB", "NVIDIA B200"]
NO_REMAP = ["NVIDIA GeForce RTX 3090", "NVIDIA GeForce RTX 4090", "Tesla V100-PCIE-32GB", "Tesla P100-PCIE-16GB",
            "Tesla T4", "Quadro RTX 6000"]


@pytest.mark.parametrize("name", REMAP)
def test_ampere_and_ada_parts_remap_rows(name):
    assert model_traits(name)["memory_repair"] == "row_remap", name


@pytest.mark.parametrize("name", NO_REMAP)
def test_geforce_pascal_volta_and_turing_do_not(name):
    assert model_traits(name)["memory_repair"] != "row_remap", name


def test_rtx_a_cards_still_ship_with_ecc_off():
    assert model_traits("NVIDIA RTX A6000") == dict(model_traits("NVIDIA RTX A6000"), ecc="disabled")
    assert model_traits("NVIDIA A40")["ecc"] == "enabled"


def test_the_fake_nvml_answers_an_rtx_a6000s_remapped_rows():
    lib = FakeNvml(load_description("seed-8gpu"))  # eight RTX A6000 (GA102)
    lib.nvmlInit()
    assert lib.nvmlDeviceGetRemappedRows(lib.nvmlDeviceGetHandleByIndex(0)) == (0, 0, 0, 0)
    with pytest.raises(NVMLError) as ei:
        lib.nvmlDeviceGetRetiredPages(lib.nvmlDeviceGetHandleByIndex(0), 0)
    assert ei.value.value == lib.NVML_ERROR_NOT_SUPPORTED  # page retirement is Pascal/Volta's


def test_an_l40s_description_may_declare_pending_remaps():
    d = parse_description('name = "t"\nsummary = "x"\n[pairs]\ndefault = "numa"\n[defaults]\n'
                          'name = "NVIDIA L40S"\n[[gpu]]\nbus_id = "0000:07:00.0"\nremapped_rows_pending = true\n'
                          '[[gpu]]\nbus_id = "0000:0f:00.0"\n', "x.toml")
    assert d.gpus[0].health.remapped_rows["pending"] is True
