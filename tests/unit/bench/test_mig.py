"""Issue 16, item 8: MIG. A MIG-enabled GPU shows CUDA its slices, each with the parent's PCI
bus id, so a run matched by bus id would time one slice and label it the whole GPU. gputopo
refuses such a run with one line naming MIG (exit 2). The machine is the fake NVML's dgx-a100
with MIG enabled on GPU 3, as the real driver reports it (nvmlDeviceGetMigMode -> [1, 1])."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import gputopo.sim
from gputopo.bench.visible import mig_refusal, restrict_to_cuda_visible
from gputopo.errors import UsageError
from gputopo.sim.description import parse_description
from gputopo.sim.fake_nvml import FakeNvml
from gputopo.sim.scan import scan_description


def mig_machine():
    """dgx-a100 with ``mig = "enabled"`` on its fourth GPU (NVML index 3)."""
    text = (Path(gputopo.sim.__file__).parent / "machines" / "dgx-a100.toml").read_text(encoding="utf-8")
    head, *gpus = text.split("[[gpu]]")
    gpus[3] = gpus[3].rstrip("\n") + '\nmig = "enabled"\n\n'
    return parse_description(head + "".join("[[gpu]]" + g for g in gpus), "dgx-a100-mig3")


@pytest.fixture(scope="module")
def topo():
    return scan_description(mig_machine())


def test_fake_nvml_reports_mig_as_the_driver_does():
    lib = FakeNvml(mig_machine())
    lib.nvmlInit()
    assert lib.nvmlDeviceGetMigMode(lib.nvmlDeviceGetHandleByIndex(3)) == [1, 1]
    assert lib.nvmlDeviceGetMigMode(lib.nvmlDeviceGetHandleByIndex(2)) == [0, 0]


def test_scan_reads_mig_enabled(topo):
    assert topo.gpu(3).mig_mode == "enabled" and topo.gpu(2).mig_mode == "disabled"


def test_a_run_on_a_mig_gpu_is_refused_naming_mig(topo):
    with pytest.raises(UsageError, match=r"GPU\(s\) 3 have MIG enabled.*never a slice") as e:
        restrict_to_cuda_visible(topo, [], [3], env={})  # bench --self --gpus 3
    assert "\n" not in str(e.value)
    with pytest.raises(UsageError, match="MIG enabled"):
        restrict_to_cuda_visible(topo, [(2, 3), (0, 1)], [], env={})  # not named: still refused
    # GPUs without MIG are measured as before
    assert restrict_to_cuda_visible(topo, [(0, 1)], [2], env={}) == ([(0, 1)], [2], None)


def test_mig_entries_in_cuda_visible_devices_are_the_same_clear_line(topo):
    env = {"CUDA_VISIBLE_DEVICES": "MIG-4ddbceb2-23c9-64aa-bb9a-acb9e5fdf29b"}
    line = mig_refusal(topo, [0], env)
    assert line and "names MIG instances" in line and "whole GPUs" in line
    with pytest.raises(UsageError, match="names MIG instances") as e:
        restrict_to_cuda_visible(topo, [(0, 1)], [], env=env)
    assert "not visible" not in str(e.value)


def test_numerics_refuses_a_mig_gpu(topo):
    from gputopo.numerics.run import cuda_index_of

    assert cuda_index_of(topo, 2, env={}) == 2
    with pytest.raises(UsageError, match="MIG enabled"):
        cuda_index_of(topo, 3, env={})


def test_worker_never_maps_a_gpu_to_a_mig_slice(monkeypatch):
    """A worker sees a MIG slice with its parent's bus id: it is not that GPU."""
    from gputopo.bench.fabrics.cuda import resolve_cuda_indices

    props = [SimpleNamespace(name="NVIDIA A100-SXM4-80GB MIG 1g.10gb", pci_domain_id=0,
                             pci_bus_id=0x07, pci_device_id=0),
             SimpleNamespace(name="NVIDIA A100-SXM4-80GB", pci_domain_id=0, pci_bus_id=0x0F,
                             pci_device_id=0)]
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(props))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: props[int(d)])
    got = resolve_cuda_indices({0: {"pci_bus_id": "00000000:07:00.0"},
                                1: {"pci_bus_id": "00000000:0F:00.0"}})
    assert got == {1: 1}


def test_cli_bench_self_on_a_mig_gpu_exits_2_with_one_line(topo, monkeypatch, capsys, tmp_path):
    import gputopo.jobs as jobs
    from gputopo.cli.main import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(jobs, "choose_machine",
                        lambda sim, fabric, cpu_gpus=2: jobs.Machine(topo, "cuda"))
    with pytest.raises(SystemExit) as e:
        main(["bench", "--self", "--gpus", "3"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2, err
    assert len(err.splitlines()) == 1 and "MIG" in err and "Traceback" not in err
    assert not (tmp_path / "reports").exists()  # refused before a run folder exists
