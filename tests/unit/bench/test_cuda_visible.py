"""Issue 8, defect 1: under CUDA_VISIBLE_DEVICES the cuda fabric and the numerics never measure
another GPU than the one named. Runs here without a GPU: torch.cuda's device list is faked
(monkeypatched) as a driver would present it, the topology is a simulated machine's."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from gputopo.bench.visible import restrict_to_cuda_visible, worker_cuda_map
from gputopo.errors import UsageError
from gputopo.sim.description import load_description
from gputopo.sim.scan import scan_description
from helpers.cli import gputopo_here

# 4 GPUs, PCI bus ids in NVML order (NVML enumerates by bus id)
BUS = ["00000000:07:00.0", "00000000:0F:00.0", "00000000:47:00.0", "00000000:4E:00.0"]


@pytest.fixture(scope="module")
def seed():
    return scan_description(load_description("seed-8gpu"))


def fake_cuda(monkeypatch, visible_bus):
    """torch.cuda as a process sees it when CUDA_VISIBLE_DEVICES lets ``visible_bus`` through."""
    props = []
    for b in visible_bus:
        dom, bus, dev = (int(x, 16) for x in b.replace(".", ":").split(":")[:3])
        props.append(SimpleNamespace(pci_domain_id=dom, pci_bus_id=bus, pci_device_id=dev))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(props))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: props[int(d)])


def test_worker_map_skips_gpus_cuda_cannot_see(monkeypatch):
    """CUDA_VISIBLE_DEVICES=2,3 on 4 GPUs: the worker knows GPUs 2,3 as cuda:0,1 and nothing
    else (it used to fall back to the NVML index: {0:0, 1:1, 2:0, 3:1})."""
    from gputopo.bench.fabrics.cuda import CudaOps, resolve_cuda_indices

    fake_cuda(monkeypatch, BUS[2:])
    got = resolve_cuda_indices({k: {"pci_bus_id": b, "cuda_index": k} for k, b in enumerate(BUS)})
    assert got == {2: 0, 3: 1}
    ops = CudaOps([0, 1, 2, 3], [0, 1, 2, 3], 1, got)
    assert ops.device(3) == torch.device("cuda", 1)
    with pytest.raises(RuntimeError, match="GPU 0 is not visible to CUDA"):
        ops.device(0)


def test_bus_id_guard_refuses_a_renumbered_device(monkeypatch):
    from gputopo.bench.fabrics.cuda import check_bus_ids

    fake_cuda(monkeypatch, BUS[2:])
    check_bus_ids([0, 1], [BUS[2], "0000:4e:00.0"])  # the same GPUs: fine
    with pytest.raises(RuntimeError, match="not 00000000:07:00.0"):
        check_bus_ids([0], [BUS[0]])


def test_restrict_leaves_out_hidden_gpus_with_one_note(seed):
    env = {"CUDA_VISIBLE_DEVICES": "2,3"}
    pairs = [(0, 1), (0, 2), (2, 3), (3, 4)]
    kept, kept_self, note = restrict_to_cuda_visible(seed, pairs, [0, 2], env=env)
    assert kept == [(2, 3)] and kept_self == [2]
    assert note.startswith("skipped GPU(s) 0, 1, 4: not visible to CUDA (CUDA_VISIBLE_DEVICES=2,3)")
    assert "3 pair(s)" in note
    assert restrict_to_cuda_visible(seed, pairs, [], env={}) == (pairs, [], None)


def test_restrict_refuses_named_pairs_with_hidden_gpus(seed):
    with pytest.raises(UsageError, match=r"--pairs 0,1: GPU\(s\) 0, 1 not visible to CUDA"):
        restrict_to_cuda_visible(seed, [(0, 1)], [], explicit_pairs=True,
                                 env={"CUDA_VISIBLE_DEVICES": "2,3"})
    with pytest.raises(UsageError, match="nothing to measure"):
        restrict_to_cuda_visible(seed, [(0, 1)], [], env={"CUDA_VISIBLE_DEVICES": "-1"})


def test_workers_order_is_used_even_if_the_shell_orders_fastest_first(seed):
    env = {"CUDA_DEVICE_ORDER": "FASTEST_FIRST", "CUDA_VISIBLE_DEVICES": "5,6"}
    m = worker_cuda_map(seed, env)
    assert m[5] == 0 and m[6] == 1 and not isinstance(m[0], int)


def test_uuid_and_mig_entries(seed):
    uuid6 = seed.gpu(6).uuid
    m = worker_cuda_map(seed, {"CUDA_VISIBLE_DEVICES": f"{uuid6},{seed.gpu(5).uuid[:12]}"})
    assert m[6] == 0 and m[5] == 1 and not isinstance(m[7], int)
    with pytest.raises(UsageError, match="MIG"):
        restrict_to_cuda_visible(seed, [(5, 6)], [], explicit_pairs=True,
                                 env={"CUDA_VISIBLE_DEVICES": "MIG-1234"})


def test_numerics_refuses_a_hidden_gpu(seed, monkeypatch):
    from gputopo.numerics import run_numerics
    from gputopo.numerics.run import cuda_index_of

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert cuda_index_of(seed, 3) == 1
    with pytest.raises(UsageError, match="GPU 0 is not visible to CUDA"):
        cuda_index_of(seed, 0)
    with pytest.raises(UsageError, match="not visible to CUDA"):
        run_numerics(seed, [(0, 1)], "cuda", load_description("seed-8gpu"))


def _as_this_machine(monkeypatch):
    """`gputopo bench` on "this machine" (fabric cuda) whose NVML shows seed-8gpu's 8 GPUs: the
    scan is the simulated machine's, everything after it is the real cuda path of the CLI."""
    import gputopo.jobs as jobs

    topo = scan_description(load_description("seed-8gpu"))
    monkeypatch.setattr(jobs, "choose_machine", lambda sim, fabric, cpu_gpus=2: jobs.Machine(topo, "cuda"))


@pytest.mark.slow
def test_cli_exit_2_for_named_hidden_pair_and_one_line_for_skipped(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    monkeypatch.chdir(tmp_path)
    _as_this_machine(monkeypatch)
    code, _, err = gputopo_here("bench", "--pairs", "0,1")
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert "--pairs 0,1" in lines[0] and "CUDA_VISIBLE_DEVICES=2,3" in lines[0]
    # not named: the hidden GPUs are skipped with one line; then (no GPU here) exit 3
    code, _, err = gputopo_here("bench", "--gpus", "1-3", "--tests", "p2p", "--quick", "--timeout", "60")
    notes = [ln for ln in err.splitlines() if "skipped GPU(s)" in ln]
    assert notes == ["gputopo: skipped GPU(s) 1: not visible to CUDA (CUDA_VISIBLE_DEVICES=2,3); "
                     "2 pair(s) with them not measured"], err
    if not torch.cuda.is_available():
        assert code == 3, err


def test_a_lost_gpu_is_never_visible_and_does_not_shift_the_others():
    from gputopo.model.values import Failed

    topo = scan_description(load_description("seed-8gpu"))
    topo.gpus[2].lost = Failed("GPU is lost")
    m = worker_cuda_map(topo, {})
    assert not isinstance(m[2], int)
    assert [m[k] for k in (0, 1, 3, 4, 5, 6, 7)] == list(range(7))
