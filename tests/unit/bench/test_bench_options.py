"""Bench flag parsers and the plan: bad input is one-line UsageError (exit 2); no torch needed."""

import subprocess
import sys

import pytest

from gputopo.bench.options import (BenchOptions, format_size, parse_gpus, parse_pairs,
                                   parse_size, parse_sizes, parse_tests, select_class_pairs,
                                   select_pairs)
from gputopo.bench.plan import busbw_factor, cases_for, layout, plan_steps
from gputopo.errors import UsageError
from gputopo.model import LinkClass, Pair, Topology
from gputopo.model.topology import Gpu


def _topo8():
    """seed-8gpu's classes: NV4 pairs 0-1 2-3 4-5 6-7, NODE inside a socket, SYS across."""
    def cls(i, j):
        if i // 2 == j // 2:
            return "NV4"
        return "NODE" if i // 4 == j // 4 else "SYS"

    pairs = [Pair((i, j), LinkClass.parse(cls(i, j))) for i in range(8) for j in range(i + 1, 8)]
    return Topology(gpus=[Gpu(k) for k in range(8)], pairs=pairs, machine="t8")


def test_parse_pairs_forms():
    assert parse_pairs(["5,6"], 8) == [(5, 6)]
    assert parse_pairs(["6,5"], 8) == [(5, 6)]
    assert parse_pairs(["0,1", "2,3", "0,1"], 8) == [(0, 1), (2, 3)]
    assert len(parse_pairs(["all"], 8)) == 28
    assert len(parse_pairs(None, 8)) == 28


@pytest.mark.parametrize("bad,needle", [
    ("5,5", "two different GPUs"), ("9,1", "GPU 9 does not exist"), ("5", "two GPU indices"),
    ("a,b", "'a' is not a GPU index"), ("1,2,3", "two GPU indices"), ("", "two GPU indices"),
])
def test_parse_pairs_rejects(bad, needle):
    with pytest.raises(UsageError) as e:
        parse_pairs([bad], 8)
    assert needle in str(e.value)
    assert "\n" not in str(e.value)


def test_parse_gpus():
    assert parse_gpus("0-3,5", 8) == [0, 1, 2, 3, 5]
    assert parse_gpus(None, 4) == [0, 1, 2, 3]
    for bad in ("0-9", "3-1", "x", "1,,2"):
        with pytest.raises(UsageError):
            parse_gpus(bad, 8)


def test_parse_sizes():
    assert parse_sizes("1M,64M,256M") == (1 << 20, 64 << 20, 256 << 20)
    assert parse_sizes("4K,1024,1MiB,1G") == (1024, 4096, 1 << 20, 1 << 30)
    assert parse_size("64mb") == 64 << 20
    for bad in ("", "1M,", "abc", "1X", "0", "6", "-1M", "1.5M"):
        with pytest.raises(UsageError):
            parse_sizes(bad)
    assert [format_size(x) for x in (4, 1024, 1 << 20, 3 << 30)] == ["4B", "1K", "1M", "3G"]


def test_parse_tests():
    assert parse_tests("p2p,dp,collectives") == ("p2p", "dp", "collectives")
    assert parse_tests("collectives,p2p") == ("p2p", "collectives")
    assert parse_tests("all") == ("p2p", "dp", "collectives")
    with pytest.raises(UsageError, match="unknown test 'nccl'"):
        parse_tests("p2p,nccl")


def test_select_class_and_gpus():
    topo = _topo8()
    sys_pairs = select_class_pairs(topo, "SYS")
    assert len(sys_pairs) == 16 and all(i < 4 <= j for i, j in sys_pairs)
    assert select_class_pairs(topo, "nv") == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert select_class_pairs(topo, "SOC") == sys_pairs
    with pytest.raises(UsageError, match="unknown link class"):
        select_class_pairs(topo, "FOO")
    with pytest.raises(UsageError, match="no GPU pair of class PIX"):
        select_class_pairs(topo, "PIX")
    assert select_pairs(topo, None, "SYS", "0-4") == [(0, 4), (1, 4), (2, 4), (3, 4)]
    assert select_pairs(topo, ["5,6"]) == [(5, 6)]
    with pytest.raises(UsageError, match="outside --gpus"):
        select_pairs(topo, ["5,6"], None, "0-3")
    with pytest.raises(UsageError, match="not of class SYS"):
        select_pairs(topo, ["5,6"], "SYS")
    with pytest.raises(UsageError, match="no GPU pair left"):
        select_pairs(topo, None, "SYS", "0-3")


def test_options_round_trip_and_presets():
    o = BenchOptions(pairs=[(6, 5)], preset="quick", sizes_bytes=(4096,))
    assert o.pairs == [(5, 6)]
    assert o.effective.sizes_bytes == (4096,) and o.effective.samples == 5
    back = BenchOptions.from_json(o.to_json())
    assert back.pairs == [(5, 6)] and back.effective == o.effective
    with pytest.raises(UsageError):
        BenchOptions(preset="turbo")


def test_plan_cases_and_layout():
    topo = _topo8()
    steps = plan_steps(topo, BenchOptions(pairs=[(5, 6)], self_gpus=[0], preset="quick"))
    assert [s.id for s in steps] == ["self:0", "p2p:5-6", "dp:5-6", "collectives:5-6"]
    p2p = steps[1]
    dirs = {(c.test, c.direction) for c in p2p.cases}
    assert ("p2p.copy", "5->6") in dirs and ("p2p.copy", "6->5") in dirs
    assert ("p2p.copy_bidir", "both") in dirs and ("p2p.staged", "6->5") in dirs
    assert len({c.key for s in steps for c in s.cases}) == sum(len(s.cases) for s in steps)
    assert all(s.link_class == "NODE" for s in steps[1:])
    assert len(cases_for("dp", (5, 6), [1 << 20], [4])) == 8  # 4 primitives x 2 masters
    assert layout(steps[1], "cuda") == [(5, 6)]
    assert layout(steps[3], "cuda") == [(5,), (6,)]
    assert layout(steps[1], "cpu") == [(5,), (6,)]
    assert layout(steps[3], "sim") == [(5, 6)]
    assert busbw_factor("collective.all_reduce", 2) == 1.0
    assert busbw_factor("collective.all_reduce", 8) == pytest.approx(1.75)
    assert busbw_factor("collective.all_gather", 2) == 0.5
    assert busbw_factor("collective.broadcast", 2) == 1.0


@pytest.mark.slow
def test_api_import_stays_light():
    code = ("import sys, gputopo.bench.api; "
            "bad = [m for m in ('torch', 'pandas', 'matplotlib') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
