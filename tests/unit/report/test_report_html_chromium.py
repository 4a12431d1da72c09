"""Open report.html in headless Chromium from disk: its tables and images must render.

Skipped where no Chromium is installed (`apt-get install chromium`).
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess

import pytest

from conftest_report import ALL_FAULTS, write_run
from gputopo.report.render import render_run

CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome",
                                                         "google-chrome-stable")) if p), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-dev-shm-usage", "--no-first-run", "--disable-extensions"]


def _chromium(tmp_path, *args, timeout=90):
    profile = tmp_path / "chromium-profile"
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = write_run(tmp_path_factory.mktemp("html") / "run", ALL_FAULTS)
    render_run(d)
    return d / "report.html"


def test_dom_has_tables_and_images(report, tmp_path):
    res = _chromium(tmp_path, "--dump-dom", report.as_uri())
    dom = res.stdout
    assert "<table" in dom, res.stderr[-2000:]
    for table in ("findings-table", "class-table", "pair-table"):
        assert f'id="{table}"' in dom
    assert len(re.findall(r"<img ", dom)) == 5
    assert "SIMULATED" in dom


def test_images_decode_and_page_is_not_blank(report, tmp_path):
    """Screenshot the page; a page whose images did not load is mostly white and compresses tiny."""
    shot = tmp_path / "shot.png"
    res = _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1400,3000", report.as_uri())
    assert shot.exists(), res.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1400, 3000)
    assert len(data) > 50_000
