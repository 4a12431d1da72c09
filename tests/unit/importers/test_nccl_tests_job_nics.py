"""A job across hosts is judged against what its NICs carry (issue 47 item 7): `import nccl-tests
--nics [HOST=]FILE` (each host's ibstat / ibv_devinfo text or `gputopo scan --json`), the series'
judged basis ``nics`` (report/network_floor.py), a warning under half of it, and never a GPU pair."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.cli import gputopo_here
from helpers.paths import FIXTURES

NCCL_290 = FIXTURES / "nccl-tests" / "nccl-tests-290_2x8xh100-ndr_all_reduce_srun-label_validation0_155GBps-low.txt"
# posted ibstat texts: 8x ConnectX-7 400G IB (+ a 200G Ethernet bond); 8x HDR 200G IB (+ a 40G port)
NDR_8 = FIXTURES / "ibstat" / "gpud-testdata_h100_8x-cx7-400g-ib_bluefield3-bond-200g-eth_all-active.txt"
HDR_8 = FIXTURES / "ibstat" / "gpud-testdata_ibstatus_a100_8x-hdr-200g-ib_mlx5_8-40g-ethernet.txt"
ONE_HOST = FIXTURES / "nccl-tests" / "autodl_2x2080ti_all_reduce.txt"


def _import(tmp_path: Path, *extra) -> tuple[int, str, str, dict]:
    out = tmp_path / "run"
    rc, stdout, err = gputopo_here("import", "nccl-tests", NCCL_290, "--out", out, "--no-history", *extra)
    doc = json.loads((out / "summary.json").read_text()) if rc == 0 else {}
    return rc, stdout, err, doc


def test_two_nodes_at_40_percent_of_their_8_ndr_nics_is_a_warning_judged_against_the_nics(tmp_path):
    """nccl-tests issue 290 (busbw ~156 GB/s, 8x NDR 400G per node): the old code had no --nics
    option and said not-judged."""
    rc, out, err, doc = _import(tmp_path, "--nics", NDR_8)
    assert rc == 0, err
    assert doc["verdict"] == "degraded"
    (slow,) = [f for f in doc["findings"] if f["kind"] == "slow"]
    assert slow["severity"] == "warning" and slow["evidence"]["basis"] == "nics"
    # 8 ports at 400 Gb/s counted per host (the 200G Ethernet bond is not the job's): 400 GB/s
    assert slow["evidence"]["measured"][0]["expected_gbps"] == 400
    assert "39%" in slow["message"] and "node005, node007" in slow["message"]
    assert "8 x 400 Gb/s" in slow["message"]
    assert "GPU pair" not in slow["message"] and "(?)" not in slow["message"]
    assert doc["headlines"] and {h["judged_basis"]["basis"] for h in doc["headlines"]} == {"nics"}
    assert doc["judged"]["bases"] == {"nics": len(doc["headlines"])}
    assert "WARNING" in out


def test_above_half_of_the_nics_is_judged_and_not_a_warning(tmp_path):
    """8x HDR 200G = 200 GB/s: 156 GB/s is 78 % of the floor, judged (ok), not slow."""
    rc, out, err, doc = _import(tmp_path, "--nics", HDR_8)
    assert rc == 0, err
    assert not [f for f in doc["findings"] if f["kind"] == "slow"]
    assert doc["verdict"] == "ok" and doc["judged"]["bases"] == {"nics": len(doc["headlines"])}
    assert "judged against what the job's NICs carry" in out


def test_each_host_named(tmp_path):
    """HOST=FILE per host: the slowest host's NICs are the job's floor."""
    rc, out, err, doc = _import(tmp_path, "--nics", f"node005={NDR_8}", "--nics", f"node007={HDR_8}")
    assert rc == 0, err
    for head in doc["headlines"]:
        assert head["judged_basis"]["basis"] == "nics" and "200 GB/s" in head["judged_basis"]["text"]
    assert doc["verdict"] == "ok"


def test_without_nics_a_job_across_hosts_stays_not_judged(tmp_path):
    rc, _, err, doc = _import(tmp_path)
    assert rc == 0, err
    assert doc["verdict"] == "not-judged"


def test_bad_nics_options_are_one_line_exit_2(tmp_path):
    for extra in (["--nics", f"node999={NDR_8}"],                          # not a host of the job
                  ["--nics", f"node005={NDR_8}"],                          # node007 left without NICs
                  ["--nics", f"node005={NDR_8}", "--nics", f"node005={NDR_8}"],
                  ["--nics", str(NCCL_290)]):                              # not ibstat text
        rc, out, err, _ = _import(tmp_path, *extra)
        assert rc == 2, (extra, out, err)
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    rc, _, err = gputopo_here("import", "nccl-tests", ONE_HOST, "--out", tmp_path / "one", "--no-history",
                              "--nics", NDR_8)
    assert rc == 2 and "across hosts" in err


def test_help_says_the_syntax():
    rc, out, _ = gputopo_here("import", "nccl-tests", "--help")
    assert rc == 0 and "--nics [HOST=]FILE" in out and "ibstat" in out and "scan --json" in out


def _scan_json(tmp_path: Path, simulated: bool) -> Path:
    """`gputopo scan --json` of the simulated DGX H100 (8x ConnectX-7 400G); WRITTEN as a real
    host's where ``simulated`` is False (the flag cleared)."""
    rc, out, err = gputopo_here("scan", "--sim", "dgx-h100", "--json")
    assert rc in (0, 1), err
    doc = json.loads(out)
    doc["simulated"] = simulated
    f = tmp_path / ("scan-sim.json" if simulated else "scan.json")
    f.write_text(json.dumps(doc))
    return f


