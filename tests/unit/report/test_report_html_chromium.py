"""report.html opened from disk in headless Chromium, as a user opens it: the verdict, every table
and every image are on the page, the images decode, nothing is wider than a 1280 px window, and
the page as drawn is not blank. Three pages: the seed machine with every fault, a one-GPU
machine's bench, an imported p2pBandwidthLatencyTest log.

The browser tests start Chromium (marked ``slow``); they skip where it is not installed and fail
under CI (``CI=true``), whose .ci/run installs it (tests/helpers/browser.py).
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

import numpy as np
import pytest

from conftest_report import ALL_FAULTS, write_run
from gputopo.report.outputs.notes import verdict_line
from gputopo.report.render import render_run
from gputopo.report.run_folder import load_run
from gputopo.report.summary import summarize
from helpers import browser
from helpers.cli import gputopo, gputopo_here
from helpers.paths import FIXTURES

P2PBW = FIXTURES / "p2pbw" / "chlc-blog_8x4090_stock-driver_p2p-none_no-device-header.txt"
P2PBW_TOPO = P2PBW.with_suffix(".topo.txt")
#: The tables each page must show (the one-GPU run has no pair, so no pair or class table).
TABLES = {"seed-faults": {"run-table", "class-table", "findings-table", "pair-table"},
          "one-gpu": {"run-table", "findings-table"},
          "import-p2pbw": {"run-table", "class-table", "findings-table", "pair-table"}}


@pytest.fixture(scope="module")
def chromium():
    return browser.chromium_or_skip()


def _seed_faults(d: Path) -> None:
    write_run(d, ALL_FAULTS)
    render_run(d)


def _one_gpu(d: Path) -> None:
    res = gputopo("bench", "--sim", "h100-sxm-1gpu", "--quick", "--out", d, "--no-history",
                  env={"CUDA_VISIBLE_DEVICES": None}, timeout=300)
    assert res.returncode == 0, res.stderr


def _import_p2pbw(d: Path) -> None:
    res = gputopo_here("import", "p2pbw", P2PBW, "--topo", P2PBW_TOPO, "--out", d, "--no-history")
    assert res.returncode == 0, res.stderr


MAKERS = {"seed-faults": _seed_faults, "one-gpu": _one_gpu, "import-p2pbw": _import_p2pbw}


@pytest.fixture(scope="module")
def made(chromium, tmp_path_factory):
    """Each page's run folder, made once when a test first asks for it (Chromium found first,
    so a machine without one skips before any run is made)."""
    folders = {}

    def folder(name: str) -> Path:
        if name not in folders:
            d = tmp_path_factory.mktemp(name) / "run"
            MAKERS[name](d)
            assert (d / "report.html").is_file()
            folders[name] = d
        return folders[name]

    return folder


@pytest.fixture(scope="module")
def page_facts(chromium, made, tmp_path_factory):
    """What Chromium made of each page in a 1280 px window, asked once per page."""
    facts = {}

    def of(name: str):
        if name not in facts:
            facts[name] = browser.page_facts(chromium, made(name) / "report.html",
                                             tmp_path_factory.mktemp(f"chromium-{name}"), width=1280)
        return facts[name]

    return of


@pytest.fixture(params=sorted(MAKERS))
def page(request, made, page_facts):
    """(name, run folder, what Chromium made of its report.html) of each page."""
    return request.param, made(request.param), page_facts(request.param)


def _source_rows(html: str):
    """Each table's id and body rows as report.html writes them."""
    return {m.group(1): m.group(2).split("<tbody>", 1)[-1].count("<tr>")
            for m in re.finditer(r'<table id="([^"]+)">(.*?)</table>', html, re.S)}


def _png_size(path: Path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", data[16:24])


@pytest.mark.slow
def test_page_has_the_verdict_tables_and_every_image_decoded(page):
    name, d, facts = page
    summary = summarize(load_run(d))
    assert facts["verdict"] is not None, "no element #verdict on the page"
    assert facts["verdict"]["shown"]
    assert facts["verdict"]["text"].strip() == verdict_line(summary)
    assert facts["verdict"]["class"] == summary.verdict
    banners = {b["id"] for b in facts["banners"] if b["shown"]}
    assert ("simulated-banner" in banners) == summary.simulated
    shown = {t["id"]: t for t in facts["tables"] if t["shown"]}
    assert TABLES[name] <= set(shown), facts["tables"]
    assert all(shown[t]["rows"] > 0 and shown[t]["columns"] > 1 for t in TABLES[name]), facts["tables"]
    # the browser parsed every table and row the page was written with
    assert {t["id"]: t["rows"] for t in facts["tables"]} == _source_rows((d / "report.html").read_text())
    # every figure the render drew is on the page, decoded at its own size
    pngs = sorted(_png_size(p) for p in d.glob("*.png"))
    images = facts["images"]
    assert len(images) == len(pngs), (images, pngs)
    assert [i["alt"] for i in images if not (i["complete"] and i["natural_width"] > 0 and i["shown"])] == []
    assert sorted((i["natural_width"], i["natural_height"]) for i in images) == pngs


@pytest.mark.slow
def test_page_fits_a_1280_px_window(page):
    """No horizontal scroll bar on a laptop: wide tables and figures wrap or shrink to the window."""
    _, _, facts = page
    assert 1200 <= facts["viewport_width"] <= 1280
    assert facts["wider_than_window"] == [], facts["wider_than_window"]
    assert facts["scroll_width"] <= facts["viewport_width"]


def _shot(chromium, made, page_facts, tmp_path, name: str, height: int):
    from PIL import Image

    facts = page_facts(name)
    shot = browser.screenshot(chromium, made(name) / "report.html", tmp_path, facts, height)
    with Image.open(shot) as im:
        assert im.size == (facts["viewport_width"], height)
        return facts, np.asarray(im.convert("RGB"), dtype=np.int16)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["seed-faults", "one-gpu"])
