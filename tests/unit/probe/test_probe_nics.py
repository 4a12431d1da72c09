"""RDMA NICs: read from sysfs by the host reader (a hand-made tree as a real host lays it out, and
a simulated host's), each GPU-NIC class told by the PCIe tree; declared in sim descriptions."""

from __future__ import annotations

import json
import os

import pytest

from gputopo.errors import InputFileError
from gputopo.model import LinkClass
from gputopo.probe.nics import read_nics
from gputopo.probe.smi import topology_from_smi
from gputopo.sim.description import parse_description
from gputopo.sim.fake_host import format_topo_text
from gputopo.sim.nics import endpoint_kind
from gputopo.sim.scan import scan_description, scan_simulated
from helpers.cli import gputopo_here
from helpers.paths import REPO

C = LinkClass.parse

NICS = """
extends = "dgx-h100"
name = "h100-nics"
[[nic]]
name = "mlx5_0"
bus_id = "0000:19:00.0"
gpu = 0
[[nic]]
name = "mlx5_1"
bus_id = "0000:2b:00.0"
gpu = 1
class = "PXB"
[[nic]]
name = "mlx5_2"
bus_id = "0000:3b:00.0"
gpu = 2
class = "PHB"
[[nic]]
name = "mlx5_10"
bus_id = "0000:c0:00.0"
numa_node = 1
"""


def socket_of(g):
    return 0 if g < 4 else 1


def test_sim_nics_found_by_the_host_reader_with_their_classes():
    topo = scan_description(parse_description(NICS, "nics.toml"))
    assert [(n.label, n.device, n.pci_bus_id, n.numa_node) for n in topo.nics] == [
        ("NIC0", "mlx5_0", "0000:19:00.0", 0), ("NIC1", "mlx5_1", "0000:2b:00.0", 0),
        ("NIC2", "mlx5_2", "0000:3b:00.0", 0), ("NIC3", "mlx5_10", "0000:c0:00.0", 1)]  # mlx5_10 last
    near = {0: "PIX", 1: "PXB", 2: "PHB"}
    for k in range(3):
        want = {g: C(near[k]) if g == k else C("NODE" if socket_of(g) == 0 else "SYS") for g in range(8)}
        assert topo.nics[k].gpu_classes == want, k
    assert topo.nics[3].gpu_classes == {g: C("SYS" if socket_of(g) == 0 else "NODE") for g in range(8)}
    assert topo.nics[0].nic_classes == {"NIC1": C("NODE"), "NIC2": C("NODE"), "NIC3": C("SYS")}


def test_reader_classes_agree_with_the_declared_places_everywhere():
    desc = parse_description(NICS, "nics.toml")
    topo = scan_description(desc)
    n = len(desc.gpus)
    kind = endpoint_kind(lambda i, j: str(desc.pcie_class(i, j)), [g.numa_node for g in desc.gpus],
                         desc.nics)
    for k, nic in enumerate(topo.nics):
        for g, cls in nic.gpu_classes.items():
            assert str(cls) == kind(n + k, g) == desc.pcie_tree.derived_kind(n + k, g)
        for other, cls in nic.nic_classes.items():
            assert str(cls) == kind(n + k, n + int(other[3:]))


def test_builtin_dgx_h100_has_a_pix_nic_per_gpu():
    topo = scan_simulated("dgx-h100")
    assert [n.device for n in topo.nics] == [f"mlx5_{k}" for k in range(8)]
    for k, nic in enumerate(topo.nics):
        assert nic.gpu_classes[k] == C("PIX")
        assert {str(c) for g, c in nic.gpu_classes.items() if g != k} == {"NODE", "SYS"}


def test_nics_leave_the_gpu_classes_alone():
    plain = scan_description(parse_description('extends = "dgx-h100"\nnic = []\n', "plain.toml"))
    with_nics = scan_description(parse_description(NICS, "nics.toml"))
    assert plain.nics == []
    assert {p.gpus: p.link_class for p in plain.pairs} == {p.gpus: p.link_class for p in with_nics.pairs}
    assert {(p.gpus, str(plain.gpu(p.gpus[0]).numa_node)) for p in plain.pairs} == \
        {(p.gpus, str(with_nics.gpu(p.gpus[0]).numa_node)) for p in with_nics.pairs}


