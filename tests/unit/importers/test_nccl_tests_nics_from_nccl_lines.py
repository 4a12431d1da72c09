"""Issue 47 item 7 (its leftover): without --nics, a job across hosts whose output holds NCCL's
INFO lines is judged against the NICs NCCL says it used ('NET/IB : Using', only those counted)
at the rate NCCL's own lines state (NCCL >= 2.27's ``speed=`` in Mb/s, or the topology dump's
``+ NET[GB/s] - NET/<index>``), through report/network_floor.py's floor; without rates it stays
not-judged. Written variants of the posted nccl-tests issue 290 output (2 x 8 H100, busbw ~156
GB/s) with NCCL's lines added; the posted output itself holds none of them."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.cli import gputopo_here
from helpers.paths import FIXTURES

NCCL_290 = FIXTURES / "nccl-tests" / "nccl-tests-290_2x8xh100-ndr_all_reduce_srun-label_validation0_155GBps-low.txt"
HOSTS = (("node005:291005:291100", 5), ("node007:541703:541800", 7))


def _variant(tmp_path: Path, ports, rate: str, hosts=HOSTS) -> Path:
    lines = NCCL_290.read_text().splitlines(keepends=True)
    net = []
    for host, n in hosts:
        using = " ".join(f"[{i}]{d}:1/IB" for i, d in enumerate(ports))
        net.append(f" 0: {host} [0] NCCL INFO NET/IB : Using {using} ; OOB ibs3:10.0.0.{n}<0>\n")
        for i, d in enumerate(ports):
            if rate == "speed":  # NCCL 2.27's line (src/transport/net_ib.cc)
                net.append(f" 0: {host} [0] NCCL INFO NET/IB: [{i}] {d}:uverbs{i}:1/IB provider=Mlx5 speed=400000 "
                           "context=0x1 pciPath=/sys/x ar=0\n")
            elif rate == "topo":  # the topology dump (src/graph/topo.cc ncclTopoPrintRec), GB/s
                net.append(f" 0: {host} [0] NCCL INFO                 + NET[50.0] - NET/{i} (1/1/50.000000)\n")
    f = tmp_path / f"all_reduce_{rate}_{len(ports)}.txt"
    f.write_text("".join(lines[:19] + net + lines[19:]))
    return f


def _summary(tmp_path: Path, f: Path) -> dict:
    out = tmp_path / f"run_{f.stem}"
    rc, _stdout, err = gputopo_here("import", "nccl-tests", f, "--out", out, "--no-history")
    assert rc == 0, err
    return json.loads((out / "summary.json").read_text())


def test_the_ports_nccl_used_at_the_rate_it_states_are_the_floor(tmp_path):
    doc = _summary(tmp_path, _variant(tmp_path, ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5"], "speed"))
    assert doc["verdict"] == "ok" and not [x for x in doc["findings"] if x["kind"] == "slow"]
    for head in doc["headlines"]:
        basis = head["judged_basis"]
        assert basis["basis"] == "nics" and "4 x 400 Gb/s" in basis["text"] and "= 200 GB/s" in basis["text"]
        assert "NCCL INFO lines" in basis["text"] and "speed=" in basis["text"]


def test_eight_ports_from_the_topology_dump_make_156_gbps_a_warning(tmp_path):
    ports = [f"mlx5_{i}" for i in range(8)]
    doc = _summary(tmp_path, _variant(tmp_path, ports, "topo"))
    assert doc["verdict"] == "degraded"
    (slow,) = [x for x in doc["findings"] if x["kind"] == "slow"]
    assert slow["severity"] == "warning" and slow["evidence"]["basis"] == "nics" and "8 x 400 Gb/s" in slow["message"]
    assert "GPU pair" not in slow["message"]


def test_without_rates_or_a_host_it_stays_not_judged(tmp_path):
    doc = _summary(tmp_path, _variant(tmp_path, ["mlx5_0", "mlx5_1"], "none"))
    assert doc["verdict"] == "not-judged"
    doc = _summary(tmp_path, _variant(tmp_path, ["mlx5_0", "mlx5_1"], "speed", hosts=HOSTS[:1]))
    assert doc["verdict"] == "not-judged"  # node007 names no port: not a floor for the job
