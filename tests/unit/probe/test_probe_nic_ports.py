"""The sysfs/proc readers of NIC ports and GPUDirect RDMA's kernel side, on hand-made trees laid
out as a real host's (tmp_path), not through the simulator."""

from __future__ import annotations

import os

from gputopo.model.values import NotAvailable
from gputopo.probe.gdr_kernel import kernel_version, read_gdr_kernel
from gputopo.probe.nic_ports import pcie_gen, read_nic_ports


def put(root, rel, text):
    p = os.path.join(root, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "w") as f:
        f.write(text)


def ib_tree(root, dev="mlx5_3", bdf="0000:5e:00.0", port="1", state="4: ACTIVE", phys="5: LinkUp",
            rate="200 Gb/sec (4X HDR)", counters=None):
    base = f"sys/class/infiniband/{dev}"
    put(root, f"{base}/hca_type", "MT4129\n")
    put(root, f"{base}/fw_ver", "28.39.1002\n")
    put(root, f"{base}/ports/{port}/state", state + "\n")
    put(root, f"{base}/ports/{port}/phys_state", phys + "\n")
    put(root, f"{base}/ports/{port}/rate", rate + "\n")
    put(root, f"{base}/ports/{port}/link_layer", "Ethernet\n")
    for k, v in (counters or {}).items():
        put(root, f"{base}/ports/{port}/counters/{k}", f"{v}\n")
    pci = f"sys/bus/pci/devices/{bdf}"
    put(root, f"{pci}/current_link_speed", "16.0 GT/s PCIe\n")
    put(root, f"{pci}/max_link_speed", "32.0 GT/s PCIe\n")
    put(root, f"{pci}/current_link_width", "16\n")
    put(root, f"{pci}/max_link_width", "16\n")


def test_port_read_from_sysfs(tmp_path):
    root = str(tmp_path)
    ib_tree(root, counters={"symbol_error": 7, "link_downed": 0})
    (p,) = read_nic_ports(root, "mlx5_3", "0000:5e:00.0")
    assert (p.name, p.state, p.phys_state, p.rate_gbps, p.link_layer) == ("mlx5_3:1", "Active", "LinkUp", 200.0, "Ethernet")
    assert (p.pcie_gen_current, p.pcie_gen_max, p.pcie_width_current, p.pcie_width_max) == (4, 5, 16, 16)
    assert p.ca_type == "MT4129" and p.firmware == "28.39.1002"
    assert isinstance(p.board_id, NotAvailable) and "board_id" in p.board_id.reason
    assert p.counters["symbol_error"] == 7 and p.counters["link_downed"] == 0
    # a counter file the driver does not write is n/a, never 0
    assert isinstance(p.counters["port_rcv_errors"], NotAvailable)
    assert p.sources["state"] == "/sys/class/infiniband/mlx5_3/ports/1/state"


def test_down_port_and_unknown_state(tmp_path):
    root = str(tmp_path)
    ib_tree(root, state="1: DOWN", phys="3: Disabled")
    (p,) = read_nic_ports(root, "mlx5_3", "0000:5e:00.0")
    assert (p.state, p.phys_state) == ("Down", "Disabled")
    ib_tree(root, state="9: WHAT")
    (p,) = read_nic_ports(root, "mlx5_3", "0000:5e:00.0")
    assert isinstance(p.state, NotAvailable)


def test_no_ports_folder_no_ports(tmp_path):
    assert read_nic_ports(str(tmp_path), "mlx5_0", "0000:19:00.0") == []


def test_pcie_gen_text():
    assert pcie_gen("32.0 GT/s PCIe") == 5 and pcie_gen("8.0 GT/s") == 3 and pcie_gen("2.5 GT/s PCIe") == 1
    assert isinstance(pcie_gen("Unknown"), NotAvailable) and isinstance(pcie_gen(None), NotAvailable)


def modules(root, names):
    put(root, "proc/modules", "".join(f"{n} 16384 0 - Live 0x0000000000000000\n" for n in names))


def test_peermem_from_nccl_files_or_proc_modules(tmp_path):
    root = str(tmp_path)
    modules(root, ["nvidia", "mlx5_ib"])
    g = read_gdr_kernel(root, "5.15.0-91-generic")
    assert g.peermem is False and g.sources["peermem"] == "/proc/modules"
    modules(root, ["nv_peer_mem", "nvidia"])
    assert read_gdr_kernel(root, "5.15.0").peermem_module == "nv_peer_mem"
    put(root, "sys/module/nvidia_peermem/version", "550.54.15\n")
    g = read_gdr_kernel(root, "5.15.0")
    assert g.peermem is True and g.peermem_module == "nvidia_peermem"
    assert g.sources["peermem"] == "/sys/module/nvidia_peermem/version"


def test_nothing_readable_is_not_available_not_absent(tmp_path):
    g = read_gdr_kernel(str(tmp_path), NotAvailable("no osrelease"))
    assert isinstance(g.peermem, NotAvailable) and isinstance(g.dmabuf, NotAvailable)
    assert isinstance(g.available, NotAvailable)


def test_dmabuf_needs_new_kernel_and_open_module(tmp_path):
    root = str(tmp_path)
    modules(root, ["nvidia"])
    put(root, "proc/driver/nvidia/version",
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.14  Release Build\n")
    g = read_gdr_kernel(root, "6.5.0-1018-nvidia")
    assert g.open_kernel_module is True and g.dmabuf is True and g.available is True
    g = read_gdr_kernel(root, "5.4.0-150-generic")
    assert g.dmabuf is False and "older than 5.12" in g.dmabuf_reason and g.available is False
    put(root, "proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.154.05\n")
    g = read_gdr_kernel(root, "6.5.0")
    assert g.open_kernel_module is False and g.dmabuf is False and g.available is False


def test_kernel_version():
    assert kernel_version("5.15.0-91-generic") == (5, 15) and kernel_version("6.8.0") == (6, 8)
    assert kernel_version(NotAvailable("x")) is None and kernel_version("weird") is None
