"""NIC port error counters go into the history with the GPUs' (keyed nic:<device>:<port>), and
their growth between scans is the counter-growth warning naming the NIC; a non-zero count alone
is only the scan's nic-errors info."""

from __future__ import annotations

from gputopo.history.record import counters_of
from gputopo.recording import record_from_scan, save
from gputopo.sim.description import parse_description
from gputopo.sim.scan import scan_description

DAY = 86400.0
T0 = 1_790_000_000.0


def scan_with(symbol_errors: int):
    toml = ('extends = "dgx-h100"\nname = "nic-hist"\n[[nic]]\nname = "mlx5_0"\nbus_id = "0000:19:00.0"\n'
            f'gpu = 0\ncounters = {{ symbol_error = {symbol_errors} }}\n')
    return scan_description(parse_description(toml, "t.toml"))


def test_nic_counters_are_recorded_with_their_port():
    c = {(v.gpu_uuid, v.counter): v for v in counters_of(scan_with(7))}
    v = c[("nic:mlx5_0:1", "nic_symbol_error")]
    assert (v.value, v.link, v.bus_id, v.nvml_index) == (7, 1, "0000:19:00.0", -1)


def test_growth_between_scans_is_a_warning_naming_the_nic(tmp_path):
    path = tmp_path / "h.sqlite"
    found = []
    for k, n in enumerate([5, 5, 9]):
        identity, rec = record_from_scan(scan_with(n), [], ["scan"], clock=T0 + k * DAY)
        found.append(save(path, identity, rec).findings)
    assert found[0] == [] and found[1] == []  # 5 at the first scan: a fact, not growth
    (f,) = found[2]
    assert f.kind == "counter-growth" and f.severity == "warning" and f.gpus is None
    assert f.evidence["nic"] == "mlx5_0" and f.evidence["port"] == 1 and f.evidence["delta"] == 4
    assert f.message.startswith("NIC mlx5_0 port 1: nic_symbol_error grew by 4")


def test_counters_that_grow_on_healthy_fabrics_are_not_recorded():
    toml = ('extends = "dgx-h100"\nname = "nic-hist"\n[[nic]]\nname = "mlx5_0"\nbus_id = "0000:19:00.0"\n'
            'gpu = 0\ncounters = { VL15_dropped = 3, port_xmit_discards = 9 }\n')
    names = {v.counter for v in counters_of(scan_description(parse_description(toml, "t.toml")))
             if v.gpu_uuid.startswith("nic:")}
    assert "nic_symbol_error" in names
    assert "nic_VL15_dropped" not in names and "nic_port_xmit_discards" not in names
