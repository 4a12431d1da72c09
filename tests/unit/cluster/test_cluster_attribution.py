"""Issue 33, items 2, 5 and 7, without processes: whose error a failed group is, what the judge
and the second pass do with it, the findings and drain.txt, a rank stopped by a signal, the
liveness barrier under a stop signal, and what run.json records of the variables ranks set.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from types import SimpleNamespace

import pytest

from gputopo.cluster.dist_backend import DistBackend
from gputopo.cluster.job import finish_folder
from gputopo.cluster.launch import LaunchEnv
from gputopo.cluster.rounds import RanksLost, mark_slow_groups, run_rounds
from gputopo.model.cluster import GroupResult, LostRank
from gputopo.report.cluster_findings import drain_lines
from gputopo.report.rules import cluster_run_findings as cluster_findings
from gputopo.runfolder.cluster import ClusterRunFolder

NAMES = ["n0", "n1", "n2", "n3"]
RANKS = [[0], [1], [2], [3]]


def _backend(world=4) -> DistBackend:
    b = DistBackend.__new__(DistBackend)
    b._init_state()
    b.fabric, b.size_bytes, b.rank, b.world, b.timeout_s = "cpu", 1 << 20, 0, world, 10.0
    b.timeout, b.control = timedelta(seconds=10), None
    b.env = LaunchEnv("slurm", 0, world, 0, 1, "h", 1, "n0")
    b.node_names, b.node_ranks = NAMES[:world], RANKS[:world]
    return b


OOM = "RuntimeError: [enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory"


def test_a_member_s_own_error_is_that_rank_s_and_its_peer_only_waited():
    b = _backend()
    everyone = [{"rank": 0, "node": "n0", "error": OOM},
                {"rank": 1, "node": "n1", "peer_failed": f"rank 0 (n0): {OOM}"},
                {"rank": 2, "node": "n2", "time_s": 1e-3, "wrong": 0},
                {"rank": 3, "node": "n3", "time_s": 2e-3, "wrong": 0}]
    bad = b._combine((0, 1), [0, 1], everyone)
    assert bad.rank_errors == [{"rank": 0, "node": "n0", "error": OOM}] and bad.busbw_gbps is None
    assert bad.error.startswith("rank 0 (n0): RuntimeError") and "n1" not in bad.error
    good = b._combine((2, 3), [2, 3], everyone)
    assert good.time_s == 2e-3 and good.busbw_gbps > 0 and not good.rank_errors
    mark_slow_groups([bad, good], good.busbw_gbps, 0.8)
    assert not bad.slow  # measured nothing: not slow, not fast


def test_an_error_after_a_member_s_failure_is_said_not_blamed():
    b = _backend(2)
    everyone = [{"rank": 0, "node": "n0", "error": "RuntimeError: NCCL error: remote process exited",
                 "after_peer": "rank 1 (n1): RuntimeError: NCCL setup failed on mlx5_0"},
                {"rank": 1, "node": "n1", "error": "RuntimeError: NCCL setup failed on mlx5_0"}]
    g = b._combine((0, 1), [0, 1], everyone)
    assert [e["rank"] for e in g.rank_errors] == [1]
    assert "remote process exited (after a member failed)" in g.error


def test_a_group_whose_peer_was_stopped_is_not_measured_and_nobody_is_blamed():
    b = _backend(2)
    everyone = [{"rank": 0, "node": "n0", "peer_failed": "rank 1 (n1) was stopped by SIGTERM"},
                {"rank": 1, "node": "n1", "stopped": "rank 1 (n1) was stopped by SIGTERM", "stopped_by": "SIGTERM"}]
    g = b._combine((0, 1), [0, 1], everyone)
    assert g.na == "not measured: rank 1 (n1) was stopped by SIGTERM" and not g.rank_errors and not g.error


def test_a_collective_that_timed_out_without_a_failed_member_is_the_group_s():
    b = _backend(2)
    everyone = [{"rank": 0, "node": "n0", "timed_out": "the all_reduce did not finish within --timeout 10 s"},
                {"rank": 1, "node": "n1", "time_s": 1e-3}]
    g = b._combine((0, 1), [0, 1], everyone)
    assert g.error.startswith("rank(s) 0 (n0): the all_reduce did not finish") and not g.rank_errors
    mark_slow_groups([g], None, 0.8)
    assert g.slow  # as before: a group that failed without a culprit is judged by triangulation


SETUP = "the NCCL communicator set-up did not return within --timeout 10 s"


def test_a_member_whose_nccl_set_up_never_returned_while_the_others_did_is_its_error():
    """Rank 2's set-up thread never returned; rank 3's did (it then waited for rank 2 at the
    start barrier): rank 2's own error, named by rank and host; rank 3 is not blamed."""
    b = _backend()
    everyone = [{"rank": 0, "node": "n0", "time_s": 1e-3}, {"rank": 1, "node": "n1", "time_s": 1e-3},
                {"rank": 2, "node": "n2", "setup_timed_out": SETUP},
                {"rank": 3, "node": "n3", "timed_out": "the start barrier did not finish within --timeout 10 s"}]
    g = b._combine((2, 3), [2, 3], everyone)
    assert g.rank_errors == [{"rank": 2, "node": "n2", "error": SETUP + " (the group's other members' did)"}]
    assert g.error.startswith("rank 2 (n2): the NCCL communicator set-up did not return") and "n3" not in g.error
    mark_slow_groups([g], None, 0.8)
    assert not g.slow and g.busbw_gbps is None


