"""Every line a tool marked as a warning or an error, in every posted output under tests/fixtures/,
is said: it appears quoted in some finding of that file's import (issue 46, item 4).

The lines are found by this test's own broad pattern (FLAGGED: NCCL's WARN, nccl-tests' failure
lines and its FAILED check, perftest's and the CUDA samples' errors, other libraries' ERROR /
warn lines, Python's ``...Error:``), not by the catch-all rule's, so a line no importer keeps fails
here. BENIGN is the reviewed list of lines the pattern catches that are no tool's warning (each
with its reason). Every folder is read; kernel logs (xid/) keep their own rules and say the driver
lines no rule judges as a note, so for them a note quoting the line counts as said.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any, List

import pytest

from helpers import fixture_verdicts as fv
from helpers.cli import gputopo_here

#: Lines a tool marked (broad; case as the tools print them).
FLAGGED = re.compile(r"NCCL WARN|\bTest (?:CUDA |NCCL )?failure\b|\b(?:NCCL|CUDA) failure\b|\bFAILED\b|Couldn't|"
                     r"Could not|Unable to|"
                     r"[Ff]ailed to\b|Completion with error|Failed status|Cuda failure|CUDA error|\bERROR\b|"
                     r"\bWARN\b|\[warn\b|\bASSERT\b|\w*Error:")
#: Reviewed: lines FLAGGED catches that no tool marked as a warning or an error.
BENIGN = [
    # NCCL INFO lines (NCCL's own level says: information): optional plugins looked for and absent,
    # an optional topology file absent, a NIC speed sysfs file absent in a container
    (re.compile(r"NCCL INFO (?:NET|TUNER|PROFILER)/Plugin: (?:Failed to find|Could not find)"), "optional plugin absent"),
    (re.compile(r"NCCL INFO Could not open XML topology file"), "optional NCCL_TOPO_FILE absent"),
    (re.compile(r"NCCL INFO Could not get speed from /sys/class/net/"), "NIC speed defaulted (INFO)"),
    # vLLM's request log: user prompts quoted (their words, not a tool's)
    (re.compile(r"\[logger\.py:\d+\] Received request .*prompt:"), "a user's prompt text"),
]
FOLDERS = tuple(fv.COMMANDS)
#: Folders whose imports may say a flagged line in a note rather than a finding (kernel logs).
SAID_IN_NOTES = ("xid",)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _files() -> List[Path]:
    return [p for p in fv.fixture_files() if p.parent.name in FOLDERS and not fv.is_companion(p)]


def _strings(x: Any) -> List[str]:
    if isinstance(x, str):
        return [x]
    if isinstance(x, dict):
        return [s for v in x.values() for s in _strings(v)]
    if isinstance(x, list):
        return [s for v in x for s in _strings(v)]
    return []


def _norm(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip()


def _said(path: Path) -> List[Any]:
    """What the import of ``path`` says: its findings (and, for a kernel log, its notes)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        words = [w.format(file=path, out=out) for w in fv.COMMANDS[path.parent.name]]
        if path.parent.name in SAID_IN_NOTES:
            ran = gputopo_here(*words, cwd=fv.REPO, env={"GPUTOPO_HISTORY": str(Path(tmp) / "h.sqlite")})
            assert ran.returncode == 0, ran.stderr
            doc = json.loads((out / "summary.json").read_text())
            return list(doc.get("findings") or []) + list(doc.get("notes") or [])
    return list(_findings(path))


def _findings(path: Path) -> List[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        words = [w.format(file=path, out=out) for w in fv.COMMANDS[path.parent.name]]
        topo = fv.companion(path)
        if topo is not None:
            words += ["--topo", str(topo)]
        if words[:2] == ["import", "nccl-debug"]:
            ran = gputopo_here(*words, cwd=fv.REPO, env={"GPUTOPO_HISTORY": str(Path(tmp) / "h.sqlite")})
            assert ran.returncode == 0, ran.stderr
            return json.loads(ran.stdout).get("findings") or []
        ran = gputopo_here(*words, cwd=fv.REPO, env={"GPUTOPO_HISTORY": str(Path(tmp) / "h.sqlite")})
        assert ran.returncode == 0, ran.stderr
        return json.loads((out / "summary.json").read_text()).get("findings") or []


def flagged_lines(path: Path) -> List[str]:
    """The needle of each flagged line: the line from its mark on (60 characters), or the whole
    line where what follows the mark is short (``... 2 FAILED``)."""
    out = []
    for raw in path.read_text(errors="replace").splitlines():
        line = _ANSI.sub("", raw)
        m = FLAGGED.search(line)
        if not m or any(rx.search(line) for rx, _why in BENIGN):
            continue
        tail = _norm(line[m.start():])
        out.append(tail[:60] if len(tail) >= 20 else _norm(line)[-60:])
    return out


@pytest.mark.parametrize("name", [str(p.relative_to(fv.FIXTURES)) for p in _files()])
def test_every_flagged_line_is_quoted_in_a_finding(name):
    path = fv.FIXTURES / name
    needles = flagged_lines(path)
    if not needles:
        return
    said = [_norm(s) for f in _said(path) for s in _strings(f)]
    unsaid = [n for n in needles if not any(n in s for s in said)]
    assert not unsaid, f"{name}: flagged lines no finding quotes: {unsaid[:5]}"


def test_the_pattern_finds_the_known_flagged_lines():
    """The test is not empty: the posted outputs with WARN and failure lines are read by it."""
    hits = {p.name for p in _files() if flagged_lines(p)}
    for part in ("nccl-tests-311_", "nccl-1405_", "perftest-31_", "softiwarp-27_", "tinygrad-16_", "nccl-tests-37_",
                 "nccl-tests-219_", "nccl-tests-5_", "gpud-readme_"):
        assert any(h.startswith(part) for h in hits), part
