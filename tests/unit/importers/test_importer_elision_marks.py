"""The p2pbw, nvbandwidth and nccl-tests readers know a pasted output's elision line by
text_input.py's one list of marks ('...', '…', '[...]', '[…]'), as the kernel-log reader does:
'[...]' is no longer an unknown line (p2pbw: a note; nvbandwidth, nccl-tests: passed over) but a
cut in the output, said as incomplete data; each keeps its own wording."""

from __future__ import annotations

import pytest

from gputopo.importers.nccl_tests import parse_nccl_tests
from gputopo.importers.nvbandwidth_parse import parse_nvbandwidth_lines
from gputopo.importers.p2pbw_parse import parse_p2pbw_lines

HEADER = ("#                                                              out-of-place                       in-place\n"
          "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
          "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n")
ROW = "        {size}           {count}     float     sum      -1    10.00    0.10    0.10      0    10.00    0.10    0.10      0\n"


@pytest.mark.parametrize("mark", ["[...]", "[\u2026]", "\u2026"])
def test_p2pbw_elision_mark(mark):
    out = parse_p2pbw_lines(enumerate(["[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]", mark], start=1), "p.txt")
    assert out.problems == [f"line 2: '{mark}': the output was cut here when it was posted"]


@pytest.mark.parametrize("mark", ["[...]", "[\u2026]"])
def test_nvbandwidth_elision_mark(mark):
    out = parse_nvbandwidth_lines(enumerate(["nvbandwidth Version: v0.5", mark], start=1), "n.txt")
    assert out.problems == [f"line 2: '{mark}': the output was cut here when it was posted; what was left "
                            "out is not known"]


@pytest.mark.parametrize("mark", ["[...]", "\u2026"])
def test_nccl_tests_elision_mark(mark):
    text = HEADER + ROW.format(size=1024, count=256) + mark + "\n" + ROW.format(size=4096, count=1024)
    (log,) = parse_nccl_tests(text, source="all_reduce.txt", op="all_reduce")
    assert any(p.startswith(f"line 5: '{mark}' in place of rows") for p in log.problems), log.problems
