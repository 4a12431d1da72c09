"""`gputopo import kernel-log` says every fact it reads and never passes a partial paste as whole.

- A line that is only '...' / '…' / '[...]' (lines left out where the log was pasted) is an
  ``incomplete-data`` problem, worded as the other importers word their '...' lines
  (text_input.elision_problem): what was cut may hold an Xid.

Posted fixtures: tests/fixtures/README.md gives their sources; logs written inline here are labelled
"written": variants made for these tests, not posted.
"""

from __future__ import annotations

import pytest

from gputopo.importers.kernel_log_import import import_kernel_log
from gputopo.probe.xid_lines import read_kernel_log_lines
from gputopo.report.analysis import analyze
from gputopo.report.run_folder import load_run
from gputopo.text_input import elision_problem
from helpers.paths import FIXTURES

XID = FIXTURES / "xid"
ROBIN = XID / "open-gpu-kernel-modules-1010_rtx5070ti_journal-localized-april_xid79_rc-critical-79_excerpt.txt"


def _analysis(tmp_path, log):
    res = import_kernel_log(str(log), out_dir=tmp_path / "run", render=False)
    return analyze(load_run(res.run_dir))


def test_the_posted_journal_excerpt_with_dots_is_incomplete_data(tmp_path):
    """Posted: the reporter cut the journal with a '...' line (line 12): the lines left out are not
    read, so the import says so and is no clean read."""
    found = [f for f in _analysis(tmp_path, ROBIN).findings if f.kind == "incomplete-data"]
    assert any("line 12: '...': the output was cut here when it was posted" in f.message for f in found), \
        [f.message for f in found]
    assert all(f.severity == "warning" for f in found)


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
