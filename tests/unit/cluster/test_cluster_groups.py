"""Issue 43, items 5 and 6, without processes: a round's data groups are shut down once every
rank has reported it (a leader used to hold 2(N-1)+1 communicators over a pairwise plan), and the
one-GPU-per-node measure keeps its outcome in its own fields (a leader's time-out or error there
used to turn a measured group into a rank error or a slow finding).
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from types import SimpleNamespace

import torch

from gputopo.cluster import dist_backend
from gputopo.cluster.dist_backend import DistBackend, _Abandoned
from gputopo.cluster.launch import LaunchEnv
from gputopo.cluster.rounds import RanksLost, run_rounds
from gputopo.report.cluster_view import one_gpu_missing


class Live:
    """The data groups alive in this process: made by the fake ProcessGroupGloo, freed by
    ``shutdown()``."""

    def __init__(self):
        self.now = 0
        self.most = 0
        self.made = 0

    def group(self, store, me, size, timeout):
        live = self

        class Pg:
            def __init__(self):
                self.shut, self.aborted = False, False

            def shutdown(self):
                assert not self.shut, "shut down twice"
                self.shut = True
                live.now -= 1

            def abort(self):
                self.aborted = True

        self.now += 1
        self.made += 1
        self.most = max(self.most, self.now)
        return Pg()


def backend(tmp_path, nodes: int, per_node: int = 2, live: Live = None) -> DistBackend:
    """Rank 0 (node n0's leader) of ``nodes`` nodes of ``per_node`` ranks, on the cpu fabric
    (the group shutdown is the same call on both fabrics), measuring nothing real: each
    all_reduce takes 1 ms."""
    b = DistBackend.__new__(DistBackend)
    b._init_state()
    world = nodes * per_node
    b.torch, b.fabric, b.size_bytes, b.samples = torch, "cpu", 1 << 10, 1
    b.device = torch.device("cpu")
    b.rank, b.world, b.timeout_s, b.timeout, b.control = 0, world, 30.0, timedelta(seconds=30), None
    b.env = LaunchEnv("slurm", 0, world, 0, per_node, "h", 1, "n0")
    b.node_names = [f"n{k}" for k in range(nodes)]
    b.node_ranks = [list(range(k * per_node, (k + 1) * per_node)) for k in range(nodes)]
    b.run_dir = str(tmp_path)
    live = live or Live()
    b.dist = SimpleNamespace(PrefixStore=lambda prefix, store: (prefix, store), ProcessGroupGloo=live.group)
    b._pg_store = SimpleNamespace(set=lambda k, v: None, check=lambda keys: False)
    b._gate = lambda key, size: None
    b._time_all_reduce = lambda pg, key, x, n: {"time_s": 1e-3, "wrong": 0}
    b.barrier = lambda phase: None
    # every rank reported what rank 0 did (its node's place in the group is all that matters)
    b.gather = lambda local, phase: [dict(local, rank=r, node=b.node_of(r)) for r in range(world)]
    return b


def test_a_16_node_pairwise_plan_holds_one_round_s_groups_at_a_time(tmp_path):
    live = Live()
    b = backend(tmp_path, 16, live=live)
    out = run_rounds(b, "pairwise")
    assert not out.lost and len(out.inter_rounds) == 15
    # the intra-node group, then per round the all-GPU group and the leaders' one-GPU group
    assert live.made == 1 + 2 * 15
    assert live.most == 2  # was 2(N-1)+1 = 31: every round's communicators kept to the end
    assert live.now == 0 and b._groups == []
    g = out.inter_rounds[0].groups[0]
    assert g.busbw_gbps is not None and g.one_gpu_busbw_gbps is not None


def test_a_round_that_lost_a_rank_keeps_its_groups(tmp_path):
    """The barrier names a lost rank: it may still be inside this round's groups, so they are
    not shut down (the rounds stop there)."""
    live = Live()
    b = backend(tmp_path, 4, live=live)

    def barrier(phase):
        if phase.startswith("inter-node round 2"):
            raise RanksLost([], phase)

    b.barrier = barrier
    out = run_rounds(b, "pairwise")
    assert out.lost_phase == "inter-node round 2"
    assert live.now == 2 and len(b._groups) == 2  # round 2's two, rounds 0 and 1's freed


def test_an_aborted_group_is_dropped_not_shut_down_and_a_stuck_shutdown_is_left(tmp_path, monkeypatch):
    live = Live()
    b = backend(tmp_path, 2, live=live)
    aborted = b._make_group("k1", [0, 2])
    stuck = b._make_group("k2", [0, 2])
    b.fabric = "cuda"  # the abort is NCCL's (the groups were made on the fake gloo)
    b._abort(aborted)
    release = threading.Event()
    stuck.shutdown = lambda: release.wait(30)
    monkeypatch.setattr(dist_backend, "ABORT_WAIT_S", 0.05)
    t0 = time.monotonic()
    b._shutdown_round()
    assert time.monotonic() - t0 < 5
    release.set()
    assert aborted.aborted and not aborted.shut  # ncclCommAbort freed it already
    assert b.shutdown_stuck == 1 and b._groups == [] and b._round_groups == []


def test_a_group_whose_set_up_thread_was_left_running_is_not_shut_down(tmp_path, monkeypatch):
    """Shutting a communicator down while this rank's own thread is still inside its
    ncclCommInitRank would race that thread: it is dropped."""
    live = Live()
    b = backend(tmp_path, 2, live=live)
    monkeypatch.setattr(dist_backend, "SETUP_POLL_S", 0.01)
    pg = b._make_group("k", [0, 2])
    never = threading.Event()
    b._deadline = b._clock() + 0.1
    try:
        b._bounded(lambda: never.wait(30), "k", pg, "the NCCL communicator set-up")
    except _Abandoned as a:
        assert a.field == "setup_timed_out"
    b._shutdown_round()
    never.set()
    assert not pg.shut and live.now == 1 and b._groups == []


def one_gpu_round(tmp_path, one_gpu_outcome):
    """Two nodes of two ranks; rank 0's one-GPU-per-node all_reduce ends as ``one_gpu_outcome``
    (an exception it raises, or a record)."""
    b = backend(tmp_path, 2)

    def timed(pg, key, x, n):
        if "/one-gpu/" not in key:
            return {"time_s": 1e-3, "wrong": 0}
        if isinstance(one_gpu_outcome, BaseException):
            raise one_gpu_outcome
        return dict(one_gpu_outcome)

    b._time_all_reduce = timed
    return b.measure_round(1, [(0, 1)])[0]


def test_a_leaders_only_set_up_that_outlasts_the_round_leaves_the_all_gpu_figure_standing(tmp_path):
    g = one_gpu_round(tmp_path, _Abandoned("setup_timed_out", "the NCCL communicator set-up did not "
                                                               "return within --timeout 30 s"))
    assert g.busbw_gbps is not None and g.time_s == 1e-3
    assert g.error is None and not g.rank_errors and g.na is None
    assert g.one_gpu_busbw_gbps is None
    assert g.one_gpu_na == ("not measured: rank 0 (n0): the NCCL communicator set-up did not return "
                            "within --timeout 30 s")


def test_a_leader_s_own_one_gpu_error_is_said_there_not_as_a_rank_error(tmp_path):
    g = one_gpu_round(tmp_path, RuntimeError("NCCL error: unhandled system error"))
    assert g.busbw_gbps is not None and not g.rank_errors and g.error is None
    assert g.one_gpu_na == "not measured: rank 0 (n0): RuntimeError: NCCL error: unhandled system error"


def test_wrong_sums_in_the_one_gpu_all_reduce_are_still_corrupt(tmp_path):
    g = one_gpu_round(tmp_path, {"time_s": 1e-3, "wrong": 3})
    # every leader reported 3 (the fake gathers rank 0's record for all)
    assert g.wrong == 6 and "one-GPU-per-node" in g.error and g.busbw_gbps is not None


def test_the_report_says_which_group_has_no_one_gpu_figure_and_why():
    doc = {"nodes": [{"name": "a"}, {"name": "b"}, {"name": "c"}],
           "rounds": [{"phase": "inter", "groups": [
               {"nodes": [0, 1], "busbw_gbps": 40.0, "one_gpu_busbw_gbps": 20.0},
               {"nodes": [1, 2], "busbw_gbps": 41.0, "one_gpu_na": "not measured: rank 2 (b): x"}]}]}
    assert one_gpu_missing(doc) == ("; not measured in 1 inter-node group(s) (nodes b, c: not measured: "
                                    "rank 2 (b): x; their all-GPU figures stand)")
    assert one_gpu_missing({"nodes": [], "rounds": []}) == ""
