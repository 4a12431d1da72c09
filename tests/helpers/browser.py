"""Headless Chromium for the report tests: report.html opened from disk as a user opens it.

- :func:`chromium_or_skip` finds the browser (``chromium``, ``chromium-browser``,
  ``google-chrome``, ``google-chrome-stable`` on PATH). Where there is none the test skips, but
  under CI (``CI=true``, as CI services set it) it fails: .ci/run installs Chromium, so a missing
  one there means the page went unchecked, never a pass.
- :func:`page_facts` opens a copy of the page with a script added at its end that, once the page
  has loaded (its images included), writes what the browser made of it into the DOM as JSON:
  the verdict line, the banners, every table with its rows, every image (decoded or not, its
  natural size) and any element wider than the window; ``--dump-dom`` then prints it. The page
  itself has no script (gputopo/report/outputs/html.py); only the copy has.
- :func:`screenshot` takes a PNG of the page as drawn.

Each call starts one Chromium process (a few seconds), so a test that uses them is marked
``slow``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from html import unescape
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

import pytest

#: The names Chromium has on PATH (Debian's package, Ubuntu's, Google's builds).
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
#: Headless from disk: no sandbox (CI runs as root in a container), no GPU, no network, no /dev/shm.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-dev-shm-usage", "--no-first-run", "--disable-extensions")
#: The width a laptop's browser window has: the page must not need a horizontal scroll bar there.
WIDTH = 1280
#: Seconds one Chromium run may take (it takes 2-4 s on 2 cores).
TIMEOUT_S = 60

_FACTS_ID = "gputopo-browser-facts"
#: Runs on the page's load event (every image loaded or failed by then).
_FACTS_SCRIPT = """<script>
window.addEventListener('load', function () {
  function name(el) {
    return el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
      (el.className && typeof el.className === 'string' ? '.' + el.className.split(' ').join('.') : '');
  }
  function shown(el) { return el.getClientRects().length > 0; }
  var root = document.documentElement, width = root.clientWidth, wide = [];
  document.querySelectorAll('body *').forEach(function (el) {
    var r = el.getBoundingClientRect();
    if (shown(el) && r.right > width + 0.5 && wide.length < 12) {
      wide.push(name(el) + ' right edge ' + Math.round(r.right) + ' px');
    }
  });
  var verdict = document.getElementById('verdict');
  var facts = {
    title: document.title,
    viewport_width: width,
    scroll_width: root.scrollWidth,
    page_height: root.scrollHeight,
    wider_than_window: wide,
    verdict: verdict && {text: verdict.innerText, class: verdict.className, shown: shown(verdict)},
    banners: Array.from(document.querySelectorAll('.banner')).map(function (b) {
      return {id: b.id, text: b.innerText, shown: shown(b)};
    }),
    tables: Array.from(document.querySelectorAll('table')).map(function (t) {
      return {id: t.id, rows: t.tBodies.length ? t.tBodies[0].rows.length : 0,
              columns: t.tHead ? t.tHead.rows[0].cells.length : 0, shown: shown(t)};
    }),
    images: Array.from(document.images).map(function (i) {
      var r = i.getBoundingClientRect();
      return {alt: i.alt, complete: i.complete, natural_width: i.naturalWidth,
              natural_height: i.naturalHeight, shown: shown(i),
              box: [r.left + window.scrollX, r.top + window.scrollY, r.width, r.height]};
    })
  };
  var out = document.createElement('pre');
  out.id = '""" + _FACTS_ID + """';
  out.textContent = JSON.stringify(facts);
  document.body.appendChild(out);
});
</script>"""


def in_ci(env: Optional[Mapping[str, str]] = None) -> bool:
    """Whether this runs under CI: ``CI`` set to anything but empty, 0, false or no."""
    value = (os.environ if env is None else env).get("CI", "")
    return value.strip().lower() not in ("", "0", "false", "no")


def find_chromium() -> Optional[str]:
    return next((p for p in (shutil.which(n) for n in CHROMIUM_NAMES) if p), None)


def chromium_or_skip(env: Optional[Mapping[str, str]] = None) -> str:
    """The browser's path; skips the test where there is none, fails it under CI."""
    path = find_chromium()
    if path is not None:
        return path
    names = ", ".join(CHROMIUM_NAMES)
    if in_ci(env):
        pytest.fail(f"CI is set but no headless Chromium is on PATH (looked for {names}): the report "
                    "page would go unchecked; .ci/run installs it (apt-get install chromium)",
                    pytrace=False)
    pytest.skip(f"headless Chromium not installed (none of {names} on PATH; apt-get install chromium)")


