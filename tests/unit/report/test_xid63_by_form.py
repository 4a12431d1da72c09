"""Xid 63 by its form (issue 47, item 17). Both logs are written (variants in the driver's own
words; no posted pre-Ampere Xid 63 line was found): the pre-Ampere dynamic page retirement line
("Dynamic Page Retirement: New page retired, reboot to activate") asks for a reset or a reboot, as
NVIDIA's dynamic page retirement guide does (the page can still be allocated until then); the
row-remapping form of Ampere and later asks nothing now (NVIDIA's Xid catalog: IGNORE)."""

from __future__ import annotations

from gputopo.importers.run import run_import
from gputopo.report.analysis import analyze
from gputopo.report.run_folder import load_run


def _xid63(tmp_path, line):
    log = tmp_path / "k.log"
    log.write_text(f"[ 812.0] NVRM: Xid (PCI:0000:04:00): 63, {line}\n")
    res = run_import("kernel-log", str(log), out_dir=tmp_path / "run", render=False)
    (f,) = [f for f in analyze(load_run(res.run_dir)).findings if f.kind == "xid"]
    return f


def test_written_pre_ampere_page_retirement_asks_for_a_reset_or_reboot(tmp_path):
    f = _xid63(tmp_path, "Dynamic Page Retirement: New page retired, reboot to activate")
    assert f.severity == "warning"
    assert "page retired" in f.message and "until the GPU is reset or the node rebooted" in f.message
    assert "reboot the node" in f.remedies[0] and "still be allocated" in f.remedies[0]
    assert not any("nothing is needed now" in r for r in f.remedies)


def test_written_row_remapping_form_asks_nothing_now(tmp_path):
    f = _xid63(tmp_path, "pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.")
    assert f.severity == "info"
    assert f.remedies[0].startswith("nothing is needed now")
