"""Damaged run folders for tests/tools/cli_sweep.py: a copy of the sweep's healthy run with one file
missing, cut, garbled or of the wrong kind, given to every command that reads a run folder.

What a correct gputopo does: `check` and `check --init` never pass (exit 0) a run they cannot
fully read; `report`, `diff` and `place --from` either refuse or say what is missing; `--resume`
redoes or refuses; none of them crashes or hangs.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Callable, Dict, List, Tuple

from cli_sweep import REPO, Case


def _lines(p: Path) -> List[str]:
    return p.read_text().splitlines()


def _edit_first(name: str, edit: Callable[[dict], None]) -> Callable[[Path], None]:
    def damage(run: Path):
        lines = _lines(run / name)
        rec = json.loads(lines[0])
        edit(rec)
        lines[0] = json.dumps(rec)  # json.dumps writes NaN/Infinity as Python does
        (run / name).write_text("\n".join(lines) + "\n")
    return damage


def _edit_run_json(edit: Callable[[dict], None]) -> Callable[[Path], None]:
    def damage(run: Path):
        info = json.loads((run / "run.json").read_text())
        edit(info)
        (run / "run.json").write_text(json.dumps(info))
    return damage


def _set(key, value):
    def edit(d):
        d[key] = value
    return edit


def _remove(name):
    def damage(run: Path):
        p = run / name
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    return damage


def _write(name, data: bytes):
    def damage(run: Path):
        (run / name).write_bytes(data)
    return damage


def _cut(name, frac=0.6):
    def damage(run: Path):
        data = (run / name).read_bytes()
        (run / name).write_bytes(data[: int(len(data) * frac)])
    return damage


def _replace_with(name, kind):
    def damage(run: Path):
        p = run / name
        p.unlink()
        if kind == "folder":
            p.mkdir()
        elif kind == "fifo":
            os.mkfifo(p)
        elif kind == "devzero":
            p.symlink_to("/dev/zero")
        elif kind == "loop":
            p.symlink_to(p)
    return damage


def _insert_line(name, line: str, at: int = 1):
    def damage(run: Path):
        lines = _lines(run / name)
        lines.insert(at, line)
        (run / name).write_text("\n".join(lines) + "\n")
    return damage


def _double(name):
    def damage(run: Path):
        (run / name).write_text((run / name).read_text() * 2)
    return damage


def _samples(value):
    def edit(rec):
        rec["samples_s"] = [value] * len(rec["samples_s"])
        rec.pop("derived", None)
    return edit


def _topo_of(work: Path, scan: str):
    def damage(run: Path):
        shutil.copy(work / scan, run / "topology.json")
    return damage


def _only_run_json(run: Path):
    for p in run.iterdir():
        if p.name != "run.json":
            shutil.rmtree(p) if p.is_dir() else p.unlink()


def damages(work: Path) -> Dict[str, Tuple[Callable[[Path], None], bool]]:
    """name -> (damage applied to a copy of the healthy run, whether a gate may still pass it).
    The healthy run measured p2p and numerics on pairs 0,1 and 0,2 (seed-8gpu-healthy)."""
    m, n, t, r, e = "measurements.jsonl", "numerics.jsonl", "topology.json", "run.json", "events.jsonl"
    table: Dict[str, Tuple[Callable[[Path], None], bool]] = {
        "run.json missing": (_remove(r), False),
        "run.json empty": (_write(r, b""), False),
        "run.json garbage": (_write(r, b"\x00\xffnot json"), False),
        "run.json truncated": (_cut(r), False),
        "run.json a list": (_write(r, b"[]"), False),
        "run.json a folder": (_replace_with(r, "folder"), False),
        "run.json a fifo": (_replace_with(r, "fifo"), False),
        "run.json /dev/zero": (_replace_with(r, "devzero"), False),
        "run.json status running": (_edit_run_json(_set("status", "running")), False),
        "run.json status interrupted": (_edit_run_json(_set("status", "interrupted")), False),
        "run.json status bogus": (_edit_run_json(_set("status", "bogus")), False),
        "run.json status missing": (_edit_run_json(lambda d: d.pop("status")), False),
        "run.json schema 999": (_edit_run_json(_set("schema_version", 999)), False),
        "run.json fabric quantum": (_edit_run_json(_set("fabric", "quantum")), False),
        "run.json options a string": (_edit_run_json(_set("options", "x")), False),
        "run.json argv a number": (_edit_run_json(_set("argv", 5)), True),
        "run.json steps NaN": (_edit_run_json(_set("steps", float("nan"))), True),
        "measurements missing": (_remove(m), False),
        "measurements empty": (_write(m, b""), False),
        "measurements cut mid-line": (_cut(m), False),
        "measurements garbage line": (_insert_line(m, "\x00garbage{"), False),
        "measurements {} line": (_insert_line(m, "{}"), False),
        "measurements null line": (_insert_line(m, "null"), False),
        "measurements samples NaN": (_edit_first(m, _samples(float("nan"))), False),
        "measurements samples negative": (_edit_first(m, _samples(-1e-5)), False),
        "measurements samples zero": (_edit_first(m, _samples(0.0)), False),
        "measurements samples 1e300": (_edit_first(m, _samples(1e300)), False),
        "measurements samples text": (_edit_first(m, _samples("fast")), False),
        "measurements samples empty": (_edit_first(m, _set("samples_s", [])), False),
        "measurements gpus 0,99": (_edit_first(m, _set("gpus", [0, 99])), False),
        "measurements gpus 0,0": (_edit_first(m, _set("gpus", [0, 0])), False),
        "measurements gpus a string": (_edit_first(m, _set("gpus", "0,1")), False),
        "measurements test bogus": (_edit_first(m, _set("test", "bogus.test")), False),
        "measurements class XYZ": (_edit_first(m, _set("link_class", "XYZ")), False),
        "measurements size -1": (_edit_first(m, _set("size_bytes", -1)), False),
        "measurements wrong -3": (_edit_first(m, _set("wrong", -3)), False),
        "measurements duplicated": (_double(m), True),
        "measurements a folder": (_replace_with(m, "folder"), False),
        "measurements a fifo": (_replace_with(m, "fifo"), False),
        "measurements /dev/zero": (_replace_with(m, "devzero"), False),
        "numerics missing": (_remove(n), False),
        "numerics empty": (_write(n, b""), False),
        "numerics cut mid-line": (_cut(n), False),
        "numerics garbage line": (_insert_line(n, "not json"), False),
        "numerics losses NaN": (_edit_first(n, _set("losses", [float("nan")] * 3)), False),
        "numerics verdict bogus": (_edit_first(n, _set("verdict", "bogus")), False),
        "numerics gpus 5,5": (_edit_first(n, _set("gpus", [5, 5])), False),
        "topology missing": (_remove(t), False),
        "topology empty": (_write(t, b""), False),
        "topology garbage": (_write(t, b"{{{"), False),
        "topology cut": (_cut(t), False),
        "topology no gpus": (_write(t, b'{"schema_version": 1, "gpus": []}'), False),
        "topology of another machine": (_topo_of(work, "scan4.json"), False),
        "topology a fifo": (_replace_with(t, "fifo"), False),
        "summary.json missing": (_remove("summary.json"), True),
        "summary.json garbage": (_write("summary.json", b"garbage"), True),
        "events missing": (_remove(e), False),
        "events garbage": (_write(e, b"\x00\x01garbage\n"), False),
        "events cut": (_cut(e, 0.3), False),
        "events a crash on 0,1": (_insert_line(e, json.dumps({
            "type": "finding", "kind": "crash", "severity": "error", "gpus": [0, 1], "link_class": "NV4",
            "message": "GPUs 0,1: worker died with SIGSEGV", "evidence": {"signal": 11, "step": "p2p:0-1"},
            "cause": None, "remedies": []}), 99), False),
        "workers folder missing": (_remove("workers"), True),
        "only run.json": (_only_run_json, False),
    }
    return table


#: Commands over a run folder {r}; expect for a damage a gate may not pass / may pass; quick.
RUN_READERS: List[Tuple[str, List[str], str, bool]] = [
    ("report", ["report", "{r}", "--no-plots"], "flag", True),
    ("report --json", ["report", "{r}", "--json", "--no-plots"], "flag", False),
    ("check --spec baseline", ["check", "{r}", "--spec", "{w}/spec.toml"], "refuse", True),
    ("check --spec pcie-box", ["check", "{r}", "--spec", "pcie-box"], "refuse", False),
    ("check --init", ["check", "--init", "--from", "{r}", "--spec", "{c}/new-spec.toml"], "refuse", True),
    ("diff good DAMAGED", ["diff", "{w}/good", "{r}"], "flag", True),
    ("diff DAMAGED good", ["diff", "{r}", "{w}/good"], "flag", False),
    ("place --from", ["place", "2", "--from", "{r}"], "flag", True),
    ("bench --resume", ["bench", "--resume", "{r}"], "any", False),
    ("import nccl-debug --into", ["import", "nccl-debug", "{fix}", "--into", "{r}"], "any", False),
    # a log of this machine (seed-8gpu's host name and bus ids): accepted into a healthy run, so
    # what a damaged run does with it is seen (refused, or its report saying what is damaged)
    ("import nccl-debug --into, this machine's log", ["import", "nccl-debug", "{seedlog}", "--into", "{r}"],
     "flag", False),
]

#: Whole run folders that are not run folders.
FOLDER_KINDS = ("empty folder", "a file", "missing", "loop", "/dev/null", "fifo", "an import (nccl-tests)",
                "a kernel-log import")


def _folder_setup(kind: str, work: Path):
    def setup(c: Path):
        r = c / "run"
        if kind == "empty folder":
            r.mkdir()
        elif kind == "a file":
            r.write_text("x\n")
        elif kind == "loop":
            r.symlink_to(r)
        elif kind == "/dev/null":
            r.symlink_to("/dev/null")
        elif kind == "fifo":
            os.mkfifo(r)
        elif kind == "an import (nccl-tests)":
            shutil.copytree(work / "imp-nccl", r, symlinks=True)
        elif kind == "a kernel-log import":
            shutil.copytree(work / "imp-klog", r, symlinks=True)
    return setup


def _damaged_setup(work: Path, damage: Callable[[Path], None]):
    def setup(c: Path):
        shutil.copytree(work / "good", c / "run", symlinks=True)
        damage(c / "run")
    return setup


QUICK_DAMAGES = {"run.json missing", "run.json status running", "measurements cut mid-line", "numerics missing",
                 "topology of another machine", "measurements samples NaN", "events a crash on 0,1", "only run.json"}


def run_cases(work: Path) -> List[Case]:
    from cli_sweep_cases import FIX

    cases = []
    for name, argv, expect, quick in RUN_READERS:
        def fill(a: str) -> str:
            return (a.replace("{r}", "{c}/run").replace("{fix}", str(FIX["ndebug"]))
                    .replace("{seedlog}", str(REPO / "examples" / "nccl-debug-seed-8gpu.log")))
        # the nccl-debug fixture is another machine's log: refused into any run here, healthy or not
        cases.append(Case("run", f"{name} <healthy>", [fill(a) for a in argv],
                          "any" if "{fix}" in argv else "ok",
                          setup=_damaged_setup(work, lambda r: None), quick=quick))
        for dname, (damage, may_pass) in damages(work).items():
            exp = "any" if may_pass else expect
            if dname == "events a crash on 0,1" and expect != "refuse":
                exp = "any"  # a crash is a finding, not damage: a gate fails it, the others show it
            timeout = 120.0 if "resume" in name else 60.0
            cases.append(Case("run", f"{name} <{dname}>", [fill(a) for a in argv], exp,
                              setup=_damaged_setup(work, damage), timeout=timeout,
                              quick=quick and dname in QUICK_DAMAGES))
        for kind in FOLDER_KINDS:
            # an import is a run folder (a baseline, a diff side); only --resume must refuse it
            exp = "any" if kind == "a kernel-log import" or (kind.startswith("an import") and "resume" not in name) \
                else "refuse"
            cases.append(Case("run", f"{name} <folder: {kind}>", [fill(a) for a in argv], exp,
                              setup=_folder_setup(kind, work), quick=quick and kind in ("fifo", "an import (nccl-tests)")))
    return cases