def test_a_set_up_stuck_on_every_member_blames_no_one_and_fails_the_group():
    """NCCL's set-up is collective: one member's fabric that never answers usually holds every
    member. The group failed (judged by triangulation, like a collective that never finished),
    its error naming the ranks and hosts."""
    b = _backend()
    everyone = [{"rank": 0, "node": "n0", "setup_timed_out": SETUP}, {"rank": 1, "node": "n1", "setup_timed_out": SETUP},
                {"rank": 2, "node": "n2"}, {"rank": 3, "node": "n3"}]
    g = b._combine((0, 1), [0, 1], everyone)
    assert g.error == f"rank(s) 0, 1 (n0, n1): {SETUP}" and not g.rank_errors
    mark_slow_groups([g], None, 0.8)
    assert g.slow


class _Rounds:
    """A backend whose node 0 cannot allocate its buffer in any round (its partners wait)."""

    node_names = NAMES

    def measure_intra(self):
        return [GroupResult((k,), 1 << 30, "wall", gpus=1, na="one GPU") for k in range(4)]

    def measure_round(self, index, groups):
        out = []
        for g in groups:
            if 0 in g:
                out.append(GroupResult(g, 1 << 30, "wall", gpus=2, error=f"rank 0 (n0): {OOM}",
                                       rank_errors=[{"rank": 0, "node": "n0", "error": OOM}]))
            else:
                out.append(GroupResult(g, 1 << 30, "wall", time_s=1e-3, busbw_gbps=10.0, gpus=2))
        return out


def test_a_node_that_cannot_allocate_is_the_only_one_named_and_its_partner_is_measured_later():
    out = run_rounds(_Rounds(), "random2pass", seed=3)
    first = out.inter_rounds[0].groups
    partner = next(n for g in first if 0 in g.nodes for n in g.nodes if n != 0)
    later = [g for r in out.inter_rounds[1:] for g in r.groups]
    # the second pass pairs the waiting partner with a node that passed: it gets measured
    assert any(partner in g.nodes and g.busbw_gbps for g in later), [r.to_json() for r in out.rounds]
    fs = cluster_findings(out, NAMES, RANKS, [{}] * 4, 0.8)
    mem = [f for f in fs if f.kind == "out-of-memory"]
    assert [f.evidence["node"] for f in mem] == ["n0"] and mem[0].evidence["ranks"] == [0]
    assert NAMES[partner] in mem[0].evidence["waited"] and "measured nothing there" in mem[0].message
    assert not [f for f in fs if f.kind in ("slow-node", "slow", "hang", "crash", "rank-error")]
    assert drain_lines(fs) == []


def test_a_rank_error_names_its_node_once_over_its_rounds_and_drains_only_it():
    class B(_Rounds):
        def measure_round(self, index, groups):
            res = super().measure_round(index, groups)
            for g in res:
                if g.rank_errors:
                    g.rank_errors = [{"rank": 0, "node": "n0", "error": "RuntimeError: NCCL setup failed"}]
                    g.error = "rank 0 (n0): RuntimeError: NCCL setup failed"
            return res

    out = run_rounds(B(), "pairwise")
    fs = cluster_findings(out, NAMES, RANKS, [{}] * 4, 0.8)
    (err,) = [f for f in fs if f.kind == "rank-error"]
    assert err.evidence["node"] == "n0" and len(err.evidence["rounds"]) == 3
    assert sorted(err.evidence["waited"]) == ["n1", "n2", "n3"] and "NCCL setup failed" in err.message
    assert [ln.split()[0] for ln in drain_lines(fs)] == ["n0"]
    assert not [f for f in fs if f.kind in ("slow-node", "slow")]
    from gputopo.check.cluster_rules import _per_node  # the gate does not pass what failed

    judged = {o.subject: o.status for o in _per_node("cluster.no_slow_node", "slow-node",
                                                     SimpleNamespace(findings=fs), NAMES)}
    assert judged == {"n0": "failed", "n1": "passed", "n2": "passed", "n3": "passed"}


