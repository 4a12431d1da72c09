"""The NIC port model: state spellings of sysfs and ibstat meet, JSON round-trips, GDR availability."""

from gputopo.model.nic import GdrKernel, NicPort, phys_state, port_state, rate_gbps
from gputopo.model.values import NotAvailable


def test_sysfs_and_ibstat_spellings_become_one_name():
    assert port_state("4: ACTIVE") == port_state("Active") == "Active"
    assert port_state("1: DOWN") == port_state("Down") == "Down"
    assert port_state("2: INIT") == port_state("Initializing") == "Initializing"
    assert phys_state("5: LinkUp") == phys_state("LinkUp") == "LinkUp"
    assert phys_state("2: Polling") == "Polling"
    assert phys_state("3: Disabled") == phys_state("Disabled") == "Disabled"
    assert isinstance(port_state("weird"), NotAvailable)


def test_rate_in_gbps():
    assert rate_gbps("400 Gb/sec (4X NDR)") == 400.0
    assert rate_gbps("400") == 400.0
    assert rate_gbps("2.5 Gb/sec (1X SDR)") == 2.5
    assert isinstance(rate_gbps("unknown"), NotAvailable)


def test_port_json_round_trip_keeps_not_available():
    p = NicPort(device="mlx5_0", port=1, state="Active", phys_state="LinkUp", rate_gbps=400.0,
                link_layer="InfiniBand", counters={"symbol_error": 3, "link_downed": NotAvailable("no file")},
                pcie_gen_current=5, ca_type="MT4129", sources={"state": "/sys/class/infiniband/mlx5_0/ports/1/state"})
    d = p.to_json()
    assert d["name"] == "mlx5_0:1"
    assert d["pcie_gen_max"] == {"not_available": "not read"}
    back = NicPort.from_json(d)
    assert back == p


def test_gdr_unavailable_only_when_both_known_absent():
    assert GdrKernel(peermem=False, dmabuf=False).available is False
    assert GdrKernel(peermem=True, dmabuf=False).available is True
    assert GdrKernel(peermem=False, dmabuf=True).available is True
    unknown = GdrKernel(peermem=False, dmabuf=NotAvailable("no /proc/driver/nvidia/version")).available
    assert isinstance(unknown, NotAvailable) and "nvidia/version" in unknown.reason
    g = GdrKernel(peermem=True, peermem_module="nvidia_peermem", dmabuf=False, dmabuf_reason="kernel 5.4")
    assert GdrKernel.from_json(g.to_json()) == g