def test_fake_nvidia_smi_text_shows_the_same_nics():
    desc = parse_description(NICS, "nics.toml")
    from_text = topology_from_smi(format_topo_text(desc))
    scanned = scan_description(desc)
    assert [(n.label, n.device, n.gpu_classes, n.nic_classes) for n in from_text.nics] == \
        [(n.label, n.device, n.gpu_classes, n.nic_classes) for n in scanned.nics]


def test_cli_json_and_smi_round_trip(tmp_path):
    path = tmp_path / "nics.toml"
    path.write_text(NICS)

    def gputopo(*args, input=None):
        proc = gputopo_here(*args, input=input, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    doc = json.loads(gputopo("scan", "--sim", str(path), "--json"))
    assert [n["device"] for n in doc["nics"]] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_10"]
    assert doc["nics"][1]["gpu_link_classes"][1] == {"gpu": 1, "link_class": "PXB"}
    smi = gputopo("scan", "--sim", str(path), "--format", "smi")
    assert "\tNIC3\tCPU Affinity" in smi and "  NIC3: mlx5_10\n" in smi
    assert gputopo("scan", "--from-smi", "-", "--format", "smi", input=smi) == smi


@pytest.mark.parametrize("entry,key,match", [
    ('name = "mlx5_0"\nbus_id = "0000:19:00.0"\nspeed = 1', "nic[0].speed", "unknown key 'speed'"),
    ('name = "mlx5_0"\nbus_id = "0000:19:00.0"\nclass = "PIX"', "nic[0].class", "set gpu too"),
    ('name = "mlx5_0"\nbus_id = "0000:19:00.0"\ngpu = 0\nclass = "NODE"', "nic[0].class", "expected one of PIX"),
    ('name = "mlx5_0"\nbus_id = "0000:18:00.0"', "nic[0].bus_id", "also GPU 0's"),
    ('name = "mlx5_0"\nbus_id = "0000:19:00.0"\ngpu = 8', "nic[0].gpu", "GPU index 0..7"),
    ('name = "mlx5_0"\nbus_id = "0000:19:00.0"\ngpu = 4\nnuma_node = 0', "nic[0].numa_node", "differs from GPU 4"),
    ('name = "mlx 5"\nbus_id = "0000:19:00.0"', "nic[0].name", "RDMA device name"),
    ('bus_id = "0000:19:00.0"', "nic[0]", "missing name"),
])
def test_bad_nic_declarations_name_key_and_line(entry, key, match):
    text = 'extends = "dgx-h100"\n[[nic]]\n' + entry + "\n"
    with pytest.raises(InputFileError, match=match) as info:
        parse_description(text, "bad.toml")
    assert info.value.key == key and info.value.line is not None


def test_duplicate_nic_name_or_address():
    two = 'extends = "dgx-h100"\n[[nic]]\nname = "mlx5_0"\nbus_id = "0000:19:00.0"\n[[nic]]\n'
    with pytest.raises(InputFileError, match="also NIC 0's"):
        parse_description(two + 'name = "mlx5_0"\nbus_id = "0000:1a:00.0"\n', "bad.toml")
    with pytest.raises(InputFileError, match="also NIC mlx5_0's"):
        parse_description(two + 'name = "mlx5_1"\nbus_id = "0000:19:00.0"\n', "bad.toml")


# ----------------------------------------------------------------------------- a real host's layout


def _device(root, path, numa):
    """A PCI function at sys/devices/PATH, its sys/bus/pci/devices link and numa_node."""
    folder = root / "sys" / "devices" / path
    folder.mkdir(parents=True)
    (folder / "numa_node").write_text(f"{numa}\n")
    bdf = path.rsplit("/", 1)[1]
    link = root / "sys" / "bus" / "pci" / "devices" / bdf
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink("../../../devices/" + path, link)
    return folder


def _rdma(root, name, path):
    ib = root / "sys" / "devices" / path / "infiniband" / name
    ib.mkdir(parents=True)
    os.symlink("../../../" + path.rsplit("/", 1)[1], ib / "device")
    cls = root / "sys" / "class" / "infiniband"
    cls.mkdir(parents=True, exist_ok=True)
    os.symlink(f"../../devices/{path}/infiniband/{name}", cls / name)


def test_real_layout_classes_and_software_rdma_left_out(tmp_path):
    sw = "pci0000:15/0000:15:01.0/0000:16:00.0"  # root port, then a switch's upstream port
    _device(tmp_path, f"{sw}/0000:17:00.0/0000:18:00.0", 0)  # GPU0 below downstream port 17:00.0
    _device(tmp_path, f"{sw}/0000:17:01.0/0000:19:00.0", 0)  # NIC below downstream port 17:01.0
    _device(tmp_path, f"{sw}/0000:17:02.0/0000:1a:00.0", 0)  # its second port (mlx5_1)
    _device(tmp_path, "pci0000:15/0000:15:02.0/0000:20:00.0", 0)  # GPU1: same host bridge, own port
    _device(tmp_path, "pci0000:37/0000:37:01.0/0000:38:00.0", 0)  # GPU2: other host bridge, node 0
    _device(tmp_path, "pci0000:97/0000:97:01.0/0000:98:00.0", -1)  # NIC on a node sysfs does not know
    _device(tmp_path, "pci0000:b7/0000:b7:01.0/0000:b8:00.0", 1)  # GPU3: the other socket
    _rdma(tmp_path, "mlx5_0", f"{sw}/0000:17:01.0/0000:19:00.0")
    _rdma(tmp_path, "mlx5_1", f"{sw}/0000:17:02.0/0000:1a:00.0")
    _rdma(tmp_path, "mlx5_2", "pci0000:97/0000:97:01.0/0000:98:00.0")
    rxe = tmp_path / "sys" / "devices" / "virtual" / "infiniband" / "rxe0"
    rxe.mkdir(parents=True)  # soft RoCE: no PCI function behind it
    os.symlink("../../devices/virtual/infiniband/rxe0", tmp_path / "sys" / "class" / "infiniband" / "rxe0")
    gpus = {0: "00000000:18:00.0", 1: "00000000:20:00.0", 2: "00000000:38:00.0", 3: "00000000:B8:00.0"}
    nics = read_nics(str(tmp_path), gpus)
    assert [(n.label, n.device, n.pci_bus_id) for n in nics] == [
        ("NIC0", "mlx5_0", "0000:19:00.0"), ("NIC1", "mlx5_1", "0000:1a:00.0"),
        ("NIC2", "mlx5_2", "0000:98:00.0")]
    assert nics[0].gpu_classes == {0: C("PIX"), 1: C("PHB"), 2: C("NODE"), 3: C("SYS")}
    assert nics[0].nic_classes == {"NIC1": C("PIX"), "NIC2": C("SYS")}
    assert str(nics[2].numa_node) == "n/a"
    assert nics[2].gpu_classes == {g: C("SYS") for g in range(4)}


def test_no_nics_without_infiniband_class_or_with_a_gpu_not_in_sysfs(tmp_path):
    assert read_nics(str(tmp_path), {0: "00000000:18:00.0"}) == []
    _device(tmp_path, "pci0000:15/0000:15:01.0/0000:19:00.0", 0)
    _rdma(tmp_path, "mlx5_0", "pci0000:15/0000:15:01.0/0000:19:00.0")
    assert [n.device for n in read_nics(str(tmp_path), {})] == ["mlx5_0"]
    assert read_nics(str(tmp_path), {0: "00000000:18:00.0"}) == []  # GPU0 not found: no classes


def test_format_md_example_nics():
    """The documented example: mlx5_0 beside GPU 0 shares the switch of the PIX pair 0,1; mlx5_1
    on node 1 is NODE to GPUs 2 and 3 (GPU 3's own node is "unsupported": its bridges' node)."""

    doc = (REPO / "docs" / "sim-format.md").read_text()
    topo = scan_description(parse_description(doc.split("```toml\n", 1)[1].split("```", 1)[0], "my-box.toml"))
    assert [(n.device, n.numa_node) for n in topo.nics] == [("mlx5_0", 0), ("mlx5_1", 1)]
    assert topo.nics[0].gpu_classes == {0: C("PIX"), 1: C("PIX"), 2: C("SYS"), 3: C("SYS")}
    assert topo.nics[1].gpu_classes == {0: C("SYS"), 1: C("SYS"), 2: C("NODE"), 3: C("NODE")}
