"""Running processes on a simulated GPU (gputopo/sim/processes.py) as the probe reads them
(gputopo/probe/nvml_processes.py): what `health --level quick|pairs` uses to leave a GPU a job
uses alone."""

from __future__ import annotations

import pytest

from gputopo.errors import InputFileError
from gputopo.probe.nvml_processes import read_gpu_use
from gputopo.sim.description import parse_description
from gputopo.sim.fake_nvml import FakeNvml

BASE = 'extends = "dgx-a100"\nname = "busy"\n'


def _use(text: str, **options):
    desc = parse_description(text)
    lib = FakeNvml(desc, **options)
    lib.nvmlInit()
    try:
        return desc, read_gpu_use(lib)
    finally:
        lib.nvmlShutdown()


def test_processes_declared_per_gpu_are_read_back_by_uuid_and_bus_id():
    desc, use = _use(BASE + "[defaults]\nprocesses = []\n"
                     "[[gpu]]\nprocesses = [4242, { pid = 77, used_mib = 1000 }]\n" + "[[gpu]]\n" * 7)
    assert [u.uuid for u in use] == [g.uuid for g in desc.gpus]
    assert [u.bus_id for u in use] == [g.bus_id for g in desc.gpus]
    assert use[0].pids == [77, 4242] and not use[0].idle
    assert use[0].state() == "in use by pid 77, 4242"
    assert all(u.idle and u.state() == "idle" for u in use[1:])


def test_the_fake_answers_as_pynvml_does():
    desc = parse_description(BASE + "[defaults]\nprocesses = [{ pid = 9, used_mib = 2 }, 10]\n")
    lib = FakeNvml(desc)
    lib.nvmlInit()
    h = lib.nvmlDeviceGetHandleByIndex(3)
    procs = lib.nvmlDeviceGetComputeRunningProcesses(h)
    assert [(p.pid, p.usedGpuMemory) for p in procs] == [(9, 2 * 1024 * 1024), (10, None)]
    assert lib.nvmlDeviceGetComputeRunningProcesses_v3(h) == procs
    assert lib.calls["nvmlDeviceGetComputeRunningProcesses"] == 1


def test_a_gpu_whose_processes_cannot_be_read_is_not_idle():
    _, use = _use(BASE, unsupported={"nvmlDeviceGetComputeRunningProcesses"})
    assert all(u.pids is None and not u.idle for u in use)
    assert "not supported" in use[0].state()
    _, use = _use(BASE, errors={("nvmlDeviceGetComputeRunningProcesses", 2): 999})
    assert use[2].pids is None and "Unknown" in use[2].why and use[1].idle


def test_a_lost_gpu_is_not_idle():
    _, use = _use(BASE, lost=[5])
    assert use[5].pids is None and "lost" in use[5].why
    assert use[4].idle


@pytest.mark.parametrize("value, says", [
    ("4242", "expected a list"),
    ("[0]", "expected a pid"),
    ("[true]", "expected a pid"),
    ("[5, 5]", "listed twice"),
    ("[{ pid = 5, mem = 1 }]", "unknown key 'mem'"),
    ("[{ pid = 5, used_mib = -1 }]", "used_mib"),
])
def test_bad_processes_are_refused_saying_where(value, says):
    with pytest.raises(InputFileError) as e:
        parse_description(BASE + f"[defaults]\nprocesses = {value}\n")
    assert says in str(e.value) and "processes" in str(e.value)
