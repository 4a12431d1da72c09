"""`gputopo place N`: the best GPU sets by their worst pair, never a broken pair, with the
environment to use them; bad input exits 2 with one line."""

from __future__ import annotations

import json

import pytest

from conftest_report import measurements, write_run
from helpers.cli import gputopo_here


def test_seed_scan_place_2_is_an_nvlink_pair_and_dataparallel_only_there():
    code, out, _ = gputopo_here("place", "2", "--sim", "seed-8gpu")
    assert code == 0
    assert out.startswith("SIMULATED")
    assert "Best 2 GPUs: 0,1 (worst pair 0,1 NV4)" in out
    assert "export CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0,1" in out
    assert "CUDA_VISIBLE_DEVICES=GPU-4b141e30-85e4-976e-10d9-31f2336d70e1,GPU-cdf3f657" in out
    assert "NCCL: no settings needed" in out and "nn.DataParallel: safe on this set" in out
    assert "nn.DataParallel is safe only on NVLink pairs here (0,1 2,3 4,5 6,7)" in out


def test_seed_scan_place_4_needs_nccl_off_the_suspect_pcie_path():
    code, out, _ = gputopo_here("place", "4", "--sim", "seed-8gpu", "--json")
    doc = json.loads(out)
    best = doc["sets"][0]
    assert code == 0 and doc["simulated"] is True and doc["schema_version"]
    assert best["gpus"] == [0, 1, 2, 3] and best["worst_link_class"] == "NODE"
    assert best["state"] == "p2p-broken" and best["dataparallel_safe"] is False
    assert best["env"]["NCCL_P2P_LEVEL"] == "NVL"  # NVLink pairs keep P2P, PCIe pairs go through the host


def test_exclude_is_honoured():
    code, out, _ = gputopo_here("place", "2", "--sim", "seed-8gpu", "--exclude", "0,2", "--exclude", "4",
                                "--json")
    sets = [s["gpus"] for s in json.loads(out)["sets"]]
    assert code == 0 and sets[0] == [6, 7] and all(not {0, 2, 4} & set(s) for s in sets)


def test_healthy_pcie_box_ranks_by_class():
    code, out, _ = gputopo_here("place", "2", "--sim", "pcie-4gpu", "--json", "--top", "6")
    doc = json.loads(out)
    # PIX 2-3 before PXB 0-1 before the SYS pairs; nothing is suspect on a healthy host
    assert [s["gpus"] for s in doc["sets"][:2]] == [[2, 3], [0, 1]]
    assert {s["state"] for s in doc["sets"]} == {"ok"} and len(doc["sets"]) == 6
    assert "NCCL_P2P_DISABLE" not in doc["sets"][0]["env"]


def test_from_run_uses_measured_bandwidth_and_skips_broken_pairs(tmp_path):
    ms = measurements(["slow-pair"])  # pair 0,2 (NODE) at 30 %
    for m in ms:  # GPU 5 corrupts on every path (staged copies too): never placed
        if 5 in m.gpus and m.test in ("p2p.copy", "p2p.staged"):
            m.wrong = 9
    run = write_run(tmp_path / "run", [], meas=ms, nums=[])
    code, out, _ = gputopo_here("place", "4", "--from", str(run), "--json", "--top", "10")
    doc = json.loads(out)
    assert code == 0 and "5" in doc["left_out"]
    assert all(5 not in s["gpus"] and not {0, 2} <= set(s["gpus"]) for s in doc["sets"][:3])
    best = doc["sets"][0]
    assert best["worst_gbps"] is not None and best["state"] == "ok"
    # measured order: the slow pair's sets come after every set without it
    with_slow = [k for k, s in enumerate(doc["sets"]) if {0, 2} <= set(s["gpus"])]
    without = [k for k, s in enumerate(doc["sets"]) if not {0, 2} <= set(s["gpus"])]
    assert not with_slow or max(without) < min(with_slow)


def test_from_seed_run_peer_only_corruption_needs_nccl_setting_and_ddp(tmp_path):
    run = write_run(tmp_path / "run", ["corrupt-sys", "iommu", "acs"])
    code, out, _ = gputopo_here("place", "6", "--from", str(run))
    assert code == 0
    assert "Best 6 GPUs:" in out and "NCCL_P2P_LEVEL=NVL" in out
    assert "nn.DataParallel: NOT safe on this set" in out
    assert "wrong data on raw peer copies, copies through host memory correct (measured)" in out