def test_groups_that_measured_nothing_are_no_test_of_their_nodes():
    """Triangulation counted a failed, unjudged group as a test, i.e. 'fast with that partner'."""
    from gputopo.report.cluster_findings import triangulate

    out = run_rounds(_Rounds(), "pairwise")
    t = triangulate(out, 4).tallies
    assert t[0].tests == 0 and t[1].tests == 2


class _SetUpHangs(_Rounds):
    """Node 0's NCCL set-up never returns (its partners' does): every group with it failed."""

    def measure_round(self, index, groups):
        out = []
        for g in groups:
            if 0 in g:
                e = {"rank": 0, "node": "n0", "error": SETUP + " (the group's other members' did)"}
                out.append(GroupResult(g, 1 << 30, "wall", gpus=2, error=f"rank 0 (n0): {e['error']}",
                                       rank_errors=[e]))
            else:
                out.append(GroupResult(g, 1 << 30, "wall", time_s=1e-3, busbw_gbps=10.0, gpus=2))
        return out


def test_a_node_whose_nccl_set_up_hangs_is_a_rank_error_naming_rank_and_host():
    out = run_rounds(_SetUpHangs(), "random2pass", seed=3)
    fs = cluster_findings(out, NAMES, RANKS, [{}] * 4, 0.8)
    (err,) = [f for f in fs if f.kind == "rank-error"]
    assert err.evidence["node"] == "n0" and err.evidence["ranks"] == [0]
    assert err.message.startswith("node n0 rank(s) 0 failed in inter-node round 1") and SETUP in err.message
    assert [ln.split()[0] for ln in drain_lines(fs)] == ["n0"]  # its partners only waited
    assert not [f for f in fs if f.kind in ("slow-node", "slow", "hang", "crash")]


def test_a_group_that_failed_as_a_whole_says_why_in_its_slow_finding():
    """A pair whose set-up hung on both members, each node fast with another partner: the slow
    link's message says it failed and why (ranks and hosts), not only "busbw n/a"."""
    class B(_Rounds):
        def measure_round(self, index, groups):
            out = []
            for g in groups:
                if set(g) == {0, 1}:
                    out.append(GroupResult(g, 1 << 30, "wall", gpus=2, error=f"rank(s) 0, 1 (n0, n1): {SETUP}"))
                else:
                    out.append(GroupResult(g, 1 << 30, "wall", time_s=1e-3, busbw_gbps=10.0, gpus=2))
            return out

    out = run_rounds(B(), "pairwise")
    fs = cluster_findings(out, NAMES, RANKS, [{}] * 4, 0.8)
    (link,) = [f for f in fs if f.kind == "slow"]
    assert link.evidence["nodes"] == ["n0", "n1"]
    assert f"busbw n/a (the all_reduce failed: rank(s) 0, 1 (n0, n1): {SETUP})" in link.message


def test_a_rank_stopped_by_a_signal_ends_the_rounds_with_that_round_kept(tmp_path):
    class B(_Rounds):
        stopped: list = []

        def measure_round(self, index, groups):
            if index == 2:
                self.stopped = [LostRank(3, "n3", "stopped", "stopped by SIGTERM")]
            return super().measure_round(index, groups)

    out = run_rounds(B(), "pairwise")
    assert [r.index for r in out.inter_rounds] == [1, 2] and out.lost_phase == "inter-node round 2"
    fs = cluster_findings(out, NAMES, RANKS, [{}] * 4, 0.8)
    (stop,) = [f for f in fs if f.kind == "stopped"]
    assert stop.evidence["node"] == "n3" and "SIGTERM" in stop.message and "not blamed" in stop.message
    assert "n3" not in "".join(drain_lines(fs))
    folder = ClusterRunFolder(tmp_path)
    folder.start(fabric="cpu", simulated=False, machine="m", argv=[], options={}, nodes=NAMES)
    finish_folder(folder, outcome=out, names=NAMES, ranks=RANKS, fingerprints=[{}] * 4, findings=fs, fabric="cpu",
                  simulated=False, time_s=1.0, time_source="wall", size_bytes=1, slow_below=0.8)
    assert json.loads((tmp_path / "run.json").read_text())["status"] == "interrupted"
    assert "1 rank(s) stopped by a signal during inter-node round 2" in (tmp_path / "report.md").read_text()


