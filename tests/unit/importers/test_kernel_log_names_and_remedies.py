"""`gputopo import kernel-log`: a GPU is named the way the operator finds the card, and each Xid
gets the remedies NVIDIA's Xid catalog gives for it (issue 37, section 4).

- A kernel log numbers nothing: a GPU it names is "GPU at 0000:a1:00.0" (and "on HOST" where the
  log names the host) in every person-facing line: the terminal, report.md, report.html and the
  findings' messages; the tables' GPUs column shows the bus id. With --topo the GPU keeps the
  machine's own NVML index, said with its bus id. JSON keeps ``gpus`` and adds ``bus_id``.
- Xid 154 says what the GPU needs now: "GPU Reset Required" / "Node Reboot Required" is an error
  (the GPU cannot be used until it is done).
- Xid 119 (GSP RPC timeout), an Optimus laptop's Xids: the catalog's remedies in its order, never
  "replace the GPU (RMA)".
- "caused by previous Xid 45" is never said of Xid 45 itself.

Files under tests/fixtures/xid are posted outputs (tests/fixtures/README.md gives each source);
logs written inline here are labelled "written": variants made for these tests, not posted.
"""

from __future__ import annotations

import json
import re

from gputopo.importers.run import run_import
from gputopo.report.analysis import analyze
from gputopo.report.run_folder import load_run
from helpers.cli import gputopo_here
from helpers.paths import FIXTURES

XID = FIXTURES / "xid"
A1 = XID / "akash-support-209_dmesg-T_grep-NVRM_xid79_a1.txt"  # posted: the failed GPU sits at a1:00.0
GPU_NUMBER = re.compile(r"\bGPUs? \d")  # "GPU 0", "GPUs 0,1": a number the machine does not know


def _findings(tmp_path, log, **kw):
    res = run_import("kernel-log", str(log), out_dir=tmp_path / "run", render=False, **kw)
    return analyze(load_run(res.run_dir)).findings


def _xid(findings, code):
    return next(f for f in findings if f.kind == "xid" and f.evidence["xid"] == code)


def _buckets(remedies):
    """The catalog bucket each remedy cites ("RESET_GPU", ...), in order."""
    return [m.group(1) for r in remedies for m in [re.search(r"NVIDIA's Xid catalog: (Xid 154 '[^']+'|[A-Z0-9_/]+)", r)] if m]


