"""Bad input to bench, sims and diff, as a user types it: one line, exit 2, nothing left behind,
and no advice that does not fit (the issue-10 sweep)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest_report import seed_topology, write_run
from helpers.cli import gputopo, gputopo_here
from helpers.paths import REPO



def test_fabric_cuda_with_a_simulated_machine_is_refused_before_any_run_folder(tmp_path):
    rc, out, err = gputopo_here("bench", "--fabric", "cuda", "--sim", "seed-8gpu", "--quick", cwd=tmp_path)
    assert rc == 2 and out == ""
    assert err.startswith("gputopo: error: --fabric cuda measures this machine's real GPUs, but --sim "
                          "seed-8gpu is a simulated machine") and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # no reports/ folder, no junk run folder


def test_out_on_a_folder_that_is_not_a_run_does_not_suggest_resume(tmp_path):
    from gputopo.runfolder.writer import claim_out_dir
    from gputopo.errors import UsageError

    other = tmp_path / "photos"
    other.mkdir()
    (other / "cat.jpg").write_text("meow")
    with pytest.raises(UsageError) as e:
        claim_out_dir(other)
    assert "not a run folder" in str(e.value) and "--resume" not in str(e.value)
    run = write_run(tmp_path / "run", [])
    with pytest.raises(UsageError, match=f"holds a run already \\(use --resume {run} to continue it"):
        claim_out_dir(run)
    assert claim_out_dir(tmp_path / "new").is_dir()


@pytest.mark.parametrize("n", [0, 1025, 99999])
def test_synthetic_machine_size_out_of_range_states_the_range(n):
    from gputopo.errors import UsageError
    from gputopo.sim.description import load_description

    with pytest.raises(UsageError, match=f"a synthetic machine has 1 to 1024 GPUs, not {n}"):
        load_description(f"synthetic-{n}gpu")
    assert len(load_description("synthetic-3gpu").gpus) == 3


def test_sims_lists_the_synthetic_machines_with_their_range():
    rc, out, _ = gputopo_here("sims", cwd=REPO)
    assert rc == 0
    line = next(x for x in out.splitlines() if x.startswith("synthetic-<N>gpu"))
    assert "N = 1..1024" in line
    rc, _, err = gputopo_here("scan", "--sim", "nosuch", cwd=REPO)
    assert rc == 2 and "synthetic-<N>gpu (N GPUs, N = 1..1024" in err


def test_diff_of_two_different_machines_says_so(tmp_path):
    from gputopo.report.diff import diff_runs

    a = write_run(tmp_path / "a", [])
    b = write_run(tmp_path / "b", [])
    same = diff_runs(a, b)
    assert same.machine_differences == [] and "DIFFERENT MACHINES" not in same.text()
    topo = seed_topology()
    for g in topo.gpus:
        g.name = "NVIDIA H100 80GB HBM3"
        g.uuid = "GPU-" + g.uuid[4:].replace("0", "9")
    topo.host.hostname = "other-node"
    c = write_run(tmp_path / "c", [], topo=topo)
    d = diff_runs(a, c)
    assert "host seed vs other-node" in d.machine_differences
    assert "GPUs 8 x NVIDIA A100-SXM4-40GB vs 8 x NVIDIA H100 80GB HBM3" in d.machine_differences
    assert d.text().splitlines()[2].startswith("DIFFERENT MACHINES: ")
    assert d.to_json()["same_machine"] is False
    rc, out, _ = gputopo_here("diff", a, c, "--json", cwd=REPO)
    assert json.loads(out)["machine_differences"] == d.machine_differences


def test_scan_problems_wrap_under_their_message_not_at_column_0():
    import io

    from rich.console import Console

    from gputopo.model import Finding
    from gputopo.report.scan_view import render_problems

    buf = io.StringIO()
    f = Finding("iommu", "warning", "the IOMMU translates DMA: PCIe peer-to-peer copies between GPUs can be "
                                    "silently corrupted or fail; this is the known cause of DataParallel NaN")
    render_problems(Console(file=buf, width=70, color_system=None), [f])
    lines = buf.getvalue().splitlines()
    assert lines[1].startswith("  WARNING iommu            [host] the IOMMU")
    indent = lines[1].index("[host]")
    assert len(lines) > 3
    for line in lines[2:]:
        assert line.startswith(" " * indent) and line[indent] != " " and len(line) <= 70, line


# ---------------------------------------------------------------------------------------------
# The issue-18 sweep: every command that reads a file or a folder the user names, given every
# kind of thing that is not a good file, and the numeric options given values no one means.
# Each case: no rc 4, no traceback, at most one line on stderr when it fails, and no hang (a
# subprocess timeout). Cases run four at a time (each CLI start is ~0.2 s without torch).

_KINDS = ("regular", "empty", "binary", "devzero", "fifo", "folder", "missing", "unreadable", "loop")


def _make_kind(base: Path, kind: str) -> Path:
    p = base / f"in-{kind}"
    if kind == "regular":
        p.write_text("hello = 1\nthis is not what any gputopo input looks like\n")
    elif kind == "empty":
        p.write_bytes(b"")
    elif kind == "binary":
        p.write_bytes(bytes(range(256)) * 8)
    elif kind == "devzero":
        p.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(p)
    elif kind == "folder":
        p.mkdir()
    elif kind == "unreadable":
        p.write_text("name = 'x'\n")
        p.chmod(0)
    elif kind == "loop":
        p.symlink_to(p)
    return p


_FILE_ARGS = [  # {f}: the input under test
    ("scan", "--sim", "{f}"), ("scan", "--from-smi", "{f}"), ("place", "2", "--sim", "{f}"),
    ("bench", "--sim", "{f}", "--quick"), ("numerics", "--sim", "{f}"), ("cluster", "--sim", "{f}"),
    ("check", "{run}", "--spec", "{f}"), ("import", "nccl-tests", "{f}"), ("import", "nccl-debug", "{f}"),
    ("import", "nccl-tests", "--topo", "{f}", "{log}"),
]
_FOLDER_ARGS = [  # {f}: a run folder under test
    ("report", "{f}"), ("diff", "{f}", "{run}"), ("diff", "{run}", "{f}"), ("place", "2", "--from", "{f}"),
    ("bench", "--resume", "{f}"), ("check", "{f}", "--spec", "pcie-box"),
    ("check", "--init", "--from", "{f}", "--spec", "{out}/spec.toml"),
    ("check", "{run}", "--spec", "pcie-box", "--junit", "{f}"),
]


def _sweep(cases, tmp_path):
    """Run every argv; return the cases that broke the rules (empty when all is well)."""
    from concurrent.futures import ThreadPoolExecutor

    def one(argv):
        try:
            rc, _, err = gputopo(*argv, cwd=tmp_path, timeout=120, env={"GPUTOPO_INPUT_WAIT": "1"})
        except subprocess.TimeoutExpired:
            return (argv, "hang")
        lines = err.strip().splitlines()
        if rc == 4 or "Traceback" in err or "internal error" in err:
            return (argv, f"rc {rc}: {err[-300:]}")
        if rc != 0 and len(lines) != 1:
            return (argv, f"rc {rc} with {len(lines)} stderr lines: {err[-300:]}")
        return None

    with ThreadPoolExecutor(max_workers=4) as pool:
        return [bad for bad in pool.map(one, cases) if bad]


def _short(argv):
    return [str(a)[:80] for a in argv]


@pytest.mark.slow
def test_sweep_every_input_file_kind_through_every_command_that_reads_one(tmp_path):
    if os.geteuid() == 0:
        kinds = [k for k in _KINDS if k != "unreadable"]  # root reads a mode-000 file anyway
    else:
        kinds = list(_KINDS)
    run = write_run(tmp_path / "good-run", [])
    log = REPO / "tests/fixtures/nccl-tests/autodl_2x2080ti_all_reduce.txt"
    (tmp_path / "out").mkdir()
    cases = []
    for kind in kinds:
        f = _make_kind(tmp_path, kind)
        for argv in _FILE_ARGS + _FOLDER_ARGS:
            cases.append(tuple(str(a).replace("{f}", str(f)).replace("{run}", str(run))
                               .replace("{log}", str(log)).replace("{out}", str(tmp_path / "out"))
                               for a in argv))
    bad = _sweep(cases, tmp_path)
    assert not bad, "\n".join(f"{_short(a)}: {why}" for a, why in bad)


_BIG = "9" * 5000
_VALUES = ("", "nan", "inf", "-1", "0", _BIG, "1\x1b[31m", "0,0")
_VALUE_ARGS = [  # {v}: the value under test; every base command is refused or fast
    ("place", "{v}", "--sim", "seed-8gpu"), ("place", "2", "--exclude", "{v}", "--sim", "seed-8gpu"),
    ("place", "2", "--top", "{v}", "--sim", "seed-8gpu"),
    ("diff", "{run}", "{run}", "--threshold", "{v}"),
    ("cluster", "--plan", "--nodes", "{v}"), ("cluster", "--plan", "--nodes", "8", "--gbps", "{v}"),
    ("cluster", "--plan", "--nodes", "8", "--size", "{v}"), ("cluster", "--plan", "--nodes", "8", "--samples", "{v}"),
    ("bench", "--sim", "seed-8gpu", "--pairs", "{v}", "--resume", "{run}"),
    ("bench", "--sim", "seed-8gpu", "--gpus", "{v}", "--class", "NV9"),
    ("bench", "--sim", "seed-8gpu", "--pairs", "0,1", "--timeout", "{v}", "--class", "NV9"),
    ("bench", "--sim", "seed-8gpu", "--pairs", "0,1", "--sizes", "{v}", "--class", "NV9"),
    ("bench", "--fabric", "cpu", "--cpu-gpus", "{v}", "--class", "NV9"),
    ("check", "--init", "--from", "{run}", "--margin", "{v}", "--spec", "{out}/s.toml"),
    ("numerics", "--sim", "seed-8gpu", "--pairs", "0,1", "--steps", "{v}", "--class", "NV9"),
]


@pytest.mark.slow
def test_sweep_odd_values_through_the_numeric_options(tmp_path):
    run = write_run(tmp_path / "good-run", [])
    (tmp_path / "out").mkdir()
    cases = [tuple(a.replace("{v}", v).replace("{run}", str(run)).replace("{out}", str(tmp_path / "out"))
                   for a in argv) for argv in _VALUE_ARGS for v in _VALUES]
    bad = _sweep(cases, tmp_path)
    assert not bad, "\n".join(f"{_short(a)}: {why}" for a, why in bad)
