"""`import nvbandwidth` on a posted paste of two host testcases without their SUM lines (NVIDIA/
nvbandwidth issue 24, sources in tests/fixtures/README.md): a host testcase's matrix has one row,
the host's, so its one whole row is the whole matrix; it was called "cut short" and the import
"degraded" although every figure was there."""

from __future__ import annotations

import json

from gputopo.importers.nvbandwidth_parse import parse_nvbandwidth_lines
from helpers.cli import gputopo_here
from helpers.paths import FIXTURES

H100_SM = FIXTURES / "nvbandwidth" / "nvbandwidth-24_8xh100_h2d-sm-35_d2h-sm-53_markdown-quote_no-indent_excerpt.txt"


def _parse(text: str, source: str):
    return parse_nvbandwidth_lines(enumerate(text.splitlines(), start=1), source)


def test_a_host_matrix_whose_one_row_is_whole_is_complete_without_its_sum_line(tmp_path):
    out = _parse(H100_SM.read_text(), H100_SM.name)
    assert [m.testcase for m in out.matrices] == ["host_to_device_memcpy_sm", "device_to_host_memcpy_sm"]
    assert all(m.complete and len(m.cells) == 1 and len(m.cells[0]) == 8 for m in out.matrices)
    assert out.matrices[0].cells[0][0] == 35.19 and out.matrices[1].cells[0][7] == 52.77
    assert out.problems == []
    run = tmp_path / "run"
    ran = gputopo_here("import", "nvbandwidth", str(H100_SM), "--out", str(run), "--no-history",
                       env={"GPUTOPO_HISTORY": str(tmp_path / "h.sqlite")})
    assert ran.returncode == 0, ran.stderr
    # no published host-copy figure for H100 applies, no topology: measured, not judged (issue 46)
    assert json.loads((run / "summary.json").read_text())["verdict"] == "not-judged"


def test_a_host_matrix_cut_inside_its_row_is_still_cut_short():
    text = H100_SM.read_text().replace("35.39     35.06", "35.3")  # written: the row cut inside a figure
    out = _parse(text, "written")
    assert not out.matrices[0].complete
    assert any("host_to_device_memcpy_sm" in p for p in out.problems)