def run_chromium(chromium: str, work: Path, *args: str) -> "subprocess.CompletedProcess[str]":
    """One headless Chromium run with a profile of its own under ``work``."""
    return subprocess.run([chromium, *FLAGS, f"--user-data-dir={work / 'chromium-profile'}", *args],
                          capture_output=True, text=True, timeout=TIMEOUT_S)


def page_facts(chromium: str, page: Path, work: Path, width: int = WIDTH, height: int = 900) -> Dict[str, Any]:
    """What Chromium made of ``page`` in a window ``width`` x ``height`` px (see the module's
    docstring); an AssertionError with Chromium's own words when it printed no facts."""
    html = page.read_text(encoding="utf-8")
    assert html.count("</body>") == 1, f"{page}: no single </body> to add the script before"
    copy = work / f"facts-{page.name}"
    copy.write_text(html.replace("</body>", _FACTS_SCRIPT + "</body>"), encoding="utf-8")
    res = run_chromium(chromium, work, f"--window-size={width},{height}", "--dump-dom", copy.as_uri())
    found = re.search(f'<pre id="{_FACTS_ID}">(.*?)</pre>', res.stdout, re.S)
    assert found, (f"Chromium (exit {res.returncode}) printed no facts of {page}; "
                   f"its stderr ends: {res.stderr[-2000:]}")
    return json.loads(unescape(found.group(1)))


def screenshot(chromium: str, page: Path, work: Path, facts: Mapping[str, Any], height: int) -> Path:
    """A PNG of the top ``height`` px of ``page`` laid out as :func:`page_facts` saw it (``facts``
    of the same page): as wide as that window's content (``viewport_width``, the scroll bar not
    drawn), so the boxes in ``facts`` are where their pixels are."""
    shot = work / f"shot-{page.stem}.png"
    res = run_chromium(chromium, work, "--hide-scrollbars", f"--window-size={facts['viewport_width']},{height}",
                       f"--screenshot={shot}", page.as_uri())
    assert shot.exists(), f"Chromium (exit {res.returncode}) wrote no screenshot; its stderr ends: {res.stderr[-2000:]}"
    return shot


#: The test file of the browser checks (the summary line below counts its tests that start
#: Chromium: those marked slow).
TEST_FILE = "test_report_html_chromium.py"


def summary_line(stats: Mapping[str, Any]) -> Optional[str]:
    """One line for pytest's summary (tests/conftest.py) saying how the browser checks went, so
    a log (CI's) shows that they ran, or why not; None where none of them ran."""
    seen: Dict[str, str] = {}
    for outcome in ("failed", "error", "skipped", "passed"):
        for rep in stats.get(outcome, []):
            nodeid = getattr(rep, "nodeid", "")
            if TEST_FILE in nodeid and "slow" in getattr(rep, "keywords", {}):
                seen.setdefault(nodeid, outcome)  # the worst outcome of its phases
    if not seen:
        return None
    counts = {o: sum(1 for v in seen.values() if v == o) for o in ("passed", "failed", "error", "skipped")}
    said = ", ".join(f"{n} {o}" for o, n in counts.items() if n)
    where = find_chromium() or "no Chromium on PATH"
    return f"report.html in headless Chromium ({where}): {said}"
