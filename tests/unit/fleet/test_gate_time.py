"""`gputopo gate`'s time model (gputopo/fleet/gate_time.py): what a budget holds, in which order
pairs are kept, and that the cuda costs say they are unmeasured."""

from gputopo.bench.options import all_pairs
from gputopo.fleet.gate_time import COSTS, RESERVE_S, covering_order, estimate, plan_gate


def test_the_ring_comes_first_so_every_gpu_is_in_two_pairs():
    order = covering_order(range(8), all_pairs(range(8)))
    assert order[:8] == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7), (0, 7)]
    assert sorted(order) == all_pairs(range(8))
    assert covering_order([3, 5], [(3, 5)]) == [(3, 5)]


def test_what_fits_is_measured_and_the_rest_is_said():
    c = COSTS["cpu"]
    gpus, pairs = list(range(8)), all_pairs(range(8))
    full = estimate(c, 8, 28, False)
    p = plan_gate("cpu", gpus, pairs, False, full + RESERVE_S, 8)
    assert len(p.pairs) == 28 and not p.left_out and not p.notes
    short = plan_gate("cpu", gpus, pairs, False, estimate(c, 8, 10, False) + RESERVE_S, 8)
    assert len(short.pairs) == 10 and len(short.left_out) == 18
    assert short.pairs == covering_order(gpus, pairs)[:10]
    assert "18 of 28 pair(s) left out" in short.notes[0] and "cpu fabric, measured costs" in short.notes[0]
    nothing = plan_gate("cpu", gpus, pairs, False, 1.0, 8)
    assert nothing.pairs == [] and nothing.estimate_s == 0.0


def test_the_all_reduce_only_beside_every_pair():
    c = COSTS["sim"]
    with_it = plan_gate("sim", range(4), all_pairs(range(4)), True, estimate(c, 2, 6, True) + RESERVE_S, 2)
    assert with_it.allreduce and not with_it.allreduce_left_out
    without = plan_gate("sim", range(4), all_pairs(range(4)), True, estimate(c, 2, 6, False) + RESERVE_S, 2)
    assert not without.allreduce and without.allreduce_left_out and not without.left_out


def test_a_forkserver_started_earlier_leaves_less_start_up():
    c = COSTS["sim"]
    assert estimate(c, 2, 28, False, started_s=2.0) == estimate(c, 2, 28, False) - 2.0
    assert estimate(c, 2, 28, False, started_s=100.0) == c.worker_s * 2 + c.pair_s * 14


def test_gpu_costs_are_marked_unmeasured():
    assert COSTS["cuda"].measured is False and "unmeasured" in COSTS["cuda"].basis
    assert COSTS["sim"].measured and COSTS["cpu"].measured
    p = plan_gate("cuda", range(2), [(0, 1)], False, 60.0, 2)
    assert any("unmeasured" in n for n in p.notes) and p.to_json()["costs"]["measured"] is False
