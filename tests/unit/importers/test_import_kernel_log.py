"""`gputopo import kernel-log FILE` and `scan --kernel-log FILE`: every real kernel-log form in
tests/fixtures/xid imports with its Xid events on the right bus id, and the report judges them
as it judges a scan's (report/health_checks.py). Bad input: one line, exit 2."""

from __future__ import annotations

import json

import pytest

from gputopo.cli.main import main
from gputopo.importers.kernel_log_import import read_kernel_log_file
from gputopo.importers.run import run_import
from gputopo.probe.xid_lines import FALLEN_TEXT, read_kernel_log_lines
from gputopo.report.analysis import analyze
from gputopo.report.run_folder import load_run
from helpers.cli import refused  # noqa: E402
from helpers.paths import FIXTURES

XID = FIXTURES / "xid"


def _events(name):
    read = read_kernel_log_file(str(XID / name))
    return read, {f"{d:04x}:{b:02x}:{v:02x}": [(e.xid, e.caused_by) for e in evs]
                  for (d, b, v), evs in read.events.items()}


def _findings(tmp_path, name):
    res = run_import("kernel-log", str(XID / name), out_dir=tmp_path / "run", render=False)
    run = load_run(res.run_dir)
    return run, analyze(run).findings


def test_bumblebee_dmesg_xid32_xid31():
    read, ev = _events("bumblebee-677_xid32_xid31.txt")
    assert ev == {"0000:01:00": [(32, None), (32, None), (31, None)]}
    assert read.forms == ["dmesg"] and read.problems == []
    assert read.events[(0, 1, 0)][2].timestamp == "[24128.834365]"
    assert read.events[(0, 1, 0)][2].text.startswith("Ch 00000003, engmask 00000101")


def test_journal_kernel_prefix_caused_by_previous_xid(tmp_path):
    _read, ev = _events("open-gpu-kernel-modules-1150_xid45_after_149_145.txt")
    assert ev == {"0000:dc:00": [(45, 149), (45, 149)], "0000:ed:00": [(45, 145), (45, 145)],
                  "0000:ba:00": [(45, 145), (45, 145)], "0000:97:00": [(45, 145)]}
    run, findings = _findings(tmp_path, "open-gpu-kernel-modules-1150_xid45_after_149_145.txt")
    assert [str(g.pci_bus_id) for g in run.topology.gpus] == [
        "00000000:97:00.0", "00000000:BA:00.0", "00000000:DC:00.0", "00000000:ED:00.0"]
    xids = {f.gpus[0]: f for f in findings if f.kind == "xid"}
    # Xid 45 alone is benign (info); caused by an NVLink Xid it is that fault's warning.
    assert {k: f.severity for k, f in xids.items()} == {0: "warning", 1: "warning", 2: "warning", 3: "warning"}
    assert "caused by previous Xid 149" in xids[2].message and xids[2].evidence["caused_by"] == [149]


def test_dmesg_T_with_gpu_uuids_and_a_cut_last_line(tmp_path):
    read, ev = _events("akash-support-244_dmesg-T_xid43_31_94_excerpt.txt")
    assert ev == {"0000:00:05": [(43, None), (43, None)], "0000:00:07": [(31, None)], "0000:00:08": [(94, None)]}
    assert read.forms == ["dmesg -T"] and read.driver_versions == ["535.183.01"]
    assert read.uuids[(0, 0, 8)] == "GPU-c24840ec-8de1-83d5-b126-08000173ae32"
    assert read.events[(0, 0, 5)][0].timestamp == "[Wed Jul 31 23:14:18 2024]"
    assert len(read.problems) == 1 and read.problems[0].startswith("line 13: an Xid line that could not be read")
    run, findings = _findings(tmp_path, "akash-support-244_dmesg-T_xid43_31_94_excerpt.txt")
    by_kind = {(f.kind, f.severity) for f in findings}
    # Xid 94 on the third GPU: contained, the GPU keeps working until a reset "when convenient"
    # (NVIDIA's Xid catalog): a warning, not an error.
    assert ("xid", "warning") in by_kind and ("xid", "error") not in by_kind
    assert next(f for f in findings if f.kind == "xid" and f.severity == "warning").gpus == [2]
    incomplete = [f for f in findings if f.kind == "incomplete-data"]
    assert len(incomplete) == 1 and "line 13" in incomplete[0].message
    assert str(run.topology.gpus[2].uuid) == "GPU-c24840ec-8de1-83d5-b126-08000173ae32"


def test_kmsg_without_stamps_other_pci_domains():
    read, ev = _events("gpud-1174_kmsg_xid149_145_94_no-stamp.txt")
    assert ev == {"0019:01:00": [(149, None)], "0000:00:00": [(149, None)], "0018:01:00": [(145, None)],
                  "0000:9b:00": [(94, None)]}
    assert read.forms == []