def test_run_json_keeps_what_the_ranks_set_and_why(tmp_path):
    set_ = {"TORCH_NCCL_BLOCKING_WAIT": {"value": "0", "was": "1", "why": "1 ms"}}
    ClusterRunFolder(tmp_path).start(fabric="cuda", simulated=False, machine="m", argv=[], options={},
                                     nodes=NAMES, env_set=set_)
    assert json.loads((tmp_path / "run.json").read_text())["env_set"] == set_


class _BlockingDist:
    """monitored_barrier that blocks (a lost peer) until released or its timeout."""

    def __init__(self):
        self.release = threading.Event()

    def monitored_barrier(self, group=None, timeout=None, wait_all_ranks=False):
        if not self.release.wait(timeout.total_seconds()):
            raise RuntimeError("[Rank 0]: Ranks 1 failed to pass monitoredBarrier")


def test_rank_0_stopped_in_the_barrier_names_the_rank_whose_heartbeat_stopped():
    """torchrun's agent SIGTERMs rank 0 when a peer dies and SIGKILLs it 30 s later; torch's
    barrier would block it past that. Stopped, rank 0 leaves the barrier at its next poll."""
    b = _backend(2)
    b.dist = _BlockingDist()
    b.stop_signal = "SIGTERM"
    b._state = lambda ranks: {r: "crash" for r in ranks}  # rank 1's heartbeat stopped
    t0 = time.monotonic()
    with pytest.raises(RanksLost) as e:
        b.barrier("inter-node round 1")
    assert time.monotonic() - t0 < 5  # the barrier's own timeout is 20 s
    assert [(r.rank, r.state) for r in e.value.lost] == [(1, "crash")] and "SIGTERM" in e.value.lost[0].message
    b.dist.release.set()


def test_a_stopped_rank_whose_peers_live_waits_for_the_barrier():
    b = _backend(2)
    b.dist = _BlockingDist()
    b.stop_signal = "SIGTERM"
    b._state = lambda ranks: {r: "hang" for r in ranks}  # everyone still beats: they are coming
    threading.Timer(1.0, b.dist.release.set).start()
    b.barrier("inter-node round 1")  # passes once the others arrive


def test_stop_signals_set_the_flag_and_restore_the_handlers():
    import os
    import signal

    b = _backend(2)
    before = signal.getsignal(signal.SIGTERM)
    with b.stop_signals():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        assert b.stop_signal == "SIGTERM"
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        assert b.stop_signal == "SIGTERM"  # the first one is kept
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_round_with_a_stopped_rank_tells_every_rank(tmp_path):
    b = _backend(2)
    b.run_dir = str(tmp_path)
    b.barrier = lambda phase: None
    b.stop_signal = "SIGTERM"
    b._pg_store = SimpleNamespace(set=lambda k, v: None, check=lambda keys: False)
    mine = {}
    b.gather = lambda local, phase: (mine.update(local) or [local, {"rank": 1, "node": "n1", "peer_failed": "x"}])
    res = b.measure_round(1, [(0, 1)])
    assert mine["stopped_by"] == "SIGTERM" and "stopped by SIGTERM" in mine["stopped"]
    assert [(r.rank, r.state) for r in b.stopped] == [(0, "stopped")]
    assert res[0].na and not res[0].rank_errors


def test_a_leader_whose_all_gpu_all_reduce_failed_tells_the_one_gpu_group_and_skips_it():
    from gputopo.cluster.dist_backend import group_key

    b = _backend(2)
    published = {}
    b._pg_store = SimpleNamespace(set=published.__setitem__, check=lambda keys: False)
    b._measure = lambda *a, **k: pytest.fail("a leader whose own all_reduce failed measured again")
    b._one_gpu(1, (0, 1), {"error": "RuntimeError: x"})
    key = group_key(1, "one-gpu", [0, 1])
    assert published[key + "/gate"] == "failed" and "did not finish (RuntimeError: x)" in published[key + "/failed"]
    # its one-GPU all_reduce's own error is kept in its own record (issue 43, item 6): the
    # all-GPU time stands
    b._measure = lambda key, ranks, rec, prefix="": rec.update(error=prefix + "RuntimeError: y")
    local = {"time_s": 1e-3}
    b._one_gpu(1, (0, 1), local)
    assert local == {"time_s": 1e-3, "one_gpu": {"error": "RuntimeError: y"}}
