"""ibstat (issue 47, item 13): when every RDMA port the text shows (the node's, or the pod's) is
down, RDMA cannot work there: a warning, whatever each port's own finding says (Disabled alone stays
info, Polling a warning); and a command line asking for one device by name while the text prints
another is said. The two one-adapter outputs are posted (tests/fixtures/README.md); the variants
made here are labelled WRITTEN."""

from __future__ import annotations

import json

from gputopo.importers.ibstat_parse import parse_ibstat_lines
from helpers.cli import gputopo_here
from helpers.paths import FIXTURES

DISABLED_ONLY = FIXTURES / "ibstat" / "gpud-99_mt4125_mlx5_8-down-disabled_only-ca_excerpt.txt"
POLLING_ONLY = FIXTURES / "ibstat" / "gpud-482_cx7_mlx5_10-down-polling_only-ca_excerpt.txt"
SOME_DOWN = FIXTURES / "ibstat" / "gpud-testdata_h100_cx7-400g-roce_mlx5_11-polling_mlx5_5-disabled.txt"


def _findings(tmp_path, path):
    out = tmp_path / "run"
    ran = gputopo_here("import", "ibstat", str(path), "--out", str(out), "--no-history")
    assert ran.returncode == 0, ran.stderr
    return json.loads((out / "summary.json").read_text())["findings"], ran.stdout


def _all_down(findings):
    return [f for f in findings if f["kind"] == "nic-port-down" and f["evidence"].get("all_ports_down")]


def test_posted_only_port_disabled_means_no_rdma_here(tmp_path):
    found, stdout = _findings(tmp_path, DISABLED_ONLY)
    (f,) = _all_down(found)
    assert f["severity"] == "warning" and "mlx5_8" in f["message"] and "RDMA" in f["message"]
    # the port's own finding keeps its severity: Disabled may be deliberate
    assert [x["severity"] for x in found if x["kind"] == "nic-port-down" and x not in _all_down(found)] == ["info"]
    assert "no RDMA port of this node is Active" in stdout


def test_posted_only_port_polling_is_also_said_as_no_rdma(tmp_path):
    found, _ = _findings(tmp_path, POLLING_ONLY)
    assert len(_all_down(found)) == 1


def test_posted_node_with_active_ports_keeps_todays_severities(tmp_path):
    found, _ = _findings(tmp_path, SOME_DOWN)
    assert _all_down(found) == []
    assert sorted(f["severity"] for f in found if f["kind"] == "nic-port-down") == ["info", "warning"]


def test_written_a_device_asked_for_by_name_and_another_printed_is_said():
    text = "$ ibstat mlx5_3\n" + DISABLED_ONLY.read_text()
    read = parse_ibstat_lines(enumerate(text.splitlines(), 1), "written.txt")
    assert any("asked for mlx5_3" in p and "prints mlx5_8" in p for p in read.problems), read.problems
    same = parse_ibstat_lines(enumerate(("# ibv_devinfo -v -d mlx5_8\nhca_id:\tmlx5_8\n\tport:\t1\n"
                                         "\t\tstate:\tPORT_DOWN (1)\n").splitlines(), 1), "written2.txt")
    assert not any("asked for" in p for p in same.problems)
    assert same.asked == [(1, "mlx5_8")]
