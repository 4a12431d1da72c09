"""Xid 162-172, the newest rows of NVIDIA's Xid catalog
(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, sheet "Xids"), are said with
NVIDIA's words, no longer as a code "not in gputopo's table" (info).

What the catalog gives for them: 162 (power smoothing re-engaged), 167 (PCIE_FATAL_TIMEOUT), 169
(SEC2_HALT_ERROR), 171/172 ("Additional to Xid 48 ... to differentiate DRAM/SRAM") have no
Resolution Bucket and no text; 163-165 (power smoothing circuitry disengaged / low lifetime /
exhausted), 168 (errors in the write-protected region: reduced memory) and 166/170 ("Applicable to
CC (confidential computing) mode only") have a sentence each. Severity follows model/xid.py's
docstring: a GPU that works but is not whole is a warning, nothing asked is info; a row with no
action is never passed as info when it names a fault of the GPU.
"""

from __future__ import annotations

import pytest

from gputopo.model.xid import XIDS, xid_info


@pytest.mark.parametrize("code", range(162, 173))
def test_every_row_162_to_172_is_known(code):
    assert "not in gputopo's table" not in xid_info(code).meaning


@pytest.mark.parametrize("code, severity", [
    (162, "info"),      # re-engaged: nothing to do
    (163, "warning"),   # "No GPU reset required" but power smoothing is off
    (164, "warning"),   # "expect to replace GPUs if power smoothing is desired"
    (165, "warning"),   # "Power smoothing will be disabled by the driver and power swings will occur"
    (166, "info"),      # confidential computing mode only
    (167, "warning"),   # PCIe fatal timeout: no action in the catalog, a fault never passed as info
    (168, "warning"),   # reduced memory capacity
    (169, "warning"),   # SEC2 micro-controller halt: no action in the catalog
    (170, "info"),      # confidential computing mode only
    (171, "error"),     # adds detail to an Xid 48 (uncorrectable DRAM error)
    (172, "error"),     # adds detail to an Xid 48 (uncorrectable SRAM error)
])
def test_severity_follows_what_nvidia_says_the_gpu_needs(code, severity):
    assert (XIDS[code].hardware, XIDS[code].severity) == (True, severity)


def test_rows_without_a_bucket_name_none():
    """The catalog names no Resolution Bucket for 162-172: none is made up."""
    assert all(XIDS[c].actions == () for c in range(162, 173))


@pytest.mark.parametrize("code, words", [
    (163, "reload the driver or reset the GPU"),
    (164, "expect to replace the GPU"),
    (165, "power swings"),
    (168, "ECC"),
    (166, "confidential computing"),
    (170, "confidential computing"),
    (171, "Xid 48"),
    (172, "Xid 48"),
])
def test_the_catalogs_sentence_is_the_advice(code, words):
    assert any(words in a for a in XIDS[code].advice), XIDS[code].advice


def test_pcie_fatal_timeout_and_sec2_halt_are_said_in_words():
    assert "PCIe" in XIDS[167].meaning and "timeout" in XIDS[167].meaning
    assert "SEC2" in XIDS[169].meaning and "halt" in XIDS[169].meaning
