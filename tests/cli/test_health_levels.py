"""`gputopo health --level quick|pairs` on simulated machines whose GPUs run processes (sim key
``processes``): gate measures the idle GPUs only, the GPUs a job uses are not judged: in use, and
what gate finds there is health's finding. (health starts gate as a process: slow.)"""

import json

import pytest

from helpers.cli import gputopo_here

pytestmark = pytest.mark.slow

#: seed-8gpu (IOMMU translating: every PCIe pair's peer copies corrupt) with a job on every GPU
#: but 1 and 2, a PCIe pair: only it is measured, and it corrupts.
BUSY = ('extends = "seed-8gpu"\nname = "seed-busy"\n'
        + "".join("[[gpu]]\n" + (f"processes = [{100 + g}]\n" if g not in (1, 2) else "") for g in range(8)))


def _health(tmp_path, level, *more):
    sim = tmp_path / "busy.toml"
    sim.write_text(BUSY)
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    (state / "gate-last.json").write_text('{"command": "gate", "verdict": "pass", "time": "T"}')
    r = gputopo_here("health", "--sim", sim, "--level", level, "--no-history", "--state-dir", state,
                     "--budget", "120", *more, timeout=300)
    return r, state


def test_quick_measures_only_the_idle_gpus_and_says_the_others_in_use(tmp_path):
    r, state = _health(tmp_path, "quick")
    doc = json.loads(r.stdout)
    assert r.returncode == 1 and doc["verdict"] == "fail" and doc["level"] == "quick"
    copies = next(c for c in doc["checks"] if c["name"] == "copies")
    assert copies["status"] == "fail" and copies["basis"].startswith("gate --measure copy on idle GPUs 1,2: fail")
    for g in (0, 3, 4, 5, 6, 7):
        assert f"GPU {g} not judged: in use by pid {100 + g}" in copies["basis"]
    assert [(f["kind"], f["gpus"]) for f in copies["findings"]] == [("corrupt", [1, 2])]
    assert doc["reason"].startswith("gputopo: corrupt gpus1-2 ")
    # gate's own kept verdict (the Prolog's) is not overwritten by the gate health ran
    assert json.loads((state / "gate-last.json").read_text()) == {"command": "gate", "verdict": "pass", "time": "T"}


def test_pairs_adds_gates_all_reduce_over_the_idle_gpus_only(tmp_path):
    r, _ = _health(tmp_path, "pairs")
    doc = json.loads(r.stdout)
    assert r.returncode == 1 and doc["level"] == "pairs"
    check = next(c for c in doc["checks"] if c["name"] == "allreduce")
    assert check["basis"].startswith("gate --measure copy+allreduce on idle GPUs 1,2: ")
    assert "GPU 0 not judged: in use by pid 100" in check["basis"]
    assert ("corrupt", [1, 2]) in [(f["kind"], f["gpus"]) for f in check["findings"]]
