"""`gputopo gate`'s GPU selection (gputopo/fleet/allocation.py) from synthetic Slurm prolog and
container environments, against a simulated machine's own UUIDs, bus ids and device (minor)
numbers read through its fake NVML, as a real machine's are through pynvml."""

import pytest

from gputopo.errors import UsageError
from gputopo.fleet.allocation import allocated, cuda_visible_uuids, selected_gpus
from gputopo.fleet.allocation import minor_numbers
from gputopo.sim.scan import scan_simulated

#: Four GPUs whose device numbers run backwards against NVML's order (NVML index k is
#: /dev/nvidia<3-k>): a device number taken as an index would name the wrong GPU.
SHUFFLED = """
name = "minors-4gpu"
[pairs]
default = "NODE"
[defaults]
name = "NVIDIA A100-SXM4-80GB"
[[gpu]]
bus_id = "0000:07:00.0"
minor_number = 3
[[gpu]]
bus_id = "0000:0f:00.0"
minor_number = 2
[[gpu]]
bus_id = "0000:47:00.0"
minor_number = 1
[[gpu]]
bus_id = "0000:4e:00.0"
minor_number = 0
"""


@pytest.fixture(scope="module")
def shuffled(tmp_path_factory):
    path = tmp_path_factory.mktemp("minors") / "minors-4gpu.toml"
    path.write_text(SHUFFLED)
    return scan_simulated(str(path)), minor_numbers(str(path))


def test_minor_numbers_come_from_nvml(shuffled):
    _, minors = shuffled
    assert minors == {0: 3, 1: 2, 2: 1, 3: 0}
    assert minor_numbers("dgx-h100") == {k: k for k in range(8)}  # default: the index


def test_slurm_job_gpus_are_device_numbers_not_indices(shuffled):
    topo, minors = shuffled
    sel = allocated({"SLURM_JOB_GPUS": "0,1"}, topo, minors)
    assert sel.gpus == [2, 3]  # /dev/nvidia0 and /dev/nvidia1
    assert [str(topo.gpu(g).pci_bus_id) for g in sel.gpus] == ["00000000:47:00.0", "00000000:4E:00.0"]
    assert sel.source == "SLURM_JOB_GPUS=0,1"


def test_slurm_job_gpus_come_before_cuda_visible_devices(shuffled):
    topo, minors = shuffled
    sel = allocated({"SLURM_JOB_GPUS": "3", "CUDA_VISIBLE_DEVICES": "0"}, topo, minors)
    assert sel.gpus == [0]


def test_cuda_visible_devices_numbers_and_uuids(shuffled):
    topo, minors = shuffled
    assert allocated({"CUDA_VISIBLE_DEVICES": "2"}, topo, minors).gpus == [1]
    u = [str(g.uuid) for g in topo.gpus]
    assert allocated({"CUDA_VISIBLE_DEVICES": f"{u[3]},{u[0]}"}, topo, minors).gpus == [0, 3]


def test_container_all_uuids_and_numbers():
    topo = scan_simulated("dgx-h100")
    minors = minor_numbers("dgx-h100")
    sel = allocated({"NVIDIA_VISIBLE_DEVICES": "all"}, topo, minors)
    assert sel.gpus == list(range(8)) and sel.notes
    uuids = {str(g.uuid): g.nvml_index for g in topo.gpus}
    want = "GPU-3ed5d5ff-9be4-e5b9-b747-09d91e685d0f,GPU-a2b26654-d65d-86f1-2e93-872933e1fe6e"
    assert allocated({"NVIDIA_VISIBLE_DEVICES": want}, topo, minors).gpus == sorted(uuids[x] for x in want.split(","))
    assert allocated({"NVIDIA_VISIBLE_DEVICES": "5,6"}, topo, minors).gpus == [5, 6]


@pytest.mark.parametrize("env, words", [
    ({}, "no allocation found"),
    ({"SLURM_JOB_GPUS": ""}, "SLURM_JOB_GPUS"),
    ({"SLURM_JOB_GPUS": "0,x"}, "'x' is neither a device number nor a GPU UUID"),
    ({"SLURM_JOB_GPUS": "0,,1"}, "expected GPUs separated by commas"),
    ({"SLURM_JOB_GPUS": "9"}, "no GPU has device number 9"),
    ({"SLURM_JOB_GPUS": "1,1"}, "named twice"),
    ({"CUDA_VISIBLE_DEVICES": "GPU-00000000-0000-0000-0000-000000000000"}, "no GPU of this machine has UUID"),
    ({"NVIDIA_VISIBLE_DEVICES": "none"}, "this container was given no GPU"),
    ({"NVIDIA_VISIBLE_DEVICES": "void"}, "this container was given no GPU"),
])
def test_bad_allocations_are_one_line_usage_errors(shuffled, env, words):
    topo, minors = shuffled
    with pytest.raises(UsageError) as e:
        allocated(env, topo, minors)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_unreadable_minor_numbers_are_said(shuffled):
    topo, _ = shuffled
    with pytest.raises(UsageError, match="minor"):
        allocated({"SLURM_JOB_GPUS": "0"}, topo, {})


def test_gpus_option():
    topo = scan_simulated("dgx-h100")
    assert selected_gpus("0-3,6", topo).gpus == [0, 1, 2, 3, 6]
    assert selected_gpus("all", topo).gpus == list(range(8))
    u5 = str(topo.gpu(5).uuid)
    assert selected_gpus(u5, topo).gpus == [5]
    for bad in ("9", "0-x", f"{u5},{u5}", "GPU-00000000-0000-0000-0000-000000000000"):
        with pytest.raises(UsageError):
            selected_gpus(bad, topo)


def test_workers_are_started_with_uuids():
    topo = scan_simulated("dgx-h100")
    text = cuda_visible_uuids(topo, [1, 4])
    assert text == f"{topo.gpu(1).uuid},{topo.gpu(4).uuid}"


def test_a_repeated_minor_number_is_refused(tmp_path):
    path = tmp_path / "dup.toml"
    path.write_text(SHUFFLED.replace("minor_number = 0", "minor_number = 3"))
    from gputopo.errors import GputopoError

    with pytest.raises(GputopoError, match="minor number 3"):
        scan_simulated(str(path))
