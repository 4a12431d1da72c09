"""What a person sees on a narrow terminal: secondary columns leave first (and are named), the
class, #wrong, the verdict and the bus ids are never cut, findings fold into a list."""

from __future__ import annotations

import io

import pytest
from rich.text import Text

from conftest_report import ALL_FAULTS, write_run
from gputopo.console import literal_console
from gputopo.fit_table import Column, fit_columns, fitted_table
from gputopo.report.outputs.terminal import print_summary
from gputopo.report.scan_view import render_scan
from gputopo.report.summary import summarize_dir
from gputopo.report.topology_checks import topology_findings
from gputopo.sim.scan import scan_simulated


def screen(width: int, draw) -> str:
    buf = io.StringIO()
    console = literal_console(file=buf, width=width, no_color=True, soft_wrap=False)
    draw(console)
    return buf.getvalue()


def test_columns_leave_in_drop_order_and_kept_ones_never():
    cols = [Column("class", keep=True), Column("a", drop=1), Column("b", drop=3), Column("c", drop=2),
            Column("verdict", keep=True)]
    rows = [["NODE", "x" * 10, "y" * 10, "z" * 10, "broken"]]
    assert fit_columns(cols, rows, 200) == [0, 1, 2, 3, 4]
    assert fit_columns(cols, rows, 40) == [0, 1, 4]  # b (drop 3), then c (drop 2) left
    assert fit_columns(cols, rows, 5) == [0, 4]  # too narrow for anything else: the kept stay
    table, left_out = fitted_table(cols, rows, 40)
    assert left_out == ["b", "c"] and len(table.columns) == 3


@pytest.fixture(scope="module")
def faulty_summary(tmp_path_factory):
    return summarize_dir(write_run(tmp_path_factory.mktemp("w") / "run", ALL_FAULTS))


@pytest.mark.parametrize("width", [60, 80, 100])
def test_report_at_narrow_widths_keeps_the_verdict_and_wrong_counts(faulty_summary, width):
    out = screen(width, lambda c: print_summary(faulty_summary, c))
    lines = out.splitlines()
    assert max(len(ln) for ln in lines) <= width
    assert "…" not in out, "a cell was cut"
    table = out[out.index("Link classes"):out.index("Findings")]
    for word in ("class", "#wrong", "verdict", "broken", "NODE", "SYS"):
        assert word in table, word
    assert "left out" in " ".join(table.split())  # the user is told what the narrow terminal hides
    # findings fold into entries: each group's kind and message are there, none cut
    findings = out[out.index("Findings"):]
    for kind in ("corrupt", "nan", "hang", "crash"):
        assert kind in findings


def test_report_on_a_wide_terminal_leaves_nothing_out(faulty_summary):
    out = screen(200, lambda c: print_summary(faulty_summary, c))
    assert "left out" not in out and "theoretical GB/s" in out and "┃ finding" in out


def test_scan_at_80_columns_keeps_bus_ids_and_health_columns():
    topo = scan_simulated("seed-8gpu")
    out = screen(80, lambda c: render_scan(c, topo, topology_findings(topo)))
    assert max(len(ln) for ln in out.splitlines()) <= 80
    for g in topo.gpus:
        bus = str(g.pci_bus_id).lower()
        assert bus[-12:] in out, f"bus id of GPU {g.nvml_index} cut"
    for header in ("Xid", "health", "uncorr.", "PCIe now (max)", "NVLinks"):
        assert header in out
    assert "Affini…" not in out and "…" not in out


def test_a_text_cell_counts_its_widest_line():
    from gputopo.fit_table import cell_width

    assert cell_width(Text("ab\nabcd")) == 4 and cell_width("µs") == 2 and cell_width(12345) == 5
