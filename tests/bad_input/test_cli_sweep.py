"""A small, fast slice of the bad-input sweep (tests/tools/cli_sweep.py runs all of it, ~1,700 cases):
one case of each kind of trouble it covers, so CI keeps guarding every class of defect it looks
for (rc 4, a traceback, an error of more than one line, a silent pass, a hang, an orphan
process, colour under NO_COLOR). Each case runs `python -m gputopo` in a subprocess as a user
would, in its own folder, with the history database under tmp_path."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from helpers.paths import TESTS

sys.path.insert(0, str(TESTS / "tools"))

from cli_sweep import Case, classify, sweep, table  # noqa: E402
from cli_sweep_cases import all_cases  # noqa: E402
from conftest_report import write_run  # noqa: E402
from helpers.cli import gputopo  # noqa: E402

#: group: name of the cases run here (names as cli_sweep_cases builds them).
SLICE = [
    "file: scan --from-smi <fifo>",
    "file: import nccl-tests <binary>",
    "file: check --spec <devzero>",
    "file: import p2pbw <wrong>",
    "stdin: scan --from-smi - <closed>",
    "run: check --spec baseline <measurements cut mid-line>",
    "run: check --init <run.json status running>",
    "run: place --from <measurements cut mid-line>",
    "run: diff good DAMAGED <topology of another machine>",
    "run: report <folder: fifo>",
    "option: bench --pairs '0,8'",
    "option: cluster --gbps 'nan'",
    "option: export --interval 'nan'",
    "option: history --since 'bogus'",
    "output: history --plot onto a file of the healthy run",
    "output: check --junit onto a file of the healthy run",
    "stdout: scan > /dev/full",
    "stdout: scan --format smi | head -1",
    "env: scan under NO_COLOR=1",
    "env: place under PYTHONIOENCODING=ascii",
]


def _gputopo(work: Path, *argv: str) -> bytes:
    proc = gputopo(*argv, cwd=work, env={"GPUTOPO_HISTORY": str(work / "history.sqlite")}, timeout=120,
                   text=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _light_fixtures(work: Path) -> None:
    """What the slice's cases read, made without a bench (the sweep itself runs one)."""
    for name in ("home", "xdg"):
        (work / name).mkdir()
    write_run(work / "good", [])
    _gputopo(work, "check", "--init", "--from", str(work / "good"), "--spec", str(work / "spec.toml"))
    (work / "scan4.json").write_bytes(_gputopo(work, "scan", "--sim", "pcie-4gpu", "--json"))


@pytest.mark.slow
def test_a_slice_of_the_sweep_finds_no_defect(tmp_path):
    _light_fixtures(tmp_path)
    by_name = {f"{c.group}: {c.name}": c for c in all_cases(tmp_path)}
    missing = [n for n in SLICE if n not in by_name]
    assert not missing, f"cases renamed in cli_sweep_cases: {missing}"
    results = sweep([by_name[n] for n in SLICE], tmp_path, jobs=2)
    assert not any(r.defects for r in results), table(results)


@pytest.mark.parametrize("rc, err, expect, defect", [
    (4, "gputopo: internal error: KeyError: 'x' (traceback in /tmp/e)\n", "any", "rc4"),
    (2, "gputopo: error: one\nsecond line\n", "any", "lines"),
    (2, "", "any", "lines"),
    (0, "", "refuse", "silent"),
    (0, "Traceback (most recent call last):\n  File x\nKeyError\n", "any", "traceback"),
    (None, "", "any", "hang"),
    (1, "", "any", "rc"),
])
def test_the_sweep_classifies_each_kind_of_defect(rc, err, expect, defect):
    """The sweep would be no guard if its judge let a defect through."""
    found = classify(Case("t", "t", ["scan"], expect), rc, "", err)
    assert [d.split(":")[0] for d in found] == [defect]
    assert classify(Case("t", "t", ["scan"], "refuse"), 2, "", "gputopo: error: x\n") == []
    no_color = Case("t", "t", ["scan"], "any", env={"NO_COLOR": "1"})
    assert classify(no_color, 0, "\x1b[1mbold", "") and not classify(no_color, 0, "\x1b[2Kcursor", "")