def test_gsp_xid62_and_154(tmp_path):
    _, ev = _events("nvidia-forum-371272_rtx5080_xid62_154.txt")
    assert ev == {"0000:01:00": [(62, None), (154, None)]}
    _, findings = _findings(tmp_path, "nvidia-forum-371272_rtx5080_xid62_154.txt")
    # Xid 154 "GPU Reset Required": the GPU cannot be used until it is reset (an error, issue 37).
    assert sorted((f.evidence["xid"], f.severity) for f in findings if f.kind == "xid") == [(62, "error"), (154, "error")]


def test_fallen_off_the_bus_on_three_lines_without_xid(tmp_path):
    read, ev = _events("nvsentinel-155_fallen-off-bus_no-xid_570.txt")
    assert ev == {"0000:b3:00": [(79, None)]}
    event = read.events[(0, 0xb3, 0)][0]
    assert event.text.startswith(FALLEN_TEXT) and "10de:26b5" in event.text and event.timestamp == "[ 1843.308145]"
    assert read.driver_versions == ["570.158.01"]
    run, findings = _findings(tmp_path, "nvsentinel-155_fallen-off-bus_no-xid_570.txt")
    assert run.topology.host.driver_version == "570.158.01"
    # ... and its "The NVIDIA probe routine failed for 1 device(s)" line is said (it names no GPU)
    assert [(f.kind, f.severity, f.gpus) for f in findings] == [("xid", "error", [0]), ("driver-error", "warning", None)]


@pytest.mark.parametrize("lines, expected", [
    # journalctl -k: every continuation line has its own prefix
    (["Feb 14 05:03:41 gpu-1 kernel: NVRM: The NVIDIA GPU 0000:44:00.0",
      "Feb 14 05:03:41 gpu-1 kernel: NVRM: (PCI ID: 10de:2330) installed in this system has",
      "Feb 14 05:03:41 gpu-1 kernel: NVRM: fallen off the bus and is not responding to commands."],
     {(0, 0x44, 0): [79]}),
    # the same fault with its Xid 79 line too: counted once
    (["[ 10.0] NVRM: Xid (PCI:0000:44:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
      "[ 10.1] NVRM: GPU 0000:44:00.0: GPU has fallen off the bus."], {(0, 0x44, 0): [79]}),
    # 2013 drivers: no "PCI:"
    (["[ 99.1] NVRM: Xid (0000:01:00): 13, 0001 00000000 0000a097 00001b0c 00000000 00000000"], {(0, 1, 0): [13]}),
    # syslog, ISO journal, dmesg --time-format iso, short-monotonic
    (["Jan  3 10:00:00 node7 kernel: [ 55.5] NVRM: Xid (PCI:0000:3b:00): 48, An uncorrectable double bit error",
      "2024-01-03T10:00:01+0000 node7 kernel: NVRM: Xid (PCI:0000:3b:00): 63, Row Remapper: New row marked",
      "2024-01-03T10:00:02,123456+00:00 NVRM: Xid (PCI:0000:3b:00): 64, Row Remapper: Failed to remap a row",
      "[ 1234.567890] node7 kernel: NVRM: Xid (PCI:0000:3b:00): 74, NVLink: fatal error detected on link 4"],
     {(0, 0x3b, 0): [48, 63, 64, 74]}),
    # launcher prefixes and colours
    (["[1,0]<stdout>:\x1b[31m[ 1.0] NVRM: Xid (PCI:0000:5e:00): 95, Uncontained: FBHUB\x1b[0m",
      "3: [ 2.0] NVRM: Xid (PCI:0000:5e:00): 119, Timeout after 6s of waiting for RPC response"],
     {(0, 0x5e, 0): [95, 119]}),
])
def test_forms(lines, expected):
    read = read_kernel_log_lines(lines)
    assert {k: [e.xid for e in v] for k, v in read.events.items()} == expected
    assert read.problems == []


def test_scan_reader_keeps_its_api():
    assert list(read_kernel_log_lines(["[ 1.0] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n"]).events) \
        == [(0, 0x3b, 0)]


def test_cli_import_prints_verdict_and_writes_run(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["import", "kernel-log", str(XID / "nvsentinel-155_fallen-off-bus_no-xid_570.txt"),
              "--out", str(tmp_path / "r")])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "verdict: broken" in out and "Xid 79" in out
    doc = json.loads((tmp_path / "r" / "imported.json").read_text())["imports"][0]
    assert doc["gpus"] == ["0000:b3:00"] and doc["xid_events"] == 1 and doc["problems"] == []


