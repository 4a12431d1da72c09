"""gputopo cluster on simulated clusters: patterns, triangulation, findings, run folder, CLI."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gputopo.cli.main import cli, _register
from gputopo.cluster.job import ClusterOptions, run_sim_cluster
from gputopo.cluster.launch import first_host, launch_env
from gputopo.cluster.patterns import plan, random_pairs, round_robin, second_pass
from gputopo.errors import InputFileError, UsageError
from gputopo.sim.cluster_description import parse_cluster

_register()


def cluster(nodes, *faults, node="dgx-h100", extra=""):
    text = f'[cluster]\nnodes = {nodes}\nnode = "{node}"\n{extra}\n[cluster.link]\ngbps = 45\n'
    for f in faults:
        text += "[[cluster.fault]]\n" + "\n".join(f"{k} = {json.dumps(v)}" for k, v in f.items()) + "\n"
    return parse_cluster(text, "<test>")


def run(c, pattern="random2pass", tmp_path=None, **kw):
    opts = ClusterOptions(pattern=pattern, reports_dir=str(tmp_path or "reports"), **kw)
    return run_sim_cluster(c, opts, write=tmp_path is not None)


def kinds(res):
    return sorted((f.kind, f.evidence.get("node") or ",".join(f.evidence.get("nodes", []))) for f in res.findings)


# ----------------------------------------------------------------------------- patterns

@pytest.mark.parametrize("n", [2, 3, 7, 64, 65])
def test_random_pairs_cover_every_node_once(n):
    import random

    groups = random_pairs(range(n), random.Random(1))
    flat = [x for g in groups for x in g]
    assert sorted(flat) == list(range(n))
    assert all(len(g) in (2, 3) for g in groups) and sum(len(g) == 3 for g in groups) == n % 2


@pytest.mark.parametrize("n", [2, 5, 8])
def test_round_robin_is_every_pair_once_in_disjoint_rounds(n):
    rounds = round_robin(range(n))
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    pairs = [p for r in rounds for p in r]
    assert sorted(pairs) == [(i, j) for i in range(n) for j in range(i + 1, n)]
    for r in rounds:
        flat = [x for p in r for x in p]
        assert len(flat) == len(set(flat))


def test_second_pass_pairs_each_suspect_with_a_different_passer():
    import random

    rounds = second_pass([1, 2, 3], [7, 8], random.Random(0))
    assert len(rounds) == 2  # three suspects, two passers
    assert sorted(x for r in rounds for g in r for x in g if x in (1, 2, 3)) == [1, 2, 3]
    assert all(len({x for g in r for x in g}) == 2 * len(r) for r in rounds)


def test_plan_rounds():
    assert plan(1024, "random2pass", size_bytes=1 << 26, samples=5, gbps=45).rounds == 2
    assert plan(1024, "pairwise", size_bytes=1 << 26, samples=5, gbps=45).rounds == 1023
    assert plan(1024, "all", size_bytes=1 << 26, samples=5, gbps=45).rounds == 1
    with pytest.raises(UsageError):
        plan(1, "all", size_bytes=4, samples=1, gbps=1)


def test_plan_counts_each_samples_hold_before_its_gate():
    """A real cluster holds the stream before every sample's gate (dist_backend.HOLD_S): at a
    tiny message the estimate is the holds and the setup, not ~0."""
    from gputopo.cluster.dist_backend import HOLD_S
    from gputopo.cluster.patterns import SAMPLE_HOLD_S, SETUP_S

    assert SAMPLE_HOLD_S == HOLD_S
    est = plan(2, "all", size_bytes=4, samples=99, gbps=1e6, latency_us=0)
    # two measurements a round (all GPUs, one per node), each 100 samples with the warm-up
    assert est.round_s == pytest.approx(2 * (SETUP_S + 100 * HOLD_S), rel=1e-3)


# ----------------------------------------------------------------------------- finding the slow node

@pytest.mark.parametrize("nodes,bad", [(64, 37), (1024, 777)])
def test_slow_node_found_in_two_rounds(nodes, bad):
    res = run(cluster(nodes, {"where": f"node:{bad}", "what": "slow", "factor": 0.4}))
    assert kinds(res) == [("slow-node", f"node{bad:04d}")]
    assert res.rounds_inter == 2  # O(1) rounds, not O(N)


@pytest.mark.parametrize("pattern", ["random2pass", "pairwise"])
@pytest.mark.parametrize("nodes", [64, 33])
def test_healthy_cluster_has_no_findings(nodes, pattern):
    for seed in range(3):
        res = run(cluster(nodes), pattern, seed=seed)
        assert res.findings == [] and res.outcome.lost == []
    assert res.rounds_inter == (1 if pattern == "random2pass" else len(round_robin(range(nodes))))


def test_pairwise_tells_a_slow_link_from_a_slow_node():
    res = run(cluster(16, {"where": "node:5", "what": "slow", "factor": 0.4},
                      {"where": "pair:2,9", "what": "slow", "factor": 0.5}), "pairwise")
    assert kinds(res) == [("slow", "node0002,node0009"), ("slow-node", "node0005")]
    link = next(f for f in res.findings if f.kind == "slow")
    assert link.evidence["resolved"] is True


def test_random2pass_clears_both_ends_of_a_slow_link():
    # find a seed whose first round pairs nodes 2 and 9, then the second pass clears both
    import random

    seed = next(s for s in range(500) if (2, 9) in random_pairs(range(16), random.Random(s)))
    res = run(cluster(16, {"where": "pair:2,9", "what": "slow", "factor": 0.5}), seed=seed)
    assert kinds(res) == [("slow", "node0002,node0009")] and res.rounds_inter == 2


def test_link_down_and_driver_are_mismatches_by_host():
    res = run(cluster(8, {"where": "node:3", "what": "driver", "version": "999.1"},
                      {"where": "nodes:6", "what": "link_down", "nic": 2}), "pairwise")
    mism = {f.evidence["node"]: f for f in res.findings if f.kind == "topology-mismatch"}
    assert set(mism) == {"node0003", "node0006"}
    assert "driver" in mism["node0003"].evidence["differs"] and "nics" in mism["node0006"].evidence["differs"]
    # a NIC down halves the node's channels: it is also slow with every partner
    assert ("slow-node", "node0006") in kinds(res)


@pytest.mark.parametrize("what", ["hang", "crash"])
def test_lost_node_stops_the_run_and_is_named(what, tmp_path):
    res = run(cluster(8, {"where": "node:4", "what": what}), tmp_path=tmp_path, timeout_s=30)
    lost = [f for f in res.findings if f.kind == what]
    assert len(lost) == 1 and lost[0].evidence["node"] == "node0004"
    assert lost[0].evidence["ranks"] == list(range(32, 40))
    assert (res.run_dir / "drain.txt").read_text().startswith(f"node0004 gputopo: {what} node")
    assert json.loads((res.run_dir / "run.json").read_text())["status"] == "failed"
    assert res.doc["time_s"] >= 30  # the modeled timeout is counted


def test_odd_cluster_tests_every_node(tmp_path):
    res = run(cluster(7, {"where": "node:6", "what": "slow", "factor": 0.3}), tmp_path=tmp_path)
    assert ("slow-node", "node0006") in kinds(res)
    tested = {n for r in res.outcome.inter_rounds[:1] for g in r.groups for n in g.nodes}
    assert tested == set(range(7))


# ----------------------------------------------------------------------------- run folder, CLI, errors

def test_run_folder_and_cli(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('[cluster]\nnodes = 6\nnode = "pcie-4gpu"\n[[cluster.fault]]\nwhere = "node:1"\n'
                 'what = "slow"\nfactor = 0.3\n')
    out = tmp_path / "run"
    r = CliRunner().invoke(cli, ["cluster", "--sim", str(f), "--pattern", "pairwise", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "SIMULATED 6 nodes" in r.output and "5 inter-node round(s)" in r.output
    assert "SLOW-NODE" in r.output and "node0001" in r.output
    for name in ("run.json", "cluster.json", "events.jsonl", "rounds.jsonl", "report.md", "drain.txt",
                 "topology.json", "nodes/node0005/node.json"):
        assert (out / name).exists(), name
    md = (out / "report.md").read_text()
    assert "SIMULATED" in md and "## Node-by-node inter-node busbw" in md and "| node0001 |" in md
    assert "### node0001" in md and "### node0002" not in md  # a section per node with findings
    doc = json.loads((out / "cluster.json").read_text())
    assert doc["time_source"] == "modeled" and doc["rounds_inter"] == 5
    assert all(g["timing"] == "modeled" for r in doc["rounds"] for g in r["groups"])
    assert len((out / "rounds.jsonl").read_text().splitlines()) == 6  # intra + 5 inter
    r = CliRunner().invoke(cli, ["report", str(out)])  # a re-render keeps the cluster report
    assert r.exit_code == 0, r.output
    assert (out / "report.md").read_text().startswith("# gputopo cluster report: SIMULATED 6 nodes")


def test_cli_plan_and_errors(tmp_path):
    r = CliRunner().invoke(cli, ["cluster", "--plan", "--nodes", "1024", "--pattern", "pairwise"])
    assert r.exit_code == 0 and "rounds: 1023" in r.output and "estimated time" in r.output
    r = CliRunner().invoke(cli, ["cluster", "--plan"])
    assert r.exit_code != 0
    bad = tmp_path / "bad.toml"
    bad.write_text('[cluster]\nnodes = 4\nnode = "dgx-h100"\n[[cluster.fault]]\nwhere = "node:9"\nwhat = "slow"\n')
    with pytest.raises(InputFileError, match="node 9 does not exist"):
        parse_cluster(bad.read_text(), str(bad))
    with pytest.raises(InputFileError, match="no .cluster. table"):
        parse_cluster('name = "x"\n', "<t>")


def test_launch_env_from_slurm_and_torchrun():
    env = launch_env({"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1",
                      "SLURM_TASKS_PER_NODE": "4(x2)", "SLURM_JOB_NODELIST": "gpu[07-09,12],x1",
                      "GPUTOPO_NODE_NAME": "n1"})
    assert (env.launcher, env.rank, env.world_size, env.local_rank, env.local_world_size,
            env.master_addr, env.master_port, env.node_name) == ("slurm", 5, 8, 1, 4, "gpu07", 29500, "n1")
    env = launch_env({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "h",
                      "MASTER_PORT": "1234", "SLURM_PROCID": "0"})
    assert (env.launcher, env.rank, env.master_port) == ("torchrun", 1, 1234)
    assert first_host("node01") == "node01" and first_host("a-[3-5]-b,c") == "a-3-b"
    with pytest.raises(UsageError, match="torchrun"):
        launch_env({})


# ----------------------------------------------------------------------------- gputopo check

def test_check_judges_a_cluster_run_per_node_and_pair(tmp_path):
    from gputopo.check.junit import junit_xml
    from gputopo.check.verdict import run_check

    res = run(cluster(6, {"where": "node:2", "what": "slow", "factor": 0.4},
                      {"where": "node:4", "what": "driver", "version": "999.1"}), "pairwise",
              tmp_path=tmp_path)
    spec = tmp_path / "spec.toml"
    spec.write_text("[cluster]\nmin_inter_node_busbw_gbps = 200\nnodes_alike = true\nno_slow_node = true\n")
    v = run_check(spec, res.run_dir)
    assert v.exit_code == 1
    failed = {o.name for o in v.failed}
    assert "cluster.no_slow_node[node0002]" in failed and "cluster.nodes_alike[node0004]" in failed
    assert "cluster.min_inter_node_busbw_gbps[node0000-node0002]" in failed
    assert "cluster.min_inter_node_busbw_gbps[node0000-node0001]" not in failed
    names = [o.name for o in v.outcomes]
    assert sum(n.startswith("cluster.min_inter_node_busbw_gbps[") for n in names) == 15  # 6 choose 2
    assert sum(n.startswith("cluster.no_slow_node[") for n in names) == 6
    assert junit_xml(v).count("<testcase") == len(v.outcomes)
    healthy = run(cluster(6), tmp_path=tmp_path / "h")
    assert run_check(spec, healthy.run_dir).exit_code == 0


def test_a_spec_without_cluster_keys_on_a_cluster_run_is_refused(tmp_path):
    """The mirror case (the sweep): `check --spec pcie-box` on a cluster run whose report said
    "broken" (a slow node) PASSED, its bench rules judging none of the rounds; exit 2, one line."""
    from helpers.cli import gputopo_here
    from helpers.paths import REPO

    res = run(cluster(4, {"where": "node:2", "what": "slow", "factor": 0.4}), "pairwise", tmp_path=tmp_path)
    proc = gputopo_here("check", res.run_dir, "--spec", "pcie-box", cwd=REPO)
    assert proc.returncode == 2 and "PASSED" not in proc.stdout, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "spec pcie-box has no [cluster] table" in lines[0]


def test_check_cluster_keys_on_a_single_machine_run_are_refused(tmp_path):
    """Issue 18: a [cluster] table on a run that is not a cluster run passed as "1 skipped";
    it is refused (exit 2): those keys cannot judge it."""
    from gputopo.check.spec import parse_spec
    from gputopo.check.verdict import check_summary
    from gputopo.errors import UsageError
    from gputopo.report.summary import summarize_dir

    res = run(cluster(4), tmp_path=tmp_path)
    (res.run_dir / "cluster.json").unlink()
    with pytest.raises(UsageError, match=r"\[cluster\]"):
        check_summary(parse_spec({"cluster": {"no_slow_node": True}}), summarize_dir(res.run_dir))
    with pytest.raises(InputFileError, match="cluster.no_such"):
        parse_spec({"cluster": {"no_such": 1}})


def test_wrong_sums_are_corrupt_findings_by_host():
    from gputopo.cluster.rounds import run_rounds
    from gputopo.model.cluster import GroupResult
    from gputopo.report.cluster_findings import drain_lines
    from gputopo.report.rules import cluster_run_findings as cluster_findings

    class Backend:  # what DistBackend returns when node 1's all_reduce sums come back wrong
        node_names = ["a", "b", "c", "d"]

        def measure_intra(self):
            return [GroupResult((k,), 1024, "wall", 1e-3, 10.0, 2, wrong=5 if k == 1 else 0,
                                error="5 wrong elements after all_reduce" if k == 1 else None)
                    for k in range(4)]

        def measure_round(self, index, groups):
            return [GroupResult(g, 1024, "wall", 1e-3, 10.0, 4) for g in groups]

    out = run_rounds(Backend(), "random2pass")
    fs = cluster_findings(out, Backend.node_names, [[0, 1], [2, 3], [4, 5], [6, 7]], [{}] * 4, 0.8)
    corrupt = [f for f in fs if f.kind == "corrupt"]
    assert len(corrupt) == 1 and corrupt[0].evidence["node"] == "b" and corrupt[0].evidence["wrong"] == 5
    assert any(line.startswith("b gputopo: corrupt ") for line in drain_lines(fs))
    assert not [f for f in fs if f.kind == "slow-node"]


def test_a_buffer_that_could_not_be_allocated_is_out_of_memory_not_a_slow_node():
    """A group whose message could not be allocated (memory taken after the ranks' check)
    measured nothing: the node is neither called slow nor drained, the finding says why, and
    the gate's no_slow_node does not pass a node that was never measured."""
    from gputopo.check.cluster_rules import _per_node
    from gputopo.cluster.rounds import run_rounds
    from gputopo.model.cluster import GroupResult
    from gputopo.report.cluster_findings import drain_lines
    from gputopo.report.rules import cluster_run_findings as cluster_findings

    oom = ("rank 2 (c): RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. "
           "DefaultCPUAllocator: can't allocate memory: you tried to allocate 1099511627776 bytes")

    class Backend:
        node_names = ["a", "b", "c", "d"]

        def measure_intra(self):
            return [GroupResult((k,), 1 << 40, "wall", None if k == 2 else 1e-3,
                                None if k == 2 else 10.0, 2, error=oom if k == 2 else None)
                    for k in range(4)]

        def measure_round(self, index, groups):
            return [GroupResult(g, 1 << 40, "wall", 1e-3, 10.0, 4) for g in groups]

    out = run_rounds(Backend(), "random2pass")
    fs = cluster_findings(out, Backend.node_names, [[0, 1], [2, 3], [4, 5], [6, 7]], [{}] * 4, 0.8)
    assert not [f for f in fs if f.kind == "slow-node"], [f.message for f in fs]
    (mem,) = [f for f in fs if f.kind == "out-of-memory"]
    assert mem.evidence["node"] == "c" and "could not be allocated" in mem.message
    assert "says nothing about the node" in (mem.cause or "")
    assert not drain_lines(fs)  # a full memory is no reason to drain a node
    summary = type("S", (), {"findings": fs})()
    judged = {o.subject: o.status for o in _per_node("cluster.no_slow_node", "slow-node", summary,
                                                     Backend.node_names)}
    assert judged["c"] == "failed" and judged["a"] == "passed"


def test_one_gpu_per_node_figure_is_modeled_per_group():
    res = run(cluster(8, {"where": "node:2", "what": "slow", "factor": 0.4}), "pairwise")
    groups = [g for r in res.outcome.inter_rounds for g in r.groups]
    one = {g.nodes: g.one_gpu_busbw_gbps for g in groups}
    assert all(v is not None for v in one.values())
    healthy = [v for k, v in one.items() if 2 not in k]
    assert min(healthy) > 0.9 * 45 and max(one[(1, 2)], one[(2, 3)]) < 0.5 * 45  # per NIC, GB/s
