"""`gputopo import ibstat FILE`: saved ibstat / ibv_devinfo text into NIC port facts
(model/nic.py NicPort) and the scan's NIC health findings (report/network_checks.py): a port
Down/Polling is a warning, Down/Disabled an info (may be deliberate), an Active port below its
peers of the same adapter model is nic-rate; 400G compute and 100G front-end NICs are not peers.

Posted texts are under tests/fixtures/ibstat/ (sources in tests/fixtures/README.md); the variants
marked WRITTEN are made up here from them, one change each."""

from __future__ import annotations

import json
from pathlib import Path

from gputopo.importers.ibstat_import import read_ibstat
from gputopo.importers.ibstat_parse import parse_ibstat_lines
from gputopo.model.values import NotAvailable
from helpers.cli import gputopo_here, refused
from helpers.paths import FIXTURES

GPUD = FIXTURES / "ibstat" / "gpud-testdata_h100_cx7-400g-roce_mlx5_11-polling_mlx5_5-disabled.txt"
DEVINFO = FIXTURES / "ibstat" / "ucx-9520_ibv-devinfo_cx5_ib_cut-in-mlx5_1_excerpt.txt"
ALL_ACTIVE_BF3 = FIXTURES / "ibstat" / "gpud-testdata_h100_8x-cx7-400g-ib_bluefield3-bond-200g-eth_all-active.txt"
FRONTEND_DISABLED = FIXTURES / "ibstat" / "gpud-testdata_h100_cx7-400g-ib_cx6dx-mlx5_2-7-8-disabled.txt"
IBSTATUS = FIXTURES / "ibstat" / "gpud-testdata_ibstatus_a100_8x-hdr-200g-ib_mlx5_8-40g-ethernet.txt"

#: WRITTEN: `ibv_devinfo -v`'s port lines for one HDR port (the fields rdma-core prints with -v).
DEVINFO_V = """hca_id:\tmlx5_2
\ttransport:\t\t\tInfiniBand (0)
\tfw_ver:\t\t\t\t20.31.1014
\tvendor_part_id:\t\t\t4123
\tboard_id:\t\t\tMT_0000000223
\tphys_port_cnt:\t\t\t1
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_ACTIVE (4)
\t\t\tmax_mtu:\t\t4096 (5)
\t\t\tactive_width:\t\t4X (2)
\t\t\tactive_speed:\t\t50.0 Gbps (64)
\t\t\tphys_state:\t\tLINK_UP (5)
\t\t\tlink_layer:\t\tInfiniBand
"""


def _import(tmp_path: Path, path):
    out = tmp_path / "run"
    ran = gputopo_here("import", "ibstat", str(path), "--out", str(out), "--no-history")
    assert ran.returncode == 0, ran.stderr
    return ran, json.loads((out / "summary.json").read_text()), out


def _kinds(summary):
    return sorted((f["kind"], f["severity"], (f.get("evidence") or {}).get("nic")) for f in summary["findings"])


