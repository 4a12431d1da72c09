"""Xid findings say what NVIDIA's Xid catalog says the GPU needs
(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html): the Blackwell NVLink Xids
144-150 by the Fatal / Nonfatal their line says (the catalog's "XID 144-150 Decode": Fatal and
Link Fatal rows RESET_GPU; Non-fatal rows IGNORE or "follow Xid 154", except three the decode may
promote to Fatal), a contained memory error (94) a warning with "reset the GPU when
convenient", a remap recorded (63) and a high corrected-error rate (92) info.

The gpud fixture is posted (tests/fixtures/README.md gives its source); logs written inline here
are labelled "written": variants made for these tests, not posted.
"""

from __future__ import annotations

import re

from gputopo.importers.run import run_import
from gputopo.report.analysis import analyze
from gputopo.report.run_folder import load_run
from helpers.paths import FIXTURES

GPUD = FIXTURES / "xid" / "gpud-1174_kmsg_xid149_145_94_no-stamp.txt"


def _findings(tmp_path, log):
    res = run_import("kernel-log", str(log), out_dir=tmp_path / "run", render=False)
    return [f for f in analyze(load_run(res.run_dir)).findings if f.kind == "xid"]


def _buckets(remedies):
    return [m.group(1) for r in remedies for m in [re.search(r"NVIDIA's Xid catalog: ([A-Z0-9_/]+)", r)] if m]


def test_posted_fatal_netir_xid149_needs_a_reset_and_nonfatal_145_does_not(tmp_path):
    """Posted (gpud PR 1174): two Xid 149 lines that say Fatal, an Xid 145 RLW_RXPIPE Nonfatal
    (errorStatus 0x8: the decode's row is IGNORE / CONTACT_SUPPORT, Non-fatal) and an Xid 94."""
    found = {f.evidence["bus_id"]: f for f in _findings(tmp_path, GPUD)}
    for bus in ("0019:01:00.0", "0000:00:00.0"):
        f149 = found[bus]
        assert (f149.evidence["xid"], f149.severity, f149.evidence["driver_severity"]) == (149, "error", "Fatal")
        assert "the driver's line says Fatal" in f149.message
        assert _buckets(f149.remedies) == ["RESET_GPU", "WORKFLOW_NVLINK5_ERR"]
    f145 = found["0018:01:00.0"]  # NVIDIA's decode, RLW_RXPIPE 0x00000008: IGNORE, "Local: none; Remote: none"
    assert (f145.evidence["xid"], f145.severity, f145.evidence["driver_severity"]) == (145, "info", "Nonfatal")
    assert "RESET_GPU" not in _buckets(f145.remedies) and "nothing is needed on the GPU now" in f145.remedies[1]
    f94 = found["0000:9b:00.0"]
    assert (f94.evidence["xid"], f94.severity) == (94, "warning")
    assert _buckets(f94.remedies) == ["RESTART_APP", "IGNORE"]  # "IGNORE (sympathetic)", after the advice
    assert "reset the GPU when convenient (`nvidia-smi -r -i 00000000:9B:00.0`)" in f94.remedies[1]


def test_a_fatal_line_among_nonfatal_ones_makes_the_gpu_an_error(tmp_path):
    """Written: one GPU, two Xid 145 lines, the second Fatal (RLW_SRC_TRACK 0x1: RESET_GPU)."""
    log = tmp_path / "k.log"
    log.write_text("[ 1.0] NVRM: Xid (PCI:0000:dc:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008)\n"
                   "[ 2.0] NVRM: Xid (PCI:0000:dc:00): 145, RLW_SRC_TRACK Fatal XC0 i0 Link 13 (0x000000e2 0x00000001)\n")
    (f,) = _findings(tmp_path, log)
    assert f.severity == "error" and f.evidence["driver_severity"] == "Fatal" and "(2 times)" in f.message


