"""Bad input to bench, sims and diff, as a user types it: one line, exit 2, nothing left behind,
and no advice that does not fit (the issue-10 sweep)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest_report import seed_topology, write_run

REPO = Path(__file__).resolve().parents[1]


def gputopo(*args, cwd=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, "-m", "gputopo", *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=cwd or REPO, env=env)
    return proc.returncode, proc.stdout, proc.stderr


def test_fabric_cuda_with_a_simulated_machine_is_refused_before_any_run_folder(tmp_path):
    rc, out, err = gputopo("bench", "--fabric", "cuda", "--sim", "seed-8gpu", "--quick", cwd=tmp_path)
    assert rc == 2 and out == ""
    assert err.startswith("gputopo: error: --fabric cuda measures this machine's real GPUs, but --sim "
                          "seed-8gpu is a simulated machine") and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # no reports/ folder, no junk run folder


def test_out_on_a_folder_that_is_not_a_run_does_not_suggest_resume(tmp_path):
    from gputopo.bench.runlog import claim_out_dir
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
    rc, out, _ = gputopo("sims")
    assert rc == 0
    line = next(x for x in out.splitlines() if x.startswith("synthetic-<N>gpu"))
    assert "N = 1..1024" in line
    rc, _, err = gputopo("scan", "--sim", "nosuch")
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
    rc, out, _ = gputopo("diff", a, c, "--json")
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
