"""`gputopo import kernel-log` says every fact it reads and never passes a partial paste as whole.

- A line that is only '...' / '…' / '[...]' (lines left out where the log was pasted) is an
  ``incomplete-data`` problem, worded as the other importers word their '...' lines
  (text_input.elision_problem): what was cut may hold an Xid; so is a last line cut inside its
  "NVRM:".
- NVIDIA driver lines that are no Xid are judged (report/kernel_log_findings.py): RmInitAdapter
  failed, a fatal NVSwitch SXid, NV_ERR_RESET_REQUIRED (``driver-error`` errors), the probe routine
  failing (warning), nvidia_peermem failing to load (``gpudirect-rdma`` warning), nvidia-peermem's
  harmless 'invalid context' diagnostic (info); the crash dump notice and non-fatal SXids are
  notes; every other NVIDIA driver line is counted and said in a note.

Posted fixtures: tests/fixtures/README.md gives their sources; logs written inline here are labelled
"written": variants made for these tests, not posted.
"""

from __future__ import annotations

import pytest

from gputopo.importers.run import run_import
from gputopo.probe.xid_lines import read_kernel_log_lines
from gputopo.report.analysis import analyze
from gputopo.report.kernel_log_findings import KERNEL_LOG_NOTE
from gputopo.report.run_folder import load_run
from gputopo.text_input import elision_problem
from helpers.paths import FIXTURES

XID = FIXTURES / "xid"
ROBIN = XID / "open-gpu-kernel-modules-1010_rtx5070ti_journal-localized-april_xid79_rc-critical-79_excerpt.txt"


def _analysis(tmp_path, log):
    res = run_import("kernel-log", str(log), out_dir=tmp_path / "run", render=False)
    return analyze(load_run(res.run_dir))


def test_the_posted_journal_excerpt_with_dots_is_incomplete_data(tmp_path):
    """Posted: the reporter cut the journal with a '...' line (line 12): the lines left out are not
    read, so the import says so (as coverage: info, never a fault; issue 46) and is no clean read."""
    found = [f for f in _analysis(tmp_path, ROBIN).findings if f.kind == "incomplete-data"]
    assert any("line 12: '...': the output was cut here when it was posted" in f.message for f in found), \
        [f.message for f in found]
    assert all(f.severity == "info" for f in found)


@pytest.mark.parametrize("mark", ["...", "\u2026", "[...]", "[\u2026]", "> ..."])
def test_every_elision_mark_is_said(mark):
    """Written: a dmesg paste with the middle left out, each way people mark it."""
    read = read_kernel_log_lines(["[ 10.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.",
                                  mark, "[ 99.0] NVRM: GPU at PCI:0000:3b:00: GPU-1234abcd-0000-0000-0000-000000000000"])
    assert len(read.problems) == 1 and read.problems[0].startswith("line 2: '")
    assert "cut here when it was posted" in read.problems[0]


def test_dots_inside_a_line_are_no_elision():
    read = read_kernel_log_lines(["[ 1.0] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.161.07 ...",
                                  "[ 2.0] usb 1-1: new device ..."])
    assert read.problems == []


def test_the_wording_is_the_one_the_other_importers_use():
    assert elision_problem("  ...  ", 7) == "line 7: '...': the output was cut here when it was posted"
    assert elision_problem("[...]", 3, "what it left out").endswith("posted; what it left out")
    assert elision_problem("nothing cut", 1) is None


def test_the_posted_journal_excerpt_cut_inside_its_last_line_says_so(tmp_path):
    """Posted: the excerpt's last line stops at 'kernel: N' (the paste was cut inside 'NVRM:')."""
    found = [f.message for f in _analysis(tmp_path, ROBIN).findings if f.kind == "incomplete-data"]
    assert any("line 15: the log ends mid-line ('kernel: N')" in m for m in found), found


def _driver(tmp_path, log):
    a = _analysis(tmp_path, log)
    return [f for f in a.findings if f.kind in ("driver-error", "gpudirect-rdma")], a.notes