@pytest.mark.parametrize("args, words", [
    (["0", "--sim", "seed-8gpu"], "at least 1"),
    (["9", "--sim", "seed-8gpu"], "this machine has 8"),
    (["two", "--sim", "seed-8gpu"], "number of GPUs"),
    (["2", "--sim", "seed-8gpu", "--exclude", "8"], "no GPU 8"),
    (["8", "--sim", "seed-8gpu", "--exclude", "3"], "only 7 of 8"),
])
def test_bad_input_exits_2_with_one_line(args, words):
    code, out, err = gputopo_here("place", *args)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gputopo: error:") and words in lines[0]


def test_from_a_folder_that_is_not_a_run_exits_2(tmp_path):
    code, _, err = gputopo_here("place", "2", "--from", str(tmp_path))
    assert code == 2 and "not a run folder" in err and len(err.strip().splitlines()) == 1


def test_scan_states_leave_out_a_lost_gpu_and_degrade_pairs_over_downed_nvlinks():
    from conftest_report import seed_topology
    from gputopo.model.values import Failed
    from gputopo.report.placement import rank, scan_states
    from gputopo.report.topology_checks import topology_findings

    topo = seed_topology(["nvlink-down"])  # GPU 2 has one NVLink down (NV4 pair 2,3)
    topo.gpus[5].lost = Failed("GPU is lost")
    states, out_gpus = scan_states(topo, topology_findings(topo))
    assert 5 in out_gpus and states[(2, 3)].state == "degraded" and states[(0, 1)].state == "ok"
    ranked, _ = rank(topo, 2, states, out_gpus, set(), top=30)
    assert all(5 not in p.gpus for p in ranked) and len(ranked) == 21  # 7 GPUs left, every pair placeable
    assert [p.gpus for p in ranked[:2]] == [(0, 1), (6, 7)]
    degraded = [k for k, p in enumerate(ranked) if p.state == "degraded"]
    assert ranked[degraded[0]].gpus == (2, 3) and ranked[degraded[0]].dataparallel_safe
    assert min(degraded) > max(k for k, p in enumerate(ranked) if p.state == "ok")  # after every clean pair


def test_too_many_sets_are_grown_greedily_and_say_so():
    import math

    from gputopo.report.placement import MAX_SETS, rank, scan_states
    from gputopo.sim.description import generate_description
    from gputopo.sim.scan import scan_description

    topo = scan_description(generate_description(32))  # 4 sockets of 8 GPUs
    states, out_gpus = scan_states(topo, [])
    assert math.comb(32, 8) > MAX_SETS
    ranked, notes = rank(topo, 8, states, out_gpus, set(), top=3)
    assert notes and "greedily" in notes[0]
    best = ranked[0]
    assert len(best.gpus) == 8 and best.numa_nodes == 1  # one socket: no pair crosses the CPU interconnect
    assert best.worst_class != "SYS"


@pytest.mark.parametrize("damage, says", [
    ("cut", "measurements.jsonl: 1 of"),
    ("no-run-json", "no run.json"),
    ("running", "run.json says the run is running"),
])
def test_place_from_a_damaged_run_says_what_it_lacks_first(tmp_path, damage, says):
    """place --from ranked a damaged or unfinished run as if it were whole, silently (the sweep)."""
    run = write_run(tmp_path / "run", [], truncate_last=damage == "cut")
    if damage == "no-run-json":
        (run / "run.json").unlink()
    elif damage == "running":
        info = json.loads((run / "run.json").read_text())
        (run / "run.json").write_text(json.dumps({**info, "status": "running"}))
    code, out, _ = gputopo_here("place", "2", "--from", str(run))
    assert code == 0 and out.startswith("data: ") and says in out.splitlines()[0] + out.splitlines()[1], out
    code, out, _ = gputopo_here("place", "2", "--from", str(run), "--json")
    assert any(says in p for p in json.loads(out)["run_problems"])
    healthy = write_run(tmp_path / "healthy", [])
    code, out, _ = gputopo_here("place", "2", "--from", str(healthy), "--json")
    assert code == 0 and json.loads(out)["run_problems"] == []
