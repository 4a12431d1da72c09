"""gputopo's Xid table agrees with NVIDIA's own Xid catalog
(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, sheet "Xids": the columns
"Resolution Bucket (Immediate Action)" and "(Investigatory Action)", and the "Trigger Conditions"
text), not with third-party pages: the buckets below are copied from that page, row by row.

Severity follows what NVIDIA says the GPU needs (gputopo/model/xid.py's docstring): an immediate
RESET_GPU / RESTART_BM (or a workflow ending in one) is an error; a GPU that keeps working but is
not whole a warning; IGNORE or restarting the application info. A healthy GPU is never called
broken, a GPU needing a reset never passed as ok.
"""

from __future__ import annotations

import pytest

from gputopo.model.xid import CATALOG_ACTIONS, XIDS, nvlink5_fatality, xid_info

#: code: (immediate, investigatory) as NVIDIA's catalog gives them.
CATALOG_BUCKETS = {
    8: ("RESTART_APP", "CONTACT_SUPPORT"),
    13: ("RESTART_APP", "WORKFLOW_XID_13"),
    31: ("RESTART_APP", "WORKFLOW_XID_31"),
    32: ("RESTART_APP", "CHECK_APP/CUDA"),
    43: ("IGNORE", "CONTACT_SUPPORT"),
    45: ("WORKFLOW_XID_45", "WORKFLOW_XID_45"),  # investigatory: "Solo: RESTART_FM Not Solo: IGNORE", the workflow's text
    46: ("RESET_GPU", "CONTACT_SUPPORT"),
    48: ("WORKFLOW_XID_48", "WORKFLOW_XID_48"),
    54: ("CHECK_MECHANICALS", "CONTACT_SUPPORT"),
    62: ("RESET_GPU", "CONTACT_SUPPORT"),
    63: ("IGNORE", "IGNORE"),
    64: ("RESET_GPU", "CONTACT_SUPPORT"),
    68: ("RESTART_APP", "CONTACT_SUPPORT"),
    69: ("RESTART_APP", "CHECK_APP/CUDA"),
    74: ("WORKFLOW_NVLINK_ERR", "CONTACT_SUPPORT"),
    79: ("RESTART_BM", "CONTACT_SUPPORT"),
    92: ("IGNORE", "CONTACT_SUPPORT"),
    94: ("RESTART_APP", "IGNORE (sympathetic)"),
    95: ("RESET_GPU", "IGNORE (sympathetic)"),
    109: ("RESET_GPU", "CONTACT_SUPPORT"),
    110: ("RESET_GPU", "INVESTIGATE_SW"),
    119: ("RESET_GPU", "INVESTIGATE_SW"),
    120: ("RESET_GPU", "INVESTIGATE_SW"),
    121: ("IGNORE", "CONTACT_SUPPORT"),
    136: ("RESET_GPU", "INVESTIGATE_LINK_SI"),
    140: ("RESET_GPU", "CONTACT_SUPPORT"),
    143: ("RESET_GPU", "CONTACT_SUPPORT"),
    **{c: ("WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR") for c in range(144, 151)},
    155: ("RESET_GPU", "INVESTIGATE_SW_USER"),
    156: ("RESET_GPU", "IGNORE"),
    157: ("IGNORE", "CONTACT_SUPPORT"),
    158: ("RESET_GPU", "CONTACT_SUPPORT"),
    159: ("CHECK_UVM", "SYMPATHETIC_REPORT_SOLO"),
}


@pytest.mark.parametrize("code", sorted(CATALOG_BUCKETS))
def test_buckets_are_the_catalogs(code):
    assert XIDS[code].actions == CATALOG_BUCKETS[code]


@pytest.mark.parametrize("code", sorted(CATALOG_BUCKETS))
def test_a_code_whose_immediate_action_resets_the_gpu_is_an_error(code):
    """RESET_GPU / RESTART_BM now, or WORKFLOW_XID_48 / WORKFLOW_NVLINK_ERR ("A GPU reset or node
    reboot is needed to clear this error"): the GPU is not to be trusted until it is done."""
    if CATALOG_BUCKETS[code][0] in ("RESET_GPU", "RESTART_BM", "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR"):
        assert (XIDS[code].hardware, XIDS[code].severity) == (True, "error")


@pytest.mark.parametrize("code", sorted(CATALOG_BUCKETS))
def test_a_code_nvidia_asks_nothing_of_the_gpu_for_is_never_an_error(code):
    """IGNORE or RESTART_APP now: the GPU is not broken. Two are warnings, a GPU not whole: 94
    (reset "when convenient") and 157 ("No possible repairs are possible due to lack of resources.
    You may still run workloads")."""
    if CATALOG_BUCKETS[code][0] in ("IGNORE", "RESTART_APP", "WORKFLOW_XID_45"):
        assert xid_info(code).severity == ("warning" if code in (94, 157) else "info")


def test_xid94_contained_is_a_warning_with_reset_when_convenient():
    """Catalog: "All other applications running at the time of the Xid are unaffected. It is
    recommended to reset the GPU when convenient. Applications can continue to be run until the
    reset can be performed." Neither broken (error) nor nothing (info)."""
    x = XIDS[94]
    assert (x.hardware, x.severity) == (True, "warning")
    assert any("reset the GPU when convenient" in a for a in x.advice)


def test_xid95_uncontained_needs_the_reset():
    assert (XIDS[95].severity, XIDS[95].actions[0]) == ("error", "RESET_GPU")


def test_xid63_remap_recorded_is_info_and_says_it_applies_at_the_next_reset():
    """Catalog IGNORE / IGNORE; the memory error management guide: unaffected applications keep
    running and new work can start while the remap is pending."""
    assert XIDS[63].severity == "info" and XIDS[63].hardware
    assert "next reset" in XIDS[63].meaning and "keeps running" in XIDS[63].advice[0]


def test_xid92_high_sbe_rate_is_info():
    assert XIDS[92].severity == "info" and XIDS[92].hardware


def test_xid61_pmu_breakpoint_needs_a_reset():
    """NVIDIA's older Xid page (r555): "PMU Breakpoint. Report a GPU Issue and Reset GPU(s)
    reporting the XID"."""
    assert XIDS[61].severity == "error" and XIDS[61].actions[0] == "RESET_GPU"


def test_xid32_is_said_as_nvidia_says_it_pcie_quality_not_the_application():
    assert "PCIe" in XIDS[32].meaning and "not the application" in XIDS[32].meaning


def test_xid74_says_the_far_end_may_be_at_fault():
    assert "other end" in XIDS[74].meaning


@pytest.mark.parametrize("code", [46, 109, 110, 136, 140, 143, 155, 156, 158])
def test_reset_codes_once_missing_are_no_longer_unknown_info(code):
    """These catalog rows ask for a GPU reset; before, gputopo listed them as an unknown code (info)."""
    assert "not in gputopo's table" not in xid_info(code).meaning and xid_info(code).severity == "error"


def test_every_bucket_named_has_words():
    for code, x in XIDS.items():
        for a in x.actions:
            assert a in CATALOG_ACTIONS or a in ("IGNORE", "XID_154"), (code, a)


@pytest.mark.parametrize("text, word", [
    ("NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x025001c6 0x00000000 0x00000000)", "Fatal"),
    ("NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000)", "Fatal"),
    ("RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008)", "Nonfatal"),
    ("RLW_RXPIPE Non-fatal XC0 i0 Link 13", "Nonfatal"),
    ("pid=1, name=python3, Ch 00000001", None),
])
def test_nvlink5_fatality_reads_the_drivers_word(text, word):
    assert nvlink5_fatality(text) == word