def test_a_nonfatal_line_the_decode_may_promote_is_a_warning(tmp_path):
    """Written: RLW_RXPIPE errorStatus 0x1 is "Non-fatal*" in NVIDIA's decode (its intrInfo may
    promote it to RESET_GPU, which gputopo does not decode), and a Nonfatal line without its
    registers cannot be looked up: both stay warnings, never info."""
    log = tmp_path / "k.log"
    log.write_text("[ 1.0] NVRM: Xid (PCI:0000:dc:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000001)\n"
                   "[ 2.0] NVRM: Xid (PCI:0000:ed:00): 146, TLW_CTRL Nonfatal XC0 i0 Link 2\n")
    found = {f.evidence["xid"]: f for f in _findings(tmp_path, log)}
    assert (found[145].severity, found[146].severity) == ("warning", "warning")
    assert found[145].evidence["driver_severity"] == "Nonfatal"


def test_an_nvlink5_line_saying_neither_stays_a_warning(tmp_path):
    """Written: an Xid 147 line whose words are cut before Fatal/Nonfatal."""
    log = tmp_path / "k.log"
    log.write_text("[ 1.0] NVRM: Xid (PCI:0000:dc:00): 147, TREX\n")
    (f,) = _findings(tmp_path, log)
    assert f.severity == "warning" and "driver_severity" not in f.evidence


def test_remap_recorded_and_high_sbe_rate_are_info_not_a_degraded_gpu(tmp_path):
    """Written, in the driver's words: Xid 63 (catalog IGNORE / IGNORE; the memory error guide:
    work keeps running, the remap applies at the next reset) and Xid 92 (IGNORE, CONTACT_SUPPORT)."""
    log = tmp_path / "k.log"
    log.write_text("[ 1.0] NVRM: Xid (PCI:0000:3b:00): 63, pid=1896, Row Remapper: New row marked for remapping, "
                   "reset gpu to activate.\n"
                   "[ 2.0] NVRM: Xid (PCI:0000:3b:00): 92, pid='<unknown>', name=<unknown>, High single-bit ECC "
                   "error rate\n")
    found = {f.evidence["xid"]: f for f in _findings(tmp_path, log)}
    assert (found[63].severity, found[92].severity) == ("info", "info")
    assert any("applied at the GPU's next reset" in r for r in found[63].remedies)
    assert _buckets(found[92].remedies) == ["CONTACT_SUPPORT"]


def test_a_reset_code_gputopo_did_not_know_is_an_error_now(tmp_path):
    """Written: Xid 109 (context switch timeout; catalog RESET_GPU, CONTACT_SUPPORT) was an
    unknown code, said as info: a GPU needing a reset passed as fine."""
    log = tmp_path / "k.log"
    log.write_text("[ 1.0] NVRM: Xid (PCI:0000:3b:00): 109, pid=4242, name=python, Ch 00000008, errorString "
                   "CTX SWITCH TIMEOUT\n")
    (f,) = _findings(tmp_path, log)
    assert f.severity == "error" and _buckets(f.remedies) == ["RESET_GPU", "CONTACT_SUPPORT"]
    assert "context switch timeout" in f.message


def test_a_pcie_fatal_timeout_is_no_unknown_info_and_names_no_made_up_bucket(tmp_path):
    """Written: Xid 167 (PCIE_FATAL_TIMEOUT: the catalog gives it no action) was an unknown code,
    said as info: a GPU whose PCIe link timed out passed as fine. Now a warning with the generic
    health check, and no catalog bucket claimed."""
    log = tmp_path / "k.log"
    log.write_text("[ 1.0] NVRM: Xid (PCI:0000:3b:00): 167, PCIE_FATAL_TIMEOUT\n")
    (f,) = _findings(tmp_path, log)
    assert f.severity == "warning" and "PCIe" in f.message and _buckets(f.remedies) == []
    assert any("dcgmi diag" in r for r in f.remedies)


def test_power_smoothing_exhausted_says_the_catalogs_remedy_not_a_generic_one(tmp_path):
    """Written: Xid 165 (catalog: power smoothing lifetime exhausted; its sentence is the remedy)."""
    log = tmp_path / "k.log"
    log.write_text("[ 1.0] NVRM: Xid (PCI:0000:3b:00): 165, Power Smoothing HW Circuitry lifetime exhausted\n")
    (f,) = _findings(tmp_path, log)
    assert f.severity == "warning" and any("power swings" in r for r in f.remedies)
    assert not any("dcgmi diag" in r for r in f.remedies)
