"""Issue 18, wrong verdicts: values no machine can have, and spec tables that cannot apply,
are refused with one line and exit 2 (or, for an imported nccl-tests row, dropped as invalid
data so no gate passes on it). Run as a user runs it (the command's entry point)."""

from __future__ import annotations

import json

import pytest

from conftest_report import write_run
from helpers.cli import gputopo_here
from helpers.paths import REPO

FIXTURES = REPO / "tests" / "fixtures"


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    """Commands that write a default folder (reports/) write it under the test's tmp_path."""
    monkeypatch.chdir(tmp_path)


def refused(proc, *words) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-500:], proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def test_a_cluster_spec_on_a_bench_run_is_refused(tmp_path):
    run = write_run(tmp_path / "run", ())
    spec = tmp_path / "c.toml"
    spec.write_text('name = "fleet"\n[cluster]\nnodes_alike = true\n')
    refused(gputopo_here("check", "--spec", spec, run), "[cluster]", "not one")


def test_a_cluster_spec_is_refused_before_measuring_a_bench(tmp_path):
    spec = tmp_path / "c.toml"
    spec.write_text('name = "fleet"\n[cluster]\nnodes_alike = true\n')
    refused(gputopo_here("check", "--spec", spec, "--sim", "seed-8gpu", "--out", tmp_path / "r"), "[cluster]")
    assert not (tmp_path / "r").exists()


CLUSTER = 'name = "c"\n[cluster]\nnodes = 8\nnode = "pcie-4gpu"\n'


def test_a_node_fault_outside_cluster_fault_is_refused(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text(CLUSTER.replace('name = "c"\n', 'name = "c"\n[[fault]]\nwhere = "node:6"\nwhat = "slow"\n'))
    refused(gputopo_here("cluster", "--sim", f), "[[cluster.fault]]")


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_cluster_link_rate_that_is_no_number_is_refused(tmp_path, value):
    f = tmp_path / "c.toml"
    f.write_text(CLUSTER + f"[cluster.link]\ngbps = {value}\n")
    refused(gputopo_here("cluster", "--sim", f), "cluster.link.gbps")


@pytest.mark.parametrize("args", [["--gbps", "nan"], ["--gbps", "inf"], ["--timeout", "inf"],
                                  ["--timeout", "nan"], ["--slow-below", "nan"]])
def test_cluster_plan_refuses_non_finite_numbers(args):
    refused(gputopo_here("cluster", "--plan", "--nodes", "4", *args), args[0])


def test_an_absurd_cpu_affinity_in_a_description_is_refused(tmp_path):
    f = tmp_path / "m.toml"
    f.write_text('name = "m"\nnvswitch = true\n[defaults]\nname = "NVIDIA H100 80GB HBM3"\n'
                 '[[gpu]]\ncpu_affinity = "0-99999999"\n[[gpu]]\n')
    refused(gputopo_here("scan", "--sim", f), "99999999")


@pytest.mark.parametrize("old,new,word", [("24-47,72-95     1", "0-99999999      1", "CPU Affinity"),
                                          ("24-47,72-95     1", "24-47,72-95     99999", "NUMA Affinity")])
def test_absurd_affinities_in_smi_text_are_refused(tmp_path, old, new, word):
    text = (FIXTURES / "topo" / "autodl_2x2080ti_pix.txt").read_text()
    assert old in text
    f = tmp_path / "topo.txt"
    f.write_text(text.replace(old, new))
    refused(gputopo_here("scan", "--from-smi", f), word)


def test_an_impossible_nccl_tests_row_is_invalid_data_and_fails_a_gate(tmp_path):
    """algbw must be size / time: a row claiming 9.17 GB/s for 2 KiB in 11.83 us is no
    measurement; it is dropped, said, and no gate passes."""
    text = (FIXTURES / "nccl-tests" / "autodl_2x2080ti_all_reduce.txt").read_text()
    row = "2048           512     float     sum      -1    11.83    0.17    0.17"
    assert row in text
    log = tmp_path / "all_reduce.txt"
    log.write_text(text.replace(row, row.replace("0.17    0.17", "9.17    9.17")))
    run = tmp_path / "imp"
    proc = gputopo_here("import", "nccl-tests", log, "--out", run)
    assert proc.returncode in (0, 1), proc.stderr
    doc = json.loads((run / "imported.json").read_text())
    problems = [p for lg in doc["imports"] if lg["tool"] in ("nccl-tests", "rccl-tests") for p in lg.get("problems") or []]
    assert any("impossible values" in p and "algbw 9.17" in p for p in problems), problems
    report = gputopo_here("report", run, "--json")
    kinds = {f["kind"] for f in json.loads(report.stdout)["findings"]}
    assert "invalid-data" in kinds
    spec = tmp_path / "s.toml"
    spec.write_text('name = "s"\n[integrity]\nno_corruption = true\n')
    assert gputopo_here("check", "--spec", spec, run).returncode == 1