def test_rminitadapter_failed_is_a_gpu_the_driver_could_not_bring_up(tmp_path):
    """Posted (RTX 3090, open-gpu-kernel-modules 789): no Xid at all, and before this change the
    import said 'No findings' for a GPU that never came up. Its other NVRM lines (GSP firmware, GFW
    boot) are counted and said."""
    found, notes = _driver(tmp_path, XID / "open-gpu-kernel-modules-789_rtx3090_dmesg_rminitadapter-failed_gsp_gfw-boot_excerpt.txt")
    (f,) = found
    assert (f.kind, f.severity, f.evidence["bus_id"]) == ("driver-error", "error", "0000:98:00.0")
    assert "could not initialise the GPU at 0000:98:00.0" in f.message and "0x62:0x65:1792" in f.message
    assert any("3 other NVIDIA driver line(s)" in n and "Cannot initialize GSP firmware RM" in n for n in notes)


def test_nvidia_peermem_not_loading_turns_gpudirect_rdma_off(tmp_path):
    """Posted (GB300, gpu-operator 2868): nvidia_peermem's symbols do not match the running
    InfiniBand stack, so it never loads: a warning for multi-node NCCL, with how to fix it."""
    found, _ = _driver(tmp_path, XID / "gpu-operator-2868_gb300_dmesg-T_nvidia-peermem-unknown-symbol.txt")
    (f,) = found
    assert (f.kind, f.severity, f.evidence["count"]) == ("gpudirect-rdma", "warning", 8)
    assert f.evidence["symbols"] == ["ib_register_peer_memory_client", "ib_unregister_peer_memory_client"]
    assert any("DMA-BUF" in r for r in f.remedies) and any("modprobe nvidia_peermem" in r for r in f.remedies)


def test_the_invalid_context_diagnostic_is_said_harmless_on_old_drivers_and_a_warning_on_r560(tmp_path):
    """Posted (gpud README): NVIDIA's maintainer calls it harmless before R560 (nv_peer_memory
    issue 120); written: the same line under a 560 driver, where it 'should never appear'."""
    found, _ = _driver(tmp_path, XID / "gpud-readme_dmesg-ctime_xid13-x3_xid109_peermem_markdown-quote.txt")
    (f,) = found
    assert (f.kind, f.severity) == ("gpudirect-rdma", "info") and "harmless" in f.message
    log = tmp_path / "k.log"
    log.write_text("[ 1.0] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.124.06  Wed Feb 26 2025\n"
                   "[ 9.0] nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, skipping "
                   "further processing\n")
    found, _ = _driver(tmp_path / "b", log)
    assert [x.severity for x in found] == ["warning"] and "should never appear" in found[0].message


def test_reset_required_without_a_gpu_named_is_an_error_of_the_machine(tmp_path):
    """Posted (sichek 51): the only driver line is NV_ERR_RESET_REQUIRED; it names no GPU."""
    found, notes = _driver(tmp_path, XID / "sichek-51_dmesg-T_nv-err-reset-required_excerpt.txt")
    (f,) = found
    assert (f.kind, f.severity, f.gpus) == ("driver-error", "error", None)
    assert any("1 other NVIDIA driver line(s)" in n and "GspRmAlloc failed" in n for n in notes)


def test_a_non_fatal_sxid_is_a_note_and_the_nvswitch_probe_lines_are_counted(tmp_path):
    """Posted (nvtrust 124): SXid 22013 Non-fatal on two links; its Severity and Data lines are
    read with it, not counted as other lines."""
    found, notes = _driver(tmp_path, XID / "nvtrust-124_h100-ppcie_dmesg_nvswitch-sxid-22013-nonfatal_excerpt.txt")
    assert found == []
    assert any(n.startswith(KERNEL_LOG_NOTE) and "non-fatal SXid 22013 (2 times" in n for n in notes), notes
    assert any("4 other NVIDIA driver line(s)" in n for n in notes), notes