def _written(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "written-ibstat.txt"
    p.write_text(text)
    return p


def test_posted_gpud_ibstat_port_facts():
    read = read_ibstat(str(GPUD))
    assert read.form == "ibstat" and len(read.ports) == 12 and not read.problems
    by = {p.name: p for p in read.ports}
    p11, p5, p0, p1 = by["mlx5_11:1"], by["mlx5_5:1"], by["mlx5_0:1"], by["mlx5_1:1"]
    assert (p11.state, p11.phys_state) == ("Down", "Polling")
    assert (p5.state, p5.phys_state) == ("Down", "Disabled")
    assert (p0.state, p0.rate_gbps, p0.ca_type, p0.link_layer, p0.firmware) == (
        "Active", 400.0, "MT4129", "Ethernet", "28.39.1002")
    assert (p1.rate_gbps, p1.ca_type) == (100.0, "MT4125")
    assert p0.sources["rate_gbps"].endswith(GPUD.name)
    # what ibstat cannot know is said, not guessed
    assert isinstance(p0.pcie_width_current, NotAvailable) and "not in ibstat text" in p0.pcie_width_current.reason


def test_posted_gpud_findings_polling_is_a_warning_disabled_an_info(tmp_path):
    ran, s, out = _import(tmp_path, GPUD)
    assert _kinds(s) == [("nic-port-down", "info", "mlx5_5"), ("nic-port-down", "warning", "mlx5_11")]
    assert s["verdict"] == "degraded"
    # the 100G ConnectX-6 Dx front-end ports are not compared with the 400G ConnectX-7 ones
    assert not any(f["kind"] == "nic-rate" for f in s["findings"])
    assert "mlx5_11:1" in ran.stdout and "Polling" in ran.stdout and "400 Gb/s" in ran.stdout  # the port table
    topo = json.loads((out / "topology.json").read_text())
    assert len(topo["nics"]) == 12 and topo["gpus"] == []


def test_a_port_below_its_peers_is_nic_rate(tmp_path):
    """WRITTEN: the gpud text with mlx5_3 (a ConnectX-7) trained to 200 Gb/s."""
    text = GPUD.read_text()
    i = text.index("CA 'mlx5_3'")
    text = text[:i] + text[i:].replace("Rate: 400", "Rate: 200", 1)
    _, s, _ = _import(tmp_path, _written(tmp_path, text))
    rate = [f for f in s["findings"] if f["kind"] == "nic-rate"]
    assert [(f["severity"], f["evidence"]["nic"], f["evidence"]["peer_rate_gbps"]) for f in rate] == [
        ("warning", "mlx5_3", 400.0)]


def test_healthy_node_no_finding(tmp_path):
    """WRITTEN: the gpud text with both down ports Active/LinkUp at 400."""
    text = GPUD.read_text().replace("State: Down", "State: Active").replace("Physical state: Polling", "Physical state: LinkUp")
    text = text.replace("Physical state: Disabled", "Physical state: LinkUp").replace("Rate: 40\n", "Rate: 400\n")
    _, s, _ = _import(tmp_path, _written(tmp_path, text))
    assert s["findings"] == [] and s["verdict"] == "ok"  # port states read and judged: nothing wrong


def test_posted_healthy_node_with_a_200g_bluefield_no_false_alarm(tmp_path):
    """8 ConnectX-7 at 400 Gb/s IB and a BlueField-3 bond (MT41692) at 200 Gb/s Ethernet, all Active:
    the 200 Gb/s port is another adapter model, not a port trained down (spaces for tabs, as stored)."""
    read = read_ibstat(str(ALL_ACTIVE_BF3))
    assert len(read.ports) == 9 and not read.problems
    assert {(p.ca_type, p.rate_gbps) for p in read.ports} == {("MT4129", 400.0), ("MT41692", 200.0)}
    _, s, _ = _import(tmp_path, ALL_ACTIVE_BF3)
    assert s["findings"] == []


def test_posted_disabled_front_end_ports_are_info_only(tmp_path):
    _, s, _ = _import(tmp_path, FRONTEND_DISABLED)
    assert _kinds(s) == [("nic-port-down", "info", d) for d in ("mlx5_2", "mlx5_7", "mlx5_8")]
    assert s["verdict"] == "ok"  # Disabled may be deliberate: nothing fails


def test_posted_ibstatus(tmp_path):
    read = read_ibstat(str(IBSTATUS))
    assert read.form == "ibstatus" and len(read.ports) == 9 and not read.problems
    by = {p.name: p for p in read.ports}
    assert (by["mlx5_0:1"].state, by["mlx5_0:1"].phys_state, by["mlx5_0:1"].rate_gbps) == ("Active", "LinkUp", 200.0)
    assert (by["mlx5_8:1"].rate_gbps, by["mlx5_8:1"].link_layer) == (40.0, "Ethernet")
    assert isinstance(by["mlx5_0:1"].ca_type, NotAvailable)  # ibstatus names no adapter model
    _, s, _ = _import(tmp_path, IBSTATUS)
    assert s["findings"] == []  # without a model the 40G Ethernet port has no peers to be below


def test_posted_ibv_devinfo_without_v_and_cut(tmp_path):
    read = read_ibstat(str(DEVINFO))
    assert read.form == "ibv_devinfo" and read.hostname == "node1"
    (p,) = read.ports
    assert (p.name, p.state, p.link_layer, p.ca_type, p.firmware, p.board_id) == (
        "mlx5_0:1", "Active", "InfiniBand", "MT4119", "16.32.1010", "MT_0000000008")
    assert isinstance(p.rate_gbps, NotAvailable) and "without -v" in p.rate_gbps.reason
    assert any(q.startswith("mlx5_1: no port lines") for q in read.problems)
    _, s, _ = _import(tmp_path, DEVINFO)
    assert [f["kind"] for f in s["findings"]] == ["incomplete-data"]


def test_ibv_devinfo_v_rate_is_width_times_speed():
    (p,) = parse_ibstat_lines(enumerate(DEVINFO_V.splitlines(), start=1), "written").ports
    assert (p.state, p.phys_state, p.rate_gbps, p.ca_type) == ("Active", "LinkUp", 200.0, "MT4123")


def test_not_ibstat_text_is_refused(tmp_path):
    p = tmp_path / "x.txt"
    p.write_text("hello\n")
    assert "not ibstat or ibv_devinfo output" in refused("import", "ibstat", str(p), "--out", str(tmp_path / "r"))
