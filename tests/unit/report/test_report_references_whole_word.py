"""A reference row's GPU model is matched by whole word, and a form factor the GPU name says is part
of its model: GH200 is not H200, GB200 is not B200, H100 PCIe and H100 NVL are not H100 SXM, H200 NVL
and H800 PCIe are not the SXM boards the H200 and H800 rows measured. The MNNVL rows keep their use
(GB200 trays of one NVLink domain)."""

from __future__ import annotations

import pytest

from gputopo.report.references import MNNVL, closest_reference, reference_rows


def _row(test, gpus, cls, name, platform=None):
    r = closest_reference(test, gpus, cls, [name], platform)
    return r.id if r is not None else None


@pytest.mark.parametrize("name", ["NVIDIA GH200 480GB", "NVIDIA GH200 144G HBM3e", "NVIDIA H200 NVL"])
def test_no_h200_row_for_another_model(name):
    assert _row("collective.all_reduce", 8, "NV18", name) is None
    assert _row("self.h2d", 1, "host", name) is None


def test_h200_sxm_keeps_its_rows():
    assert _row("collective.all_reduce", 8, "NV18", "NVIDIA H200") == "h200-nv18-allreduce-8"
    assert _row("self.h2d", 1, "host", "NVIDIA H200 141GB HBM3e") == "h200-host-h2d"


def test_gb200_is_not_b200_and_b200_is_not_gb200():
    assert _row("collective.all_reduce", 8, "NV18", "NVIDIA GB200") is None
    assert _row("collective.all_reduce", 8, "NV18", "NVIDIA B200") == "b200-nv18-allreduce-8"
    assert _row("collective.all_reduce", 4, "NV18", "NVIDIA B200") is None  # the tray row is GB200's
    assert _row("collective.all_reduce", 4, "NV18", "NVIDIA GB200") == "gb200-nv18-allreduce-4"


@pytest.mark.parametrize("name", ["NVIDIA H100 PCIe", "NVIDIA H100 NVL"])
def test_h100_pcie_and_nvl_are_not_sxm(name):
    assert _row("p2p.copy", 2, "NV18", name) is None
    assert _row("collective.all_reduce", 8, "NV18", name) is None
    assert _row("self.d2h", 1, "host", name) is None


def test_h100_sxm_names_keep_their_rows():
    for name in ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5 80GB", "H100-SXM5-80GB"):
        assert _row("p2p.copy", 2, "NV18", name) == "h100-sxm-nv18-p2p", name
    assert _row("p2p.copy", 2, "NV12", "NVIDIA H100 PCIe") == "h100-pcie-nv12-p2p"


def test_a100_sxm_names_with_their_suffixes():
    for name in ("NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-40GB", "A100 SXM4 80GB"):
        assert _row("collective.all_reduce", 2, "NV12", name) == "a100-sxm-nv12-allreduce-2", name
    assert _row("collective.all_reduce", 2, "NV12", "NVIDIA A100 80GB PCIe") is None


def test_h800_pcie_is_not_the_sxm_row():
    assert _row("p2p.copy", 2, "NV8", "NVIDIA H800") == "h800-nv8-p2p"
    assert _row("p2p.copy", 2, "NV8", "NVIDIA H800 PCIe") is None


def test_a_longer_model_number_is_another_model():
    assert _row("p2p.staged", 2, "PCIe", "NVIDIA GeForce RTX 4090") == "rtx4090-staged"
    assert _row("p2p.staged", 2, "PCIe", "NVIDIA GeForce RTX 40900") is None


def test_mnnvl_rows_keep_their_documented_use():
    rows = [r for r in reference_rows() if r.link_class == MNNVL]
    assert rows and all(r.model == "GB200" for r in rows)
    assert _row("collective.all_reduce", 8, MNNVL, "NVIDIA GB200") == "gb200-mnnvl-allreduce-8"
    assert _row("collective.all_reduce", 8, MNNVL, "NVIDIA B200") is None