def test_xid79_on_a1_is_named_by_its_bus_id_in_every_output(tmp_path):
    """Posted: the log's only GPU is at a1:00.0; "GPU 0" would send the operator to the healthy
    card nvidia-smi calls GPU 0 (at 01:00.0 on that node)."""
    proc = gputopo_here("import", "kernel-log", A1, "--out", tmp_path / "r", "--no-history", env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    assert "PROBLEM GPU at 0000:a1:00.0: Xid 79 in the kernel log" in proc.stdout
    md = (tmp_path / "r" / "report.md").read_text()
    html = (tmp_path / "r" / "report.html").read_text()
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    messages = " ".join(f["message"] for f in summary["findings"])
    for where, text in (("terminal", proc.stdout), ("report.md", md), ("report.html", html), ("messages", messages)):
        assert "0000:a1:00.0" in text, where
        assert not GPU_NUMBER.search(text), (where, GPU_NUMBER.search(text))
    assert "| 0000:a1:00.0 |" in md  # the findings table's GPUs column
    (f,) = summary["findings"]
    assert f["gpus"] == [0] and f["evidence"]["bus_id"] == "0000:a1:00.0"  # JSON keeps its fields, adds the bus id
    # NVIDIA's catalog for Xid 79: reboot the node, then contact support; no RMA of its own.
    assert _buckets(f["remedies"]) == ["RESTART_BM", "CONTACT_SUPPORT"]
    assert not any("RMA" in r for r in f["remedies"])


def test_a_host_picked_from_a_log_of_several_is_named(tmp_path):
    """Written: an aggregated syslog of two nodes whose GPUs share the bus id 3b:00."""
    log = tmp_path / "cluster.log"
    log.write_text("Jan  3 10:00:00 node1 kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n"
                   "Jan  3 10:00:05 node2 kernel: NVRM: Xid (PCI:0000:3b:00): 48, An uncorrectable double bit "
                   "error (DBE) has been detected on GPU in the framebuffer\n")
    f = _xid(_findings(tmp_path, log, host="node2"), 48)
    assert f.message.startswith("GPU at 0000:3b:00.0 on node2: Xid 48")
    assert f.evidence["host"] == "node2" and f.evidence["place"] == "0000:3b:00.0 on node2"
    proc = gputopo_here("import", "kernel-log", log, "--host", "node2", "--out", tmp_path / "r2", "--no-history",
                        env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    assert "GPU at 0000:3b:00.0 on node2" in proc.stdout and not GPU_NUMBER.search(proc.stdout)


def test_with_topo_the_gpu_keeps_its_nvml_index_and_says_its_bus_id(tmp_path):
    """Written: an Xid 48 at 1c:00, put on the simulated pcie-4gpu machine, whose GPU 1 sits there."""
    scan = gputopo_here("scan", "--sim", "pcie-4gpu", "--json", "--no-history")
    assert scan.returncode == 0, scan.stderr
    topo = tmp_path / "scan.json"
    topo.write_text(scan.stdout)
    log = tmp_path / "kern.log"
    log.write_text("[ 5.0] NVRM: Xid (PCI:0000:1c:00): 48, An uncorrectable double bit error (DBE)\n")
    proc = gputopo_here("import", "kernel-log", log, "--topo", topo, "--out", tmp_path / "r", "--no-history",
                        env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    assert "PROBLEM GPU 1 (0000:1c:00.0): Xid 48 in the kernel log" in proc.stdout
    (f,) = [f for f in json.loads((tmp_path / "r" / "summary.json").read_text())["findings"] if f["kind"] == "xid"]
    assert f["gpus"] == [1] and f["evidence"]["bus_id"] == "0000:1c:00.0" and "place" not in f["evidence"]


def test_xid154_gpu_reset_required_is_an_error_said_first(tmp_path):
    """Posted (RTX 5080): Xid 62 (the GPU's PMU halted), then Xid 154 'GPU Reset Required'. The
    62 is the fault, the 154 what the GPU needs before any further use: both errors, and the
    GPU's story leads with the 154 naming the 62."""
    found = _findings(tmp_path, XID / "nvidia-forum-371272_rtx5080_xid62_154.txt")
    assert sorted((f.evidence["xid"], f.severity) for f in found if f.kind == "xid") == [(62, "error"), (154, "error")]
    f154 = _xid(found, 154)
    assert f154.evidence["recovery_action"] == "GPU Reset Required" and f154.evidence["after_xids"] == [62]
    assert f154.message.startswith("GPU at 0000:01:00.0: Xid 154 in the kernel log: the driver says the GPU needs "
                                   "'GPU Reset Required' (after Xid 62: internal micro-controller halt")
    assert "cannot be used until that is done" in f154.message
    assert _buckets(f154.remedies) == ["Xid 154 'GPU Reset Required'", "CONTACT_SUPPORT"]
    assert "nvidia-smi -r -i 00000000:01:00.0" in f154.remedies[0]
    assert _buckets(_xid(found, 62).remedies) == ["RESET_GPU", "CONTACT_SUPPORT"]
    proc = gputopo_here("import", "kernel-log", XID / "nvidia-forum-371272_rtx5080_xid62_154.txt",
                        "--out", tmp_path / "r", "--no-history", env={"COLUMNS": "200"})
    assert proc.stdout.splitlines()[1].startswith("PROBLEM GPU at 0000:01:00.0: Xid 154"), proc.stdout


def test_xid154_by_the_action_it_names(tmp_path):
    """Written: the five recovery actions NVIDIA's Xid catalog lists; the last 154 is the GPU's state."""
    def one(*actions):
        log = tmp_path / f"{len(list(tmp_path.iterdir()))}.log"
        log.write_text("".join(f"[ {k}.0] NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from "
                               f"0x0 (None) to 0x{k} ({a})\n" for k, a in enumerate(actions, start=1)))
        res = run_import("kernel-log", str(log), out_dir=tmp_path / f"run-{log.stem}", render=False)
        return _xid(analyze(load_run(res.run_dir)).findings, 154)
    assert one("Node Reboot Required").severity == "error"
    assert "reboot the node before any further use" in one("Node Reboot Required").remedies[0]
    assert one("Drain and Reset").severity == "warning"
    assert one("Drain P2P").severity == "warning"
    recovered = one("GPU Reset Required", "None")  # reset done: nothing pending any more
    assert recovered.severity == "info" and "no recovery is pending" in recovered.message
    unknown = one("Something New")
    assert unknown.severity == "warning" and "'Something New'" in unknown.message


def test_xid119_gsp_timeout_gets_the_catalogs_remedies_not_rma(tmp_path):
    """Written, in the words open-gpu-kernel-modules prints (kernel_gsp.c, _kgspLogXid119)."""
    log = tmp_path / "gsp.log"
    log.write_text("[ 812.5] NVRM: Xid (PCI:0000:d8:00): 119, pid=2210, name=python3, Timeout after 6s of waiting "
                   "for RPC response from GPU7 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20800a4c 0x4).\n")
    f = _xid(_findings(tmp_path, log), 119)
    assert f.severity == "error" and f.message.startswith("GPU at 0000:d8:00.0: Xid 119")
    # NVIDIA's Xid catalog, Xid 119: immediate RESET_GPU, investigatory INVESTIGATE_SW.
    assert _buckets(f.remedies) == ["RESET_GPU", "INVESTIGATE_SW"]
    assert f.evidence["catalog_actions"] == ["RESET_GPU", "INVESTIGATE_SW"]
    assert not any("RMA" in r or "replace it" in r for r in f.remedies)


def test_optimus_laptop_xids_get_the_catalogs_remedies(tmp_path):
    """Posted (Bumblebee issue 677, an Acer laptop's Optimus GT 540M): Xid 32 and 31. Both are
    a program's or the driver's (info); their remedies are the catalog's, in its order."""
    found = _findings(tmp_path, XID / "bumblebee-677_xid32_xid31.txt")
    assert sorted((f.evidence["xid"], f.severity) for f in found) == [(31, "info"), (32, "info")]
    assert _buckets(_xid(found, 32).remedies) == ["RESTART_APP", "CHECK_APP/CUDA"]
    assert _buckets(_xid(found, 31).remedies) == ["RESTART_APP", "WORKFLOW_XID_31"]
    assert "not in gputopo's table" not in _xid(found, 32).message
    assert not any("RMA" in r for f in found for r in f.remedies)


def test_xid79_on_a_laptop_is_no_rma_either(tmp_path):
    """Written: a laptop's dGPU that fell off the bus (bbswitch powers it off and on)."""
    log = tmp_path / "laptop.log"
    log.write_text("[    3.1] bbswitch: Found discrete VGA device 0000:01:00.0: \\_SB_.PCI0.PEG0.PEGP\n"
                   "[ 5000.2] NVRM: Xid (PCI:0000:01:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off "
                   "the bus.\n")
    f = _xid(_findings(tmp_path, log), 79)
    assert _buckets(f.remedies) == ["RESTART_BM", "CONTACT_SUPPORT"]
    assert not any("RMA" in r or "out of service" in r for r in f.remedies)


def test_xid45_is_never_said_to_be_caused_by_itself(tmp_path):
    """Written: a second round of channel cleanups the driver attributes to the first (Xid 45
    "caused by previous Xid 45") after an NVLink Xid 145 on the same GPU."""
    log = tmp_path / "k.log"
    log.write_text("kernel: NVRM: Xid (PCI:0000:dc:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2)\n"
                   "kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1, name=python3, Ch 00000001 caused by previous Xid 145\n"
                   "kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1, name=python3, Ch 00000002 caused by previous Xid 45\n"
                   "kernel: NVRM: Xid (PCI:0000:ed:00): 45, pid=2, name=python3, Ch 00000003 caused by previous Xid 45\n")
    found = _findings(tmp_path, log)
    x45 = [f for f in found if f.kind == "xid" and f.evidence["xid"] == 45]
    assert len(x45) == 2
    for f in x45:
        assert "caused by previous Xid 45" not in f.message and 45 not in f.evidence.get("caused_by", [])
    on_dc = next(f for f in x45 if f.evidence["bus_id"] == "0000:dc:00.0")
    assert on_dc.severity == "warning" and on_dc.evidence["caused_by"] == [145]  # still judged as the 145
    on_ed = next(f for f in x45 if f.evidence["bus_id"] == "0000:ed:00.0")
    assert on_ed.severity == "info" and "caused by" not in on_ed.message  # a cleanup of nothing else named


def test_posted_xid45_after_nvlink_xids_still_names_its_cause(tmp_path):
    found = _findings(tmp_path, XID / "open-gpu-kernel-modules-1150_xid45_after_149_145.txt")
    on_dc = next(f for f in found if f.evidence.get("bus_id") == "0000:dc:00.0")
    assert on_dc.severity == "warning" and "caused by previous Xid 149" in on_dc.message
    assert not any("caused by previous Xid 45" in f.message for f in found)


def test_no_posted_xid_log_is_told_rma_or_named_by_a_log_number(tmp_path):
    """Every posted kernel log: messages name bus ids, never the log's numbering."""
    for k, log in enumerate(sorted(XID.glob("*.txt"))):
        found = _findings(tmp_path / str(k), log)
        for f in found:
            if f.kind != "xid":
                continue
            assert f.message.startswith("GPU at 0000:") or f.message.startswith("GPU at 00"), (log.name, f.message)
            assert not GPU_NUMBER.search(f.message), (log.name, f.message)
            assert not any("RMA" in r for r in f.remedies), (log.name, f.remedies)