def test_a_fatal_sxid_is_an_error(tmp_path):
    """Written, in the form of the posted non-fatal lines (the Fabric Manager guide's SXid 12028)."""
    log = tmp_path / "k.log"
    log.write_text("[ 5.0] nvidia-nvswitch2: SXid (PCI:0000:15:00.0): 12028, Fatal, Link 32 egress non-posted PRIV "
                   "error (First)\n[ 5.1] nvidia-nvswitch2: SXid (PCI:0000:15:00.0): 12028, Severity 1 Engine "
                   "instance 32 Sub-engine instance 00\n")
    found, _ = _driver(tmp_path, log)
    (f,) = found
    assert (f.kind, f.severity, f.evidence["sxids"]) == ("driver-error", "error", ["12028"])
    assert "0000:15:00.0" in f.message and f.evidence["count"] == 1


def test_the_probe_routine_failing_after_a_fall_off_the_bus_is_said(tmp_path):
    """Posted (NVSentinel 155): 'The NVIDIA probe routine failed for 1 device(s)' after the GPU
    fell off the bus: a warning of the machine (the line does not name the GPU)."""
    found, _ = _driver(tmp_path, XID / "nvsentinel-155_fallen-off-bus_no-xid_570.txt")
    (f,) = found
    assert (f.kind, f.severity, f.evidence["n"]) == ("driver-error", "warning", "1")


def test_the_crash_dump_notice_is_a_note_and_its_lines_are_not_counted_again(tmp_path):
    """Posted (akash 209): the crash dump notice spans three NVRM lines."""
    _, notes = _driver(tmp_path, XID / "akash-support-209_dmesg-T_grep-NVRM_xid79_a1.txt")
    assert any("GPU crash dump" in n and "nvidia-bug-report.sh" in n for n in notes)
    assert not any("other NVIDIA driver line" in n for n in notes), notes


def test_every_nvidia_line_is_judged_or_counted():
    """Written: one line of each kind, and two no rule judges."""
    read = read_kernel_log_lines([
        "[ 1.0] NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x22:0x56:894)",
        "[ 1.1] NVRM: GPU 0000:3b:00.0: rm_init_adapter failed, device minor number 0",
        "[ 1.2] NVRM: osInitNvMapping: *** Cannot attach gpu",
        "[ 2.0] nvidia_uvm: module uses symbols nvUvmInterfaceDisableAccessCntr from proprietary module nvidia",
        "[ 3.0] usb 1-1: new high-speed USB device",
        "[ 4.0] nvidia 0000:3b:00.0: enabling device (0000 -> 0003)",
        "[ 4.1] nvidia-nvlink: Nvlink Core is being initialized, major device number 234",
        "[ 4.2] systemd[1]: Started nvidia-persistenced.service - NVIDIA Persistence Daemon.",
    ])
    assert [(e["kind"], e["count"]) for e in read.driver_lines.values()] == [("rm-init-failed", 1)]
    # the module's symbols, the device enabled and NVLink core start are every boot's lines:
    # counted as routine, not quoted among the lines no rule judges
    assert read.other_nvidia_lines == 1 and [n for n, _ in read.other_examples] == [3]
    assert read.routine_nvidia_lines == 3


def test_a_healthy_boot_s_driver_lines_are_counted_not_quoted():
    """Written, as a healthy boot prints them (the sim's fake host writes the same): no note
    quotes them as lines no rule judges; the count is kept in the document."""
    from gputopo.probe.xid_lines import kernel_log_document
    from gputopo.report.kernel_log_findings import driver_line_notes

    read = read_kernel_log_lines([
        "[    1.0] nvidia: loading out-of-tree module taints kernel.",
        "[    1.1] nvidia: module license 'NVIDIA' taints kernel.",
        "[    2.0] nvidia-nvlink: Nvlink Core is being initialized, major device number 509",
        "[    5.0] nvidia 0000:1b:00.0: enabling device (0000 -> 0003)",
        "[    5.9] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.154.05",
        "[    6.0] nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  535.154.05",
        "[    6.1] nvidia-uvm: Loaded the UVM driver, major device number 507.",
    ])
    assert read.other_nvidia_lines == 0 and read.routine_nvidia_lines == 6
    doc = kernel_log_document(read, "dmesg.txt")
    assert doc["routine_nvidia_lines"] == 6
    assert not driver_line_notes(doc)
