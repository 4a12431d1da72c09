"""NVSwitch SXids judged by their meaning in NVIDIA's Fabric Manager user guide (issue 47, item
12; gputopo/model/sxid.py), not by the Fatal / Non-fatal word of the line alone. The 12028, 20034
and 22013 lines are posted (tests/fixtures/README.md gives their sources); the logs written inline
are labelled "written"."""

from __future__ import annotations

from gputopo.importers.run import run_import
from gputopo.report.analysis import analyze
from gputopo.report.kernel_log_findings import KERNEL_LOG_NOTE, kernel_log_notes
from gputopo.report.run_folder import load_run
from helpers.paths import FIXTURES

XID = FIXTURES / "xid"


def _judge(tmp_path, log):
    res = run_import("kernel-log", str(log), out_dir=tmp_path / "run", render=False)
    run = load_run(res.run_dir)
    found = [f for f in analyze(run).findings if f.kind == "driver-error"]
    return found, [n for n in kernel_log_notes(run) if n.startswith(KERNEL_LOG_NOTE)]


def test_posted_non_fatal_12028_stalls_nvlink_traffic_so_it_is_an_error_naming_the_switch(tmp_path):
    found, notes = _judge(tmp_path, XID / "imbue-cluster-health_dmesg_nvswitch-sxid-12028-nonfatal_one-line.txt")
    (f,) = found
    assert f.severity == "error" and f.evidence["sxid_effect"] == "stalls"
    assert "nvidia-nvswitch2" in f.message and "0000:85:00.0" in f.message
    assert "egress non-posted PRIV error" in f.message and "stalls" in f.message
    assert "nvswitch-audit" in f.remedies[0]
    assert not any("SXid" in n for n in notes)


def test_posted_fatal_20034_says_its_meaning(tmp_path):
    found, _ = _judge(tmp_path, XID / "redhat-6619941_dmesg_nvswitch-sxid-20034-fatal-ltssm_one-line.txt")
    (f,) = found
    assert f.severity == "error" and "20034 (LTSSM fault up: fatal to the NVSwitch port's traffic" in f.message
    assert "reboot the node" in f.remedies[0]


def test_posted_non_fatal_22013_is_a_note_with_its_meaning(tmp_path):
    found, notes = _judge(tmp_path, XID / "nvtrust-124_h100-ppcie_dmesg_nvswitch-sxid-22013-nonfatal_excerpt.txt")
    assert found == []
    assert any("non-fatal SXid 22013 (2 times" in n and "safely ignored" in n for n in notes), notes


def test_written_unknown_code_is_said_as_unknown_and_an_always_fatal_one_asks_for_a_host_restart(tmp_path):
    log = tmp_path / "k.log"
    log.write_text("[ 5.0] nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 99999, Non-fatal, Link 3 something new\n"
                   "[ 6.0] nvidia-nvswitch3: SXid (PCI:0000:07:00.0): 22003, Fatal, Link 4 Minion halt\n")
    found, notes = _judge(tmp_path, log)
    (f,) = found
    assert "0000:07:00.0" in f.message and "Minion halt" in f.message and "restart the host" in f.remedies[0]
    assert any("99999" in n and "meaning is unknown" in n for n in notes), notes
