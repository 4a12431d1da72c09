"""The registry of rules (gputopo/report/rules.py): each rule declares the facts it reads and the
kinds it makes, one loop runs them for a run folder (bench or import), a scan, an NCCL_DEBUG log
and a cluster run, and a rule registered there is run with no other edit."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest_report import ALL_FAULTS, seed_topology, write_run
from gputopo.model import Finding
from gputopo.model.finding_kinds import KIND_TABLE, is_culprit, is_history_kind
from gputopo.report import rules
from gputopo.report.analysis import analyze
from gputopo.report.rules import FACTS, RULES, Facts, Rule, judge
from gputopo.report.run_folder import load_run
from gputopo.report.topology_checks import topology_findings
from helpers.cli import gputopo_here
from helpers.paths import REPO

FIXTURES = REPO / "tests" / "fixtures"
#: Imports whose run folders hold the facts of the import rules (failures, problems, perftest, peer
#: access, a GPU slow without --topo, nccl-tests out of bounds, a kernel log's driver lines).
IMPORTS = [
    ("nvbandwidth", "nvbandwidth/nvbandwidth-34_8xa100_d2d_read_ce_pattern-check-failed_v0.7.txt"),
    ("p2pbw", "p2pbw/sushruta-blog_4xa100-80gb-pcie_nv12-pairs_cannot-access-across.txt"),
    ("p2pbw", "p2pbw/tinygrad-16_7x4090_large-bar-off_gpu6-2.8GBps_cuda-failure-mapping-buffer_excerpt.txt"),
    ("perftest", "perftest/perftest-273_roce_ib-write-bw_post-list_gbits_8B-messages.txt"),
    ("nccl-tests", "nccl-tests/nccl-tests-37_8xv100_all_gather_no-hash_oob-failed.txt"),
    ("kernel-log", "xid/open-gpu-kernel-modules-789_rtx3090_dmesg_rminitadapter-failed_gsp_gfw-boot_excerpt.txt"),
]


def test_every_rule_reads_known_facts_and_makes_table_kinds():
    names = [r.name for r in RULES]
    assert len(set(names)) == len(names)
    made = {k for r in RULES for k in r.makes}
    # every kind is made by a rule, or is a culprit (the "why") or judged against the history
    assert [k.name for k in KIND_TABLE if k.name not in made and not is_culprit(k.name)
            and not is_history_kind(k.name)] == []
    assert {f for r in RULES for f in r.reads} <= set(FACTS)
    with pytest.raises(ValueError, match="unknown facts"):
        Rule("x", ("gossip",), ("slow",), ("run",), "data", lambda facts: [])
    with pytest.raises(ValueError, match="a kind not in the kind table"):
        Rule("x", ("topology",), ("made-up",), ("run",), "data", lambda facts: [])


def _check_run(run_dir: Path) -> set:
    run = load_run(run_dir)
    trace: dict = {}
    from gputopo.report.headline import headlines

    found = judge("run", Facts(topology=run.topology, run=run, headlines=headlines(run.measurements, run.topology)),
                  trace=trace)
    by_name = {r.name: r for r in RULES}
    for name, fs in trace.items():
        assert {f.kind for f in fs} <= set(by_name[name].makes), name
    assert sorted(map(_key, found)) == sorted(_key(f) for fs in trace.values() for f in fs)
    # the report's findings are the rules' and the culprits' (no rule is called by hand besides)
    judged = analyze(run).findings
    assert {_key(f) for f in judged if not is_culprit(f.kind)} == {_key(f) for f in found}
    return {name for name, fs in trace.items() if fs}


def _key(f: Finding):
    return (f.kind, f.severity, tuple(f.gpus or ()), f.message)


def test_a_bench_run_and_imports_of_each_tool_go_through_the_one_loop(tmp_path):
    fired = _check_run(write_run(tmp_path / "bench", ALL_FAULTS))
    assert {"scan-checks", "wrong-data", "numerics", "slow", "staged-faster", "steps-not-finished"} <= fired
    for k, (tool, rel) in enumerate(IMPORTS):
        out = tmp_path / f"import{k}"
        ran = gputopo_here("import", tool, str(FIXTURES / rel), "--out", str(out), "--no-history", cwd=REPO,
                           env={"GPUTOPO_HISTORY": str(tmp_path / "h.sqlite")})
        assert ran.returncode in (0, 1), ran.stderr
        fired |= _check_run(out)
    assert {"import-failures", "import-problems", "import-shared-gpu", "perftest", "peer-access",
            "nccl-tests-out-of-bounds", "kernel-log"} <= fired


def test_a_scan_is_the_registry_run_on_a_topology_alone():
    topo = seed_topology(ALL_FAULTS)
    assert rules.scan_findings(topo) == topology_findings(topo) and len(topology_findings(topo)) >= 5


def test_a_registered_rule_runs_in_each_judgement_it_names(monkeypatch):
    def one(facts):
        return [Finding("thermal", "warning", "GPU 0: hot (a registered test rule)", gpus=[0])]

    extra = Rule("test-thermal", ("topology",), ("thermal",), ("scan", "cluster"), "scan", one)
    monkeypatch.setattr(rules, "RULES", RULES + (extra,))
    topo = seed_topology()
    assert [f.message for f in rules.scan_findings(topo)][-1] == "GPU 0: hot (a registered test rule)"
    assert judge("nccl-debug", Facts(nccl_debug={}, topology=topo)) == []
