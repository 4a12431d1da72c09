"""[[nic]] port keys and [host] peermem / open_kernel_module in the description format, and the
sysfs/proc files the fake host writes for them."""

from __future__ import annotations

import os

import pytest

from gputopo.errors import InputFileError
from gputopo.sim.description import parse_description
from gputopo.sim.fake_host import FakeHost

BASE = 'extends = "dgx-h100"\nname = "t"\n'


def nic(extra=""):
    return f'[[nic]]\nname = "mlx5_0"\nbus_id = "0000:19:00.0"\ngpu = 0\n{extra}'


@pytest.mark.parametrize("extra, says", [
    ('state = "Broken"\n', "expected one of Down"),
    ('state = "Active"\nphys_state = "Polling"\n', "physical link up"),
    ("rate_gbps = -1\n", "rate in Gb/s"),
    ("counters = { bogus = 1 }\n", "unknown counter"),
    ("counters = { symbol_error = -2 }\n", "count >= 0"),
    ("pcie_width = 32\n", "integer in 1..16"),
    ('link_layer = "Token Ring"\n', "InfiniBand"),
])
def test_bad_port_keys_are_one_clear_error(extra, says):
    with pytest.raises(InputFileError) as exc:
        parse_description(BASE + nic(extra), "t.toml")
    assert says in str(exc.value)


def test_bad_host_keys():
    with pytest.raises(InputFileError, match="nvidia_peermem"):
        parse_description(BASE + '[host]\npeermem = "yes"\n' + nic(), "t.toml")
    with pytest.raises(InputFileError, match="true or false"):
        parse_description(BASE + '[host]\nopen_kernel_module = "yes"\n' + nic(), "t.toml")


def test_fake_host_writes_the_port_and_module_files():
    desc = parse_description(BASE + '[host]\npeermem = "none"\nopen_kernel_module = true\n'
                             + nic('state = "Down"\nrate_gbps = 200\ncounters = { link_downed = 4 }\n'
                                   'pcie_gen = 4\n'), "t.toml")
    with FakeHost(desc) as host:
        def read(rel):
            with open(host.path(rel)) as f:
                return f.read().strip()
        port = "sys/class/infiniband/mlx5_0/ports/1"
        assert read(f"{port}/state") == "1: DOWN" and read(f"{port}/phys_state") == "2: Polling"
        assert read(f"{port}/rate") == "200 Gb/sec (4X HDR)"
        assert read(f"{port}/counters/link_downed") == "4" and read(f"{port}/counters/symbol_error") == "0"
        assert read("sys/bus/pci/devices/0000:19:00.0/current_link_speed").startswith("16.0 GT/s")
        assert read("sys/bus/pci/devices/0000:19:00.0/max_link_speed").startswith("32.0 GT/s")
        assert "Open Kernel Module" in read("proc/driver/nvidia/version")
        assert "peermem" not in read("proc/modules") and "mlx5_ib" in read("proc/modules")
        assert not os.path.exists(host.path("sys/module/nvidia_peermem"))