def test_a_scan_json_per_host_gives_the_nics(tmp_path):
    scan = _scan_json(tmp_path, simulated=False)
    rc, out, err, doc = _import(tmp_path, "--nics", f"node005={scan}", "--nics", f"node007={scan}")
    assert rc == 0, err
    (slow,) = [f for f in doc["findings"] if f["kind"] == "slow"]
    assert slow["evidence"]["basis"] == "nics" and "8 x 400 Gb/s" in slow["message"]
    assert "scan.json; at most one NIC" in slow["message"] and "/sys/" not in slow["message"]  # the file given


def test_a_simulated_scan_is_refused_as_nics(tmp_path):
    scan = _scan_json(tmp_path, simulated=True)
    rc, _, err, _ = _import(tmp_path, "--nics", str(scan))
    assert rc == 2 and "SIMULATED" in err and "Traceback" not in err


def test_only_the_nics_nccl_says_it_used_are_counted(tmp_path):
    """Written variant of the issue 290 output with NCCL's INFO lines kept: each host's 'NET/IB :
    Using' names 4 of its 8 NDR ports, so the job's NICs carry 4 x 400 Gb/s = 200 GB/s and its
    156 GB/s (78 %) is no warning; counting every NIC of the host (400 GB/s) would call it slow."""
    lines = NCCL_290.read_text().splitlines(keepends=True)
    using = "[0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_4:1/IB [3]mlx5_5:1/IB ; OOB ibs3:10.0.0.{n}<0>\n"
    net = [f" 0: node005:291005:291100 [0] NCCL INFO NET/IB : Using {using.format(n=5)}",
           f" 0: node007:541703:541800 [0] NCCL INFO NET/IB : Using {using.format(n=7)}"]
    f = tmp_path / "all_reduce_with_info.txt"
    f.write_text("".join(lines[:19] + net + lines[19:]))
    out = tmp_path / "run"
    rc, stdout, err = gputopo_here("import", "nccl-tests", f, "--out", out, "--no-history", "--nics", NDR_8)
    assert rc == 0, err
    doc = json.loads((out / "summary.json").read_text())
    assert not [x for x in doc["findings"] if x["kind"] == "slow"]
    for head in doc["headlines"]:
        assert head["judged_basis"]["basis"] == "nics" and "4 x 400 Gb/s" in head["judged_basis"]["text"]
        assert "used per the log's NET/IB line" in head["judged_basis"]["text"]
