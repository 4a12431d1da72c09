"""Issue 16, items 1 and 4: `gputopo cluster --fabric cuda` on real ranks, without a GPU.

- Timing: the all_reduce is asynchronous (``async_op=True``); ProcessGroupNCCL runs it on its
  own stream and ``work.wait()`` makes the current stream wait for it. A fake GPU models the two
  streams' clocks, so an end event recorded before ``wait()`` reads ~0 and the test fails.
- Device choice: a Slurm task bound to one GPU sees ``device_count() == 1``; the rank must drive
  that GPU, whatever its local rank; two ranks of a node on one GPU is a launch error.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from gputopo.cluster.dist_backend import DistBackend
from gputopo.cluster.rank_device import choose_device, shared_gpus
from gputopo.errors import NoHardwareError

KERNEL_S = 0.005  # the fake all_reduce kernel's length on NCCL's stream


class FakeGpu:
    """Two streams' clocks (seconds): the current stream and NCCL's internal stream."""

    def __init__(self):
        self.current = 0.0
        self.nccl = 0.0
        self.calls = []

    def torch(self):
        gpu = self

        class Event:
            def __init__(self, enable_timing=False):
                self.at = None

            def record(self, stream=None):
                gpu.calls.append("record")
                self.at = gpu.current

            def synchronize(self):
                gpu.calls.append("synchronize")

            def elapsed_time(self, other):  # ms, as CUDA
                return (other.at - self.at) * 1e3

        cuda = SimpleNamespace(Event=Event, synchronize=lambda d=None: None)
        return SimpleNamespace(empty=lambda n, dtype, device: torch.empty(n, dtype=dtype),
                               float32=torch.float32, cuda=cuda)

    def dist(self, n):
        gpu = self

        class Work:
            def wait(self):  # WorkNCCL::synchronizeStream: current stream waits on NCCL's end
                gpu.calls.append("wait")
                gpu.current = max(gpu.current, gpu.nccl)

        def all_reduce(x, group=None, async_op=False):
            gpu.calls.append("all_reduce")
            # NCCL's stream waits for the current stream, then runs the kernel
            gpu.nccl = max(gpu.nccl, gpu.current) + KERNEL_S
            x.fill_(float(n))
            assert async_op
            return Work()

        def barrier(group=None, device_ids=None):
            gpu.calls.append(f"barrier {device_ids}")

        return SimpleNamespace(barrier=barrier, all_reduce=all_reduce)


def backend(gpu: FakeGpu, n: int) -> DistBackend:
    b = DistBackend.__new__(DistBackend)
    b.torch, b.dist, b.fabric = gpu.torch(), gpu.dist(n), "cuda"
    b.size_bytes, b.samples, b.device = 1024, 3, torch.device("cuda", 2)
    return b


def test_cluster_all_reduce_time_covers_the_collective():
    gpu = FakeGpu()
    out = backend(gpu, 2)._time_all_reduce(None, 2)
    assert out["wrong"] == 0
    assert out["time_s"] == pytest.approx(KERNEL_S)  # the end event waits for NCCL's stream
    first = gpu.calls[:6]
    assert first == ["barrier [2]", "record", "all_reduce", "wait", "record", "synchronize"]


def fake_cuda(bus_ids):
    """torch.cuda as a task sees it: the GPUs CUDA_VISIBLE_DEVICES leaves, numbered from 0."""
    def props(i):
        dom, bus, dev = (int(x, 16) for x in bus_ids[i].replace(".", ":").split(":")[:3])
        return SimpleNamespace(pci_domain_id=dom, pci_bus_id=bus, pci_device_id=dev)

    return SimpleNamespace(is_available=lambda: bool(bus_ids), device_count=lambda: len(bus_ids),
                           get_device_properties=props)


NODE = ["0000:1b:00.0", "0000:43:00.0", "0000:52:00.0", "0000:61:00.0"]


def test_torchrun_rank_drives_the_gpu_of_its_local_rank():
    assert choose_device(fake_cuda(NODE), 2, 4) == (2, "0000:52:00.0")


def test_slurm_task_bound_to_one_gpu_drives_the_one_it_sees():
    # srun --gpus-per-task=1: local rank 3 sees only its own GPU, as device 0
    assert choose_device(fake_cuda(["0000:61:00.0"]), 3, 4) == (0, "0000:61:00.0")
    # --gpus-per-task=2: the task's first GPU
    assert choose_device(fake_cuda(NODE[2:]), 1, 2 + 2) == (0, "0000:52:00.0")


def test_a_task_that_sees_no_gpu_is_no_hardware():
    with pytest.raises(NoHardwareError, match="rank 3"):
        choose_device(fake_cuda([]), 3, 4, "rank 3 (node-a)")


def test_two_ranks_of_a_node_on_one_gpu_are_named():
    recs = [{"rank": 0, "node": "a", "gpu_bus_id": NODE[0]},
            {"rank": 1, "node": "a", "gpu_bus_id": NODE[0]},
            {"rank": 2, "node": "b", "gpu_bus_id": NODE[0]},
            {"rank": 3, "node": "b", "gpu_bus_id": NODE[1]}]
    assert shared_gpus(recs) == ["ranks 0, 1 on a all drive GPU 0000:1b:00.0"]
    assert shared_gpus(recs[2:]) == []
    assert shared_gpus([{"rank": 0, "node": "a", "gpu_bus_id": None}] * 2) == []  # cpu fabric


def test_a_message_is_checked_against_the_rank_s_free_memory():
    from gputopo.cluster.rank_device import GLOO_BUFFERS, message_fit_error

    gib = 1 << 30
    assert message_fit_error(8 * gib, "cuda", 10 * gib, 8) is None  # one GPU each: ranks do not add up
    why = message_fit_error(16 * gib, "cuda", 10 * gib, 1)
    assert why and "GPU" in why and "10.0 GiB free" in why
    # cpu: the node's ranks share its memory, each with the tensor and gloo's scratch
    assert message_fit_error(gib, "cpu", GLOO_BUFFERS * 4 * gib, 4) is None
    why = message_fit_error(gib, "cpu", GLOO_BUFFERS * 4 * gib - 1, 4)
    assert why and "4 rank(s)" in why and "host memory" in why
    assert message_fit_error(1 << 50, "cpu", None, 1) is None  # unknown: not refused on a guess


def test_free_memory_of_a_cuda_rank_is_the_device_s_free_bytes():
    from gputopo.cluster.rank_device import free_bytes

    seen = []
    cuda = SimpleNamespace(mem_get_info=lambda i: seen.append(i) or (5 << 30, 80 << 30))
    assert free_bytes(SimpleNamespace(cuda=cuda), "cuda", 3) == 5 << 30 and seen == [3]
    broken = SimpleNamespace(mem_get_info=lambda i: (_ for _ in ()).throw(RuntimeError("no")))
    assert free_bytes(SimpleNamespace(cuda=broken), "cuda", 0) is None