def test_screenshot_is_not_blank(name, made, page_facts, chromium, tmp_path):
    """The top of the page as drawn: the SIMULATED banner's yellow across it, the verdict and the
    story's text below."""
    _, rgb = _shot(chromium, made, page_facts, tmp_path, name, 1000)
    not_white = float((rgb.min(axis=2) < 200).mean())
    banner = int((np.abs(rgb[:200] - np.array([0xFF, 0xD5, 0x4F])).max(axis=2) < 8).sum())
    assert banner > rgb.shape[1] * 20, banner
    assert not_white > 0.01, not_white


@pytest.mark.slow
def test_figures_are_drawn_pixel_for_pixel(made, page_facts, chromium, tmp_path):
    """Every figure of the imported run's page, where the page put it, is its PNG as drawn by
    the render (a figure that did not decode leaves a white box or a broken-image icon)."""
    from PIL import Image

    facts, rgb = _shot(chromium, made, page_facts, tmp_path, "import-p2pbw",
                       round(max(i["box"][1] + i["box"][3] for i in page_facts("import-p2pbw")["images"])) + 10)
    pngs = {p.name: np.asarray(Image.open(p).convert("RGB"), dtype=np.int16)
            for p in made("import-p2pbw").glob("*.png")}
    drawn = []
    for image in facts["images"]:
        left, top, _, _ = image["box"]
        w, h = image["natural_width"], image["natural_height"]
        diffs = {(name, dx, dy): float(np.abs(rgb[round(top) + dy:round(top) + dy + h,
                                                  round(left) + dx:round(left) + dx + w] - png).mean())
                 for name, png in pngs.items() if png.shape == (h, w, 3)
                 for dx in (0, 1, 2) for dy in (0, 1, 2)}
        best = min(diffs, key=diffs.get) if diffs else None
        assert best is not None and diffs[best] < 1.0, (image["alt"], best and diffs[best])
        drawn.append(best[0])
    assert sorted(drawn) == sorted(pngs) and len(pngs) == 3


@pytest.mark.slow
def test_the_checks_see_an_image_that_does_not_decode_and_an_element_too_wide(made, chromium, tmp_path):
    """The checks above can fail: the one-GPU page with a damaged image and a 2000 px wide
    table added."""
    html = (made("one-gpu") / "report.html").read_text()
    damaged = tmp_path / "report.html"
    damaged.write_text(html.replace("</body>", '<img alt="damaged" src="data:image/png;base64,iVBORw0KGgoAAAA">'
                                    '<table id="too-wide" style="width:2000px"><tbody><tr><td>x</td></tr>'
                                    "</tbody></table></body>"))
    facts = browser.page_facts(chromium, damaged, tmp_path)
    assert [(i["alt"], i["natural_width"]) for i in facts["images"]] == [("damaged", 0)]
    assert any(w.startswith("table#too-wide right edge 20") for w in facts["wider_than_window"]), facts
    assert facts["scroll_width"] > facts["viewport_width"]


def test_without_chromium_the_tests_skip_outside_ci_and_fail_under_ci(monkeypatch):
    monkeypatch.setattr(browser, "find_chromium", lambda: None)
    for env in ({}, {"CI": ""}, {"CI": "false"}, {"CI": "0"}):
        with pytest.raises(pytest.skip.Exception, match="Chromium not installed"):
            browser.chromium_or_skip(env)
    for env in ({"CI": "true"}, {"CI": "1"}, {"CI": "True"}):
        with pytest.raises(pytest.fail.Exception, match="CI is set but no headless Chromium"):
            browser.chromium_or_skip(env)
    monkeypatch.setattr(browser, "find_chromium", lambda: "/usr/bin/chromium")
    assert browser.chromium_or_skip({"CI": "true"}) == "/usr/bin/chromium"


def test_the_summary_says_how_the_browser_checks_went():
    """pytest's summary (CI's log) names the browser checks that ran and how: the tests that
    start Chromium only, each counted once at its worst phase."""

    class Report:
        def __init__(self, nodeid, when, slow=True):
            self.nodeid, self.when = f"tests/unit/report/{nodeid}", when
            self.keywords = {"slow": 1} if slow else {}

    stats = {"passed": [Report("test_report_html_chromium.py::test_a", "call"),
                        Report("test_report_html_chromium.py::test_b", "call"),
                        Report("test_report_html_chromium.py::test_without", "call", slow=False),
                        Report("test_report_outputs.py::test_c", "call")],
             "error": [Report("test_report_html_chromium.py::test_b", "teardown")],
             "skipped": [Report("test_report_html_chromium.py::test_d", "setup")]}
    line = browser.summary_line(stats)
    assert line is not None and line.startswith("report.html in headless Chromium (")
    assert line.endswith("): 1 passed, 1 error, 1 skipped")
    assert browser.summary_line({"passed": [Report("test_report_outputs.py::test_c", "call")]}) is None
    assert browser.summary_line({"passed": [Report("test_report_html_chromium.py::test_without", "call",
                                                   slow=False)]}) is None
