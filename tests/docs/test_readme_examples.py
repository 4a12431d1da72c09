"""Every example the README and the pages of docs/ show (a code block of `$ gputopo ...` lines and
their output) is run as written, in order, one shell per page, and every output line it shows
must be in what gputopo really printed.

Why: the README's outputs went stale one by one as the code moved on (a verdict's wording, a
pair that went NaN instead of diverging, a test count), and files it named (`topo.txt`, a spec,
a database) were never shipped, so a user copying an example got something else or an error.
Issue 18 asked for the README's figures to be true; this keeps them true, and issue 35 moved the
reference material into docs/ pages, each run the same way (a page's examples build on each other
as a reader goes down it, never on another page's). Only blocks fenced with a bare ``` whose first
line starts with `$ ` are run; an example that needs a GPU is fenced ```sh and only shown.

How a shown line is matched: the README's tables and paragraphs were captured at various
terminal widths, so both sides are compared as text with table borders removed and whitespace
collapsed (a wrapped paragraph is then one run of words), the output as a whole; a shown line
must be a substring of it. `...` in a shown line elides text: each piece around it must be
there. A trailing `  # note` on a shown line is the README's annotation, not output. What the
host decides is masked on both sides: run-folder timestamps, GiB figures of its memory. Paths
the examples write under /tmp are redirected into the test's own folder.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from typing import List, Tuple

import pytest

from helpers.paths import REPO

ROOT = REPO
#: The pages whose examples run: the README, then every page of docs/ (one shell each).
PAGES = ["README.md"] + sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))
#: Table borders and tree glyphs rich draws; not text.
_BOX = re.compile(r"[│┃━─┏┓┗┛┡┩└┘┌┐├┤┬┴┼╇╈┳┻╋═║╔╗╚╝╭╮╰╯]")
_MARK = "=== gputopo readme example {} ==="


def _blocks(page: str = "README.md") -> List[Tuple[int, List[str], List[str]]]:
    """(line, commands, shown output lines) of each example block of ``page``, in page order."""
    lines = (ROOT / page).read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        fence = lines[i].strip()
        if not fence.startswith("```"):  # an opening fence, with or without a language
            i += 1
            continue
        indent = len(lines[i]) - len(lines[i].lstrip())
        j = i + 1
        while j < len(lines) and lines[j].strip() != "```":
            j += 1
        body = [ln[indent:] if ln[:indent].strip() == "" else ln for ln in lines[i + 1:j]]
        if fence == "```" and body and body[0].startswith("$ "):  # ```sh, ```toml: shown only
            cmds = [ln[2:] for ln in body if ln.startswith("$ ")]
            shown = [ln for ln in body if not ln.startswith("$ ")]
            out.append((i + 1, cmds, shown))
        i = j + 1
    return out


def _norm(text: str) -> str:
    text = _BOX.sub(" ", text)
    text = re.sub(r"\b\d{8}-\d{6}-", "<TS>-", text)  # run folders: reports/<YYYYmmdd-HHMMSS>-<machine>
    text = re.sub(r"\d+(\.\d+)? GiB", "<N> GiB", text)  # the host's memory
    return " ".join(text.split())


def _pieces(shown: str) -> List[str]:
    """What of a shown line must be in the output: its text without the README's trailing
    annotation, cut at each elision."""
    if not shown.lstrip().startswith("#"):
        shown = re.split(r"\s{2,}# ", shown)[0]
    return [p for p in (_norm(x) for x in re.split(r"\.\.\.|…", shown)) if len(p) >= 3]


#: Pages with at least one example to run.
RUN_PAGES = [p for p in PAGES if _blocks(p)]


@pytest.fixture(scope="module", params=RUN_PAGES)
def ran(request, tmp_path_factory):
    """Run every example block of one page in one bash session (cd and export carry over, as for
    a reader going down the page); the page, the output of each block by line, and the blocks."""
    page = request.param
    work = tmp_path_factory.mktemp("examples")
    shutil.copytree(ROOT / "examples", work / "examples")  # the history walk-through writes there
    (work / "tests").symlink_to(ROOT / "tests")
    bindir = work / "bin"
    bindir.mkdir()
    wrapper = bindir / "gputopo"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gputopo "$@"\n')
    wrapper.chmod(0o755)
    blocks = _blocks(page)
    script = ["set +e", f"cd {work}"]
    for line, cmds, _ in blocks:
        script.append(f"echo '{_MARK.format(line)}'")
        script += [c.replace("/tmp/seed-run", f"{work}/seed-run") for c in cmds]
    env = dict(os.environ, PATH=f"{bindir}:{os.environ.get('PATH', '')}", PYTHONPATH=str(ROOT),
               COLUMNS="200", NO_COLOR="1", HOME=str(work / "home"),
               XDG_DATA_HOME=str(work / "xdg"))
    env.pop("GPUTOPO_HISTORY", None)
    proc = subprocess.run(["bash", "-c", "\n".join(script)], cwd=work, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)
    text = proc.stdout.replace(f"{work}/seed-run", "/tmp/seed-run")
    got, cur = {}, None
    for ln in text.splitlines():
        m = re.fullmatch(_MARK.format(r"(\d+)"), ln)
        if m:
            cur = int(m.group(1))
            got[cur] = []
        elif cur is not None:
            got[cur].append(ln)
    return page, {k: "\n".join(v) for k, v in got.items()}, blocks


def test_the_readme_and_docs_have_their_examples():
    readme = _blocks("README.md")
    assert any("bench --sim seed-8gpu --pairs 5,6" in c for _, cmds, _ in readme for c in cmds)
    total = sum(len(cmds) for p in PAGES for _, cmds, _ in _blocks(p))
    assert total >= 30, f"only {total} example commands found in README.md and docs/"
    for page in ("docs/scan.md", "docs/bench.md", "docs/report.md", "docs/check.md", "docs/cluster.md",
                 "docs/import.md", "docs/history.md", "docs/export.md"):
        assert page in RUN_PAGES, f"{page} shows no example that runs"


@pytest.mark.slow
def test_every_example_prints_what_its_page_shows(ran):
    page, got, blocks = ran
    missing = []
    for line, cmds, shown in blocks:
        out = _norm(got.get(line, ""))
        for s in shown:
            for piece in _pieces(s):
                if piece not in out:
                    missing.append(f"{page} line {line} ({cmds[0][:60]}): {piece[:120]!r}")
    assert not missing, f"{page}: output not printed:\n" + "\n".join(missing)


@pytest.mark.slow
def test_no_example_fails_unexpectedly(ran):
    """An example that does not show an error must not print one (a file it names missing, an
    option since renamed)."""
    page, got, blocks = ran
    bad = []
    for line, cmds, shown in blocks:
        if any("error:" in s for s in shown):
            continue
        text = got.get(line, "")
        if "gputopo: error:" in text or "Traceback" in text:
            err = next(ln for ln in text.splitlines() if "error:" in ln or "Traceback" in ln)
            bad.append(f"{page} line {line} ({cmds[0][:60]}): {err[:160]}")
    assert not bad, "\n".join(bad)
