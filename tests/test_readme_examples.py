"""Every example the README shows (a code block of `$ gputopo ...` lines and their output) is run
as written, in order, in one shell, and every output line it shows must be in what gputopo
really printed.

Why: the README's outputs went stale one by one as the code moved on (a verdict's wording, a
pair that went NaN instead of diverging, a test count), and files it named (`topo.txt`, a spec,
a database) were never shipped, so a user copying an example got something else or an error.
Issue 18 asked for the README's figures to be true; this keeps them true.

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
from pathlib import Path
from typing import List, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Table borders and tree glyphs rich draws; not text.
_BOX = re.compile(r"[│┃━─┏┓┗┛┡┩└┘┌┐├┤┬┴┼╇╈┳┻╋═║╔╗╚╝╭╮╰╯]")
_MARK = "=== gputopo readme example {} ==="


def _blocks() -> List[Tuple[int, List[str], List[str]]]:
    """(README line, commands, shown output lines) of each example block, in README order."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        fence = lines[i].strip()
        if fence != "```":
            i += 1
            continue
        indent = len(lines[i]) - len(lines[i].lstrip())
        j = i + 1
        while j < len(lines) and lines[j].strip() != "```":
            j += 1
        body = [ln[indent:] if ln[:indent].strip() == "" else ln for ln in lines[i + 1:j]]
        if body and body[0].startswith("$ "):
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


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """Run every example block in one bash session (cd and export carry over, as for a reader
    going down the page); the output of each block, by README line."""
    work = tmp_path_factory.mktemp("readme")
    shutil.copytree(ROOT / "examples", work / "examples")  # the history walk-through writes there
    (work / "tests").symlink_to(ROOT / "tests")
    bindir = work / "bin"
    bindir.mkdir()
    wrapper = bindir / "gputopo"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gputopo "$@"\n')
    wrapper.chmod(0o755)
    blocks = _blocks()
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
    return {k: "\n".join(v) for k, v in got.items()}, blocks


def test_the_readme_has_its_examples():
    blocks = _blocks()
    assert sum(len(cmds) for _, cmds, _ in blocks) >= 20, "the README's examples were not found"
    assert any("bench --sim seed-8gpu --pairs 5,6" in c for _, cmds, _ in blocks for c in cmds)


def test_every_readme_example_prints_what_the_readme_shows(ran):
    got, blocks = ran
    missing = []
    for line, cmds, shown in blocks:
        out = _norm(got.get(line, ""))
        for s in shown:
            for piece in _pieces(s):
                if piece not in out:
                    missing.append(f"README line {line} ({cmds[0][:60]}): {piece[:120]!r}")
    assert not missing, "README output not printed:\n" + "\n".join(missing)


def test_no_readme_example_fails_unexpectedly(ran):
    """An example that does not show an error must not print one (a file it names missing, an
    option since renamed)."""
    got, blocks = ran
    bad = []
    for line, cmds, shown in blocks:
        if any("error:" in s for s in shown):
            continue
        text = got.get(line, "")
        if "gputopo: error:" in text or "Traceback" in text:
            err = next(ln for ln in text.splitlines() if "error:" in ln or "Traceback" in ln)
            bad.append(f"README line {line} ({cmds[0][:60]}): {err[:160]}")
    assert not bad, "\n".join(bad)
