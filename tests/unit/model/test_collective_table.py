"""One collective table (gputopo/model/collectives.py): the planner, the suite, the nccl-tests
importer, the headline and check's spec all give each collective the table's busbw factor,
sizes and names, and no other module defines a busbw factor of its own."""

import re

import pytest

from gputopo.bench.plan import COLLECTIVE_TESTS, DP_MOVES_LIKE, DP_TESTS, busbw_factor, cases_for
from gputopo.check.spec import BUSBW_OPS, known_series, parse_spec
from gputopo.importers.nccl_tests import OPS, check_op, op_from_name
from gputopo.importers.nccl_tests import (Cell, NcclTestsLog, Rank, Row, log_measurements,
                                          parse_nccl_tests)
from gputopo.importers.nccl_tests import log_busbw_factor as log_factor
from gputopo.model.collectives import BENCH_COLLECTIVES, COLLECTIVES, RESULTS, collective
from gputopo.report.headline import HEADLINE_ORDER, headlines
from helpers.paths import REPO

PACKAGE = REPO / "gputopo"
RANKS = (1, 2, 3, 4, 7, 8, 16)
#: nccl-tests' doc/PERFORMANCE.md ("Bus bandwidth"), relative to algbw = size / time.
NCCL_TESTS = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
              "reduce_scatter": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n,
              "broadcast": lambda n: 1.0, "reduce": lambda n: 1.0, "sendrecv": lambda n: 1.0}


def _log(name: str, ranks: int, size: int = 1 << 26, time_us: float = 1000.0) -> NcclTestsLog:
    """A parsed nccl-tests log of ``name`` over ``ranks`` ranks of one host, one row."""
    algbw = size / (time_us * 1e3)
    cell = Cell(time_us=time_us, algbw_gbps=algbw, busbw_gbps=algbw * NCCL_TESTS.get(name, lambda n: 1.0)(ranks),
                wrong=0)
    return NcclTestsLog(source=f"{name}.txt", op=name,
                        ranks=[Rank(r, None, 100 + r, "node", r, f"0000:{r + 16:02x}:00", "NVIDIA H100")
                               for r in range(ranks)],
                        columns=["size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong"],
                        rows=[Row(size, size // 4, "float", "sum", None, cell, None, 1)])


def test_the_table_holds_nccl_tests_factors():
    for name, formula in NCCL_TESTS.items():
        for n in RANKS:
            assert collective(name).busbw_factor(n) == pytest.approx(formula(n)), (name, n)
    assert {c.result for c in COLLECTIVES} <= set(RESULTS)
    assert len({c.name for c in COLLECTIVES}) == len(COLLECTIVES)
    with pytest.raises(ValueError):
        collective("all_reduce").busbw_factor(0)


@pytest.mark.parametrize("coll", COLLECTIVES, ids=lambda c: c.name)
def test_planner_importer_and_headline_give_the_tables_factor(coll):
    for n in RANKS:
        factor = coll.busbw_factor(n)
        log = _log(coll.name, n)
        assert busbw_factor(coll.test, n) == factor  # the planner's (bench Specs take theirs)
        assert log_factor(log) == factor  # the importer's
        (m,) = log_measurements(log)
        assert m.test == coll.test and m.busbw_factor == factor
        hs = headlines([m], None)
        if factor > 0:  # the headline's figure is the table's busbw
            (h,) = hs
            assert h.gbps == pytest.approx(m.algbw_gbps * factor) and h.test == coll.test
        else:  # a one-rank ring moves nothing over a link: busbw 0, no headline (as nccl-tests prints 0)
            assert hs == []


def test_one_rank_log_imports_the_busbw_nccl_tests_printed():
    text = """# nThread 1 nGpus 1 minBytes 1048576 maxBytes 1048576 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#
# Using devices
#  Rank  0 Group  0 Pid   4242 on     node-a device  0 [0x1b] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144     float     sum      -1    10.00  104.86    0.00      0    10.00  104.86    0.00      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0
"""
    (log,) = parse_nccl_tests(text, source="all_reduce_1gpu.txt")
    ms = log_measurements(log)
    assert [m.busbw_factor for m in ms] == [0.0, 0.0]
    assert all(m.busbw_gbps == 0.0 == m.extra["printed"]["busbw_gbps"] for m in ms)


def test_bench_specs_take_the_tables_factor_and_sizes():
    torch = pytest.importorskip("torch")
    from gputopo.bench.fabrics.sim import SimModel, SimOps
    from gputopo.bench.suites import build_spec
    from gputopo.sim.description import load_description

    desc = load_description("seed-8gpu")
    ops = SimOps((0, 1), (0, 1), SimModel(desc, {}))
    size = (1 << 16) + 12  # not a whole number of chunks: the sizing rounds it down
    cases = cases_for("collectives", (0, 1), (size,), (4,)) + cases_for("dp", (0, 1), (size,), (4,))
    assert [c.test for c in cases[:len(COLLECTIVE_TESTS)]] == [c.test for c in BENCH_COLLECTIVES]
    for case in cases:
        spec = build_spec(ops, case, latency_repeat=1)
        if case.test in DP_TESTS:
            assert spec.busbw_factor == collective(DP_MOVES_LIKE[case.test]).busbw_factor(2)
            continue
        coll = collective(case.test)
        assert spec.busbw_factor == coll.busbw_factor(2)
        n, send, recv = coll.counts(size // 4, 2)
        assert spec.bytes_per_iter == 4 * n
        assert (case.direction == "0->1") == coll.rooted
        prepared = spec.prepare()
        prepared.refill()
        prepared.run()
        assert prepared.verify() == (0, None)  # every rank holds the table's result, bit for bit
    assert torch is not None


def test_check_spec_and_importer_name_every_collective_of_the_table():
    names = tuple(c.name for c in COLLECTIVES)
    assert BUSBW_OPS == names and set(OPS) == set(names)
    assert {c.test for c in COLLECTIVES} <= known_series()
    assert all(op_from_name(f"{c.name}_perf.log") == c.name == check_op(c.test) for c in COLLECTIVES)
    assert op_from_name("nccl_reducescatter_8gpu.txt") == "reduce_scatter"
    spec = parse_spec({"busbw": {"collective.alltoall": 10, "all_reduce": 20}}, "s.toml")
    assert spec.busbw == {"alltoall": {"*": 10.0}, "all_reduce": {"*": 20.0}}
    assert all(collective(s) for s in HEADLINE_ORDER if s.startswith("collective."))


#: A busbw factor written out: ``(n - 1) / n`` and the like, in code (not in comments).
_FACTOR = re.compile(r"-\s*1\s*\)\s*/(?!/)|lambda\s+\w+\s*:\s*(?:2\s*\*\s*)?\(\s*\w+\s*-\s*1")


def test_no_module_but_the_table_defines_a_busbw_factor():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "model" / "collectives.py":
            continue
        for k, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if _FACTOR.search(code):
                offenders.append(f"{path.relative_to(PACKAGE)}:{k}: {line.strip()}")
    assert offenders == []