def test_scan_with_saved_kernel_log_on_a_sim(tmp_path, capsys):
    log = tmp_path / "kern.log"
    log.write_text("[ 5.0] NVRM: Xid (PCI:0000:1c:00): 48, An uncorrectable double bit error (DBE)\n")
    with pytest.raises(SystemExit) as e:
        main(["scan", "--sim", "pcie-4gpu", "--kernel-log", str(log), "--json"])
    assert e.value.code == 0
    doc = json.loads(capsys.readouterr().out)
    xids = {g["nvml_index"]: [e["xid"] for e in g["health"]["xid_events"]] for g in doc["gpus"]}
    assert xids == {0: [], 1: [48], 2: [], 3: []}
    assert doc["host"]["kernel_log"] == f"saved kernel log {log}"
    log.write_text(log.read_text() + "[ 6.0] NVRM: Xid (PCI:0000:1c\n")
    with pytest.raises(SystemExit):
        main(["scan", "--sim", "pcie-4gpu", "--kernel-log", str(log), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["host"]["kernel_log"] == f"saved kernel log {log}"  # the line is a finding, as import makes it
    unread = [f for f in doc["problems"] if f["kind"] == "incomplete-data"]
    assert [f["severity"] for f in unread] == ["info"]  # data trouble is coverage, not a fault (as on import)
    assert "line 2: an Xid line that could not be read" in unread[0]["message"]


@pytest.mark.parametrize("content, words", [
    (b"", "empty file"),
    (b"\x7fELF\x02\x01\x01\x00\x00\x00", "binary"),
    (b"#  size  count  type  redop  root  time  algbw  busbw\n  8  2  float  sum  -1  5.1  0.00  0.00\n",
     "not a kernel log"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, content, words):
    f = tmp_path / "in.log"
    f.write_bytes(content)
    assert words in refused("import", "kernel-log", f, "--out", tmp_path / "r")
    assert words in refused("scan", "--sim", "pcie-4gpu", "--kernel-log", f)


def test_huge_log_is_streamed(tmp_path):
    """A long log of other kernel lines is read line by line (the reader keeps events, not lines)."""
    f = tmp_path / "big.log"
    line = "[ 12.345678] eth0: link up, 100 Gbps, full duplex " + "x" * 60 + "\n"
    with open(f, "w") as out:
        out.writelines(line * 5000 for _ in range(20))
        out.write("[ 99.0] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n")
    read = read_kernel_log_file(str(f))
    assert read.lines == 100001 and [e.xid for e in read.events[(0, 0x3b, 0)]] == [79]


def test_stdin_as_a_user_pipes_it(tmp_path):
    from helpers.cli import gputopo_here

    log = (XID / "bumblebee-677_xid32_xid31.txt").read_bytes()
    proc = gputopo_here("import", "kernel-log", "-", "--out", tmp_path / "r", input=log)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "r" / "imported.json").read_text())["imports"][0]
    assert doc["file"] == "<stdin>" and doc["xid_events"] == 3 and doc["gpus"] == ["0000:01:00"]


def test_nvrm_lines_that_only_mention_an_xid_are_no_problem():
    read = read_kernel_log_lines(["[ 1.0] NVRM: GPU0 kgspHealthCheck: handling Xid 62 recovery",
                                  "[ 2.0] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32"])
    assert read.events == {} and read.problems == [] and read.kernel_lines == 2


def test_a_log_of_several_hosts_needs_host(tmp_path):
    """An aggregated syslog: the same bus id on two machines must not become one GPU."""
    f = tmp_path / "cluster.log"
    f.write_text("Jan  3 10:00:00 node1 kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n"
                 "Jan  3 10:00:05 node2 kernel: NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception\n")
    err = refused("import", "kernel-log", f, "--out", tmp_path / "r")
    assert "lines of 2 hosts (node1, node2)" in err and "--host NAME" in err
    res = run_import("kernel-log", str(f), out_dir=tmp_path / "r2", render=False, host="node2")
    run = load_run(res.run_dir)
    assert [e.xid for e in run.topology.gpus[0].health.xid_events] == [13] and run.topology.host.hostname == "node2"
    assert "no line of host 'node9'" in refused("import", "kernel-log", f, "--host", "node9",
                                                  "--out", tmp_path / "r3")


def test_scan_refuses_a_log_of_several_hosts(tmp_path):
    f = tmp_path / "cluster.log"
    f.write_text("Jan  3 10:00:00 node1 kernel: NVRM: Xid (PCI:0000:1c:00): 79, GPU has fallen off the bus.\n"
                 "Jan  3 10:00:05 node2 kernel: NVRM: Xid (PCI:0000:1c:00): 13, Graphics Exception\n")
    assert "lines of 2 hosts (node1, node2)" in refused("scan", "--sim", "pcie-4gpu", "--kernel-log", f)
