"""The benchmark core in one process: patterns, the timing/verification loop, every test's spec
on the sim fabric (DataParallel's flow, ring collectives), fault application and modeled time."""

import math

import pytest

torch = pytest.importorskip("torch")

from gputopo.bench.fabrics import host_blocks  # noqa: E402
from gputopo.bench.fabrics.base import buckets, chunk_rows  # noqa: E402
from gputopo.bench.fabrics.sim import JITTER, SimModel, SimOps  # noqa: E402
from gputopo.bench.patterns import fill_pattern, fill_small  # noqa: E402
from gputopo.bench import verification as V  # noqa: E402
from gputopo.bench.verification import POISON, compare, merge  # noqa: E402
from gputopo.bench.plan import cases_for  # noqa: E402
from gputopo.bench.spec import measure  # noqa: E402
from gputopo.bench.suites import build_spec, param_shapes  # noqa: E402
from gputopo.model import Measurement  # noqa: E402
from gputopo.sim.description import load_description, parse_description  # noqa: E402


@pytest.fixture(scope="module")
def seed():
    return load_description("seed-8gpu")


def _run(desc, pair, group, sizes=(64 << 10,), samples=3, env=None):
    ops = SimOps(pair, pair, SimModel(desc, env or {}))
    out = []
    for c in cases_for(group, pair, sizes, (4,)):
        out.append(measure(build_spec(ops, c, latency_repeat=5), ops, warmup=1, samples=samples,
                           link_class=str(desc.link_class(*pair))))
    return out


def test_patterns_exact_and_compare():
    a = fill_pattern(torch.empty(1000), 7)
    b = fill_pattern(torch.empty(600), 7, offset=400)
    assert torch.equal(a[400:], b)
    assert compare(a, a.clone()) == (0, None)
    c = a.clone()
    c.view(torch.int32)[17] ^= 1 << 3
    c[500] = float("nan")
    assert compare(c, a) == (2, 17)
    s = fill_small(torch.empty(1 << 16), 3)
    assert s.min() >= 0 and s.max() <= 1023 and torch.equal(s, s.round())
    assert not (a == POISON).any()
    assert merge([(0, None, 10), (2, 3, 10), (1, 0, 10)]) == (3, 13)


def _arithmetic(n, seed, offset, small=False):
    """The pattern's definition, computed directly (int64, no cache, no period)."""
    k = torch.arange(offset, offset + n, dtype=torch.int64)
    r = (k * 1103515245 + seed) & 0xFFFFFF
    return (r >> 14 if small else r).to(torch.float32)


def test_patterns_equal_their_definition():
    assert torch.equal(fill_pattern(torch.empty(5000), 7, 123), _arithmetic(5000, 7, 123))
    assert torch.equal(fill_small(torch.empty(5000), 7), _arithmetic(5000, 7, 0, small=True))


def test_generated_patterns_equal_their_definition_across_table_rows():
    """_raw builds the pattern as a table of rows (a row's terms plus each row's start): every
    element must equal the int64 definition wherever the range starts and ends (inside a row,
    on a row's edge, across the end of the 24-bit period) and for seeds at the mask's edge."""
    from gputopo.bench import patterns as P

    row = P._ROW
    for n, offset in ((1, 0), (1, row - 1), (row, row), (row + 1, row - 1), (3 * row + 5, 7),
                      (5000, (1 << 24) - 3), (1 << 15, (1 << 26) + 12345)):
        for seed in (0, 11, 211, (1 << 24) - 1):
            got = P._raw(n, seed, offset, "cpu")
            assert got.dtype == torch.int32 and got.numel() == n
            k = torch.arange(offset, offset + n, dtype=torch.int64)
            assert torch.equal(got.to(torch.int64), (k * 1103515245 + seed) & 0xFFFFFF), (n, offset, seed)


def test_long_patterns_from_the_cached_period_equal_their_definition(monkeypatch):
    """Patterns longer than _DIRECT_MAX (and any once their period is cached) are copied out of
    one cached period, rotated by their offset: they must equal the arithmetic definition
    across the period's end, for copies, small values and sums of ranks."""
    from gputopo.bench import patterns as P

    monkeypatch.setattr(P, "_PERIOD", 1 << 12)  # small period: the wrap is cheap to check
    monkeypatch.setattr(P, "_DIRECT_MAX", 1 << 10)
    monkeypatch.setattr(P, "_cache", type(P._cache)())
    monkeypatch.setattr(P, "_cache_bytes", {})

    def arith(n, seed, offset, small=False):  # the definition, with the test's period
        k = torch.arange(offset, offset + n, dtype=torch.int64) % P._PERIOD
        r = (k * 1103515245 + seed) & 0xFFFFFF
        return (r >> 14 if small else r).to(torch.float32)

    n, off = 3 * (1 << 12) + 77, (1 << 12) - 5  # starts 5 before the end of a period
    assert torch.equal(fill_pattern(torch.empty(n), 7, off), arith(n, 7, off))
    assert torch.equal(fill_small(torch.empty(n), 9, off), arith(n, 9, off, small=True))
    long = P.expected(n, 7, "cpu", off)
    assert isinstance(long, P.Periodic)  # longer than a period: never written out
    assert torch.equal(long.materialize(), arith(n, 7, off))
    # once the period is cached, short patterns are slices of it too
    assert torch.equal(P.expected(100, 7, "cpu", 3), arith(100, 7, 3))
    assert torch.equal(P.expected_sum(n, (101, 211), "cpu").materialize(),
                       arith(n, 101, 0, small=True) + arith(n, 211, 0, small=True))
    # slices of a periodic expected result: across the period's end, and within one period
    assert torch.equal(long[4000:9000].materialize(), arith(5000, 7, off + 4000))
    assert torch.equal(long[10:100], arith(90, 7, off + 10))


def test_every_seed_reads_its_pattern_from_one_period_of_its_kind(monkeypatch):
    """At the real period (2**24), (k * A + seed) mod 2**24 is seed 0's pattern rotated, so
    one cached period of copy values and one of small values serve every role's seed: each
    seed's pattern must still equal the definition (short, across the period's end, longer
    than a period, and a sum of ranks), and no period of another seed may be generated."""
    from gputopo.bench import patterns as P
    from gputopo.bench.suites import SEED_RANK

    monkeypatch.setattr(P, "_cache", type(P._cache)())
    monkeypatch.setattr(P, "_cache_bytes", {})
    period = 1 << 24

    def written(e):  # a view of a period, or a Periodic where the rotation crosses its end
        return e.materialize() if isinstance(e, P.Periodic) else e
    for seed in (11, 23, 37, 41, 53, 101, 211, period - 1, 0):
        for small in (False, True):
            arith = lambda n, off, seed=seed, small=small: _arithmetic(n, seed, off, small)  # noqa: E731
            assert torch.equal(P.expected(999, seed, "cpu", 5, small=small), arith(999, 5))
            wrap = P.expected(3000, seed, "cpu", period - 1000, small=small)  # a period's end
            assert torch.equal(written(wrap), arith(3000, period - 1000))
            long = P.expected(period + 64, seed, "cpu", 77, small=small)
            assert isinstance(long, P.Periodic)
            assert torch.equal(written(long[period - 100:period + 64]), arith(164, period - 23))
            t = (P.fill_small if small else P.fill_pattern)(torch.empty(5 << 20), seed, 3)
            assert torch.equal(t[-50:], arith(50, 3 + (5 << 20) - 50))
    total = P.expected_sum(period, SEED_RANK, "cpu")
    assert torch.equal(written(total[period - 40:period]),
                       sum(_arithmetic(40, s, period - 40, small=True) for s in SEED_RANK))
    periods = {(key[1], key[3]) for key in P._cache if key[0] == period}
    assert periods == {(0, False), (0, True), (("sum",) + tuple(SEED_RANK), True)}


def test_compare_reads_a_periodic_expected_result_a_period_at_a_time(monkeypatch):
    """compare() against a Periodic must count every wrong element and find the first one
    wherever it lies (in the first segment, past a period's end, in the last element), exactly
    as against the same result written out."""
    from gputopo.bench import patterns as P

    monkeypatch.setattr(P, "_PERIOD", 1 << 12)
    monkeypatch.setattr(P, "_DIRECT_MAX", 1 << 10)
    monkeypatch.setattr(P, "_cache", type(P._cache)())
    monkeypatch.setattr(P, "_cache_bytes", {})
    n, off = 3 * (1 << 12) + 77, (1 << 12) - 5
    exp = P.expected(n, 7, "cpu", off)
    assert isinstance(exp, P.Periodic)
    good = fill_pattern(torch.empty(n), 7, off)
    assert V.compare(good, exp) == (0, None)
    for bad in ([3], [4, 5000], [9000, 12000, n - 1], [n - 1]):
        damaged = good.clone()
        damaged[bad] = -1.0
        assert V.compare(damaged, exp) == (len(bad), bad[0])
        assert V.compare(damaged, exp) == V.compare(damaged, exp.materialize())
    shaped = exp.view(n, 1)  # what _sum_expected does to lay a result over parameter shapes
    assert V.compare(good.view(n, 1), shaped) == (0, None)
    with pytest.raises(ValueError, match="size mismatch"):
        V.compare(good[:-1], exp)


@pytest.mark.parametrize("piece", [1 << 8, 1000, 1 << 20])
def test_compare_in_pieces_counts_every_wrong_element_and_the_first(monkeypatch, piece):
    """The CPU compare walks the period piece by piece, every repeat of a piece in turn, so
    it meets a later element first when it lies over an earlier piece of the period: the
    count and the first bad index must still be those of the whole buffer, for pieces that
    divide the period, that do not, and one larger than it (a plain tensor's single piece)."""
    from gputopo.bench import patterns as P

    monkeypatch.setattr(P, "_PERIOD", 1 << 12)
    monkeypatch.setattr(P, "_DIRECT_MAX", 1 << 10)
    monkeypatch.setattr(V, "_PIECE", piece)
    monkeypatch.setattr(P, "_cache", type(P._cache)())
    monkeypatch.setattr(P, "_cache_bytes", {})
    n, off = 3 * (1 << 12) + 77, (1 << 12) - 5
    exp = P.expected(n, 7, "cpu", off)
    good = fill_pattern(torch.empty(n), 7, off)
    # element 8200 lies over the period's element 3, met before element 900 (period's 895)
    for bad in ([900, 8200], [8200], [0, 4101, 12364], list(range(4000, 4200))):
        damaged = good.clone()
        damaged.view(torch.int32)[bad] ^= 1 << 30
        assert V.compare(damaged, exp) == (len(bad), bad[0])
        assert V.compare(damaged, exp.materialize()) == (len(bad), bad[0])
    strided = torch.empty(2 * n)[::2]  # not contiguous: compared through a copy
    strided.copy_(good)
    assert V.compare(strided, exp) == (0, None)


def test_a_checked_output_is_left_poisoned_and_poison_skips_it_only_while_untouched():
    """compare(..., poison_after=True) poisons what it checked, so the next sample's poison()
    need not write it again; any write to the tensor since (through it or a view) must make
    poison() write it after all, or a transfer that never happened would pass."""
    from gputopo.bench import patterns as P

    n = 3 * V._PIECE + 5
    exp = P.expected(n, 7, "cpu")
    for shape in ((n,), (n, 1)):
        out = fill_pattern(torch.empty(n), 7).view(shape)
        assert V.compare(out, exp, poison_after=True) == (0, None)
        assert bool((out == POISON).all())
        out.view(-1)[n - 1] = 5.0  # a write through a view since the check
        V.poison(out)
        assert bool((out == POISON).all())
        out.fill_(2.0)  # poisoned by poison() itself: no mark left, so it writes again
        V.poison(out)
        assert bool((out == POISON).all())
        fill_pattern(out.view(-1), 7)
        V.compare(out, exp, poison_after=True)
        out.view(-1).numpy()[0] = 3.0  # unseen by torch's version counter: shows the skip
        V.poison(out)
        assert out.view(-1)[0] == 3.0 and bool((out.view(-1)[1:] == POISON).all())
    strided = torch.empty(2 * n)[::2]
    strided.copy_(fill_pattern(torch.empty(n), 7))
    assert V.compare(strided, exp, poison_after=True) == (0, None)
    assert bool((strided == POISON).all())


@pytest.mark.parametrize("test", ["p2p.copy", "p2p.copy_bidir", "dp.scatter", "dp.gather",
                                  "dp.broadcast_coalesced", "dp.reduce_add",
                                  "collective.all_gather", "collective.reduce_scatter",
                                  "collective.broadcast", "collective.all_reduce"])
def test_a_transfer_that_never_happens_is_wrong_in_every_sample_it_skips(seed, monkeypatch, test):
    """Outputs are poisoned before every sample (by compare() after the previous check, or by
    refill): if the fabric silently skips its transfers in some samples, each of those samples
    is wrong, whatever the previous sample left in the buffers. Every buffer comes from the
    sim's caching allocator (host_blocks), which hands a freed block back with what its last
    user left: the worst case, where a scratch block of the sample before holds the right sum."""
    monkeypatch.setattr(host_blocks, "MIN_BYTES", 0)
    pair = (0, 1)  # NVLink: no fault of its own
    ops = SimOps(pair, pair, SimModel(seed, {}))
    skip_samples = {1, 2, 4}
    now = {}
    timed, transfers = ops.timed, ops.transfers

    def timed_noting_the_sample(run, gpus, *, repeat, seed, sample):
        now["sample"] = sample
        return timed(run, gpus, repeat=repeat, seed=seed, sample=sample)

    def transfers_that_drop(items, route="p2p"):
        if now.get("sample") not in skip_samples:
            transfers(items, route)

    monkeypatch.setattr(ops, "timed", timed_noting_the_sample)
    monkeypatch.setattr(ops, "transfers", transfers_that_drop)
    size = 4 * (3 * (1 << 18) + 64 * 5)  # more than one compare piece, rows of 64
    (case,) = [c for c in cases_for(test.split(".")[0].replace("collective", "collectives"),
                                    pair, (size,), (4,)) if c.test == test][:1]
    m = measure(build_spec(ops, case, latency_repeat=5), ops, warmup=1, samples=6,
                link_class="NV4")
    assert m.extra["wrong_samples"] == len(skip_samples), (test, m.extra["wrong_samples"])


def test_sim_damage_does_not_depend_on_what_the_worker_ran_before(seed):
    """A sim worker lives for the whole run and measures pairs in whatever order the pool hands
    them out: the elements a corrupt fault damages must follow from the measurement and the
    sample, so the same plan gives the same wrong counts and first bad index every time."""
    pair = (0, 4)  # NODE on seed-8gpu: peer copies corrupt
    model = SimModel(seed, {})

    def measured(m):
        ops = SimOps(pair, pair, m)
        return [(x.test, x.direction, x.wrong, x.first_bad_index)
                for c in cases_for("p2p", pair, (64 << 10,), (4,))
                for x in [measure(build_spec(ops, c, latency_repeat=5), ops, warmup=1, samples=3,
                                  link_class="NODE")]]

    fresh = measured(model)
    assert any(w for _, _, w, _ in fresh)  # the fault did damage something
    _run(seed, (2, 6), "dp")  # other work in between (another model: nothing shared but code)
    measured(SimModel(seed, {}))
    assert measured(model) == fresh  # the same model again, after its own earlier hits


def test_shapes_and_buckets():
    for n in (1, 7, 1000, 1 << 20):
        shapes = param_shapes(n)
        assert sum(math.prod(s) for s in shapes) == n
    assert chunk_rows(64, 2) == [(0, 32), (32, 64)]
    assert chunk_rows(5, 2) == [(0, 3), (3, 5)]
    mib = 1 << 20
    # element counts: 4 MiB + 4 MiB fill a 10 MiB bucket, then 8 MiB + 1 MiB
    assert buckets([(mib,), (mib,), (2 * mib,), (mib // 4,)], 10 * mib) == [[0, 1], [2, 3]]


def test_measurement_statistics_from_the_loop(seed):
    (m,) = [m for m in _run(seed, (0, 1), "p2p") if m.test == "p2p.copy" and m.direction == "0->1"]
    assert isinstance(m, Measurement) and m.timing == "modeled" and m.fabric == "sim"
    assert m.n == 3 and m.wrong == 0 and m.first_bad_index is None
    model = seed.link_model(0, 1)
    expect = model.latency_us * 1e-6 + (64 << 10) / (model.gbps * 1e9)
    assert all(abs(t / expect - 1) <= JITTER + 1e-9 for t in m.samples_s)
    assert len(set(m.samples_s)) == 3 and not m.noisy  # jitter: spread, but small
    again = [x for x in _run(seed, (0, 1), "p2p") if x.test == "p2p.copy" and x.direction == "0->1"]
    assert again[0].samples_s == m.samples_s  # deterministic


def test_sys_pair_corrupts_peer_copies_and_dp_not_staged_or_collectives(seed):
    ms = _run(seed, (0, 4), "p2p") + _run(seed, (0, 4), "dp") + _run(seed, (0, 4), "collectives")
    wrong = {m.test for m in ms if m.wrong}
    # raw peer copies: tensor copies and DataParallel's scatter/gather
    assert {"p2p.copy", "p2p.copy_bidir", "dp.scatter", "dp.gather"} <= wrong
    # NCCL's route (host memory on SYS): collectives, and DataParallel's broadcast/reduce_add,
    # which torch hands to torch.cuda.nccl; staged copies go through host memory too
    assert not wrong & {"p2p.staged", "collective.all_reduce", "collective.all_gather",
                        "collective.reduce_scatter", "collective.broadcast",
                        "dp.broadcast_coalesced", "dp.reduce_add"}
    copy = next(m for m in ms if m.test == "p2p.copy" and m.size_bytes == 64 << 10)
    n = copy.size_bytes // 4
    assert 0.0002 * n < copy.wrong < 0.005 * n  # rate 0.001 of the elements
    assert copy.first_bad_index is not None and copy.extra["path"] == "p2p"


def test_nvlink_pair_clean_and_collectives_exact(seed):
    ms = _run(seed, (0, 1), "dp") + _run(seed, (0, 1), "collectives", sizes=(4096, 1 << 20))
    assert all(m.wrong == 0 for m in ms), [(m.test, m.wrong) for m in ms if m.wrong]
    ar = next(m for m in ms if m.test == "collective.all_reduce" and m.size_bytes == 1 << 20)
    assert ar.busbw_factor == 1.0 and ar.extra["path"] == "p2p"


def test_nccl_p2p_disable_moves_nvlink_collectives_to_host(seed):
    base = _run(seed, (0, 1), "collectives", sizes=(1 << 20,))
    off = _run(seed, (0, 1), "collectives", sizes=(1 << 20,), env={"NCCL_P2P_DISABLE": "1"})
    a = next(m for m in base if m.test == "collective.all_reduce")
    b = next(m for m in off if m.test == "collective.all_reduce")
    assert b.extra["path"] == "host" and b.busbw_gbps < a.busbw_gbps / 2


FAULTY = """
extends = "pcie-4gpu"
name = "faulty-4gpu"
[[fault]]
where = "pair:0,1"
what = "slow"
factor = 0.25
[[fault]]
where = "pair:2,3"
what = "nan"
path = "all"
rate = 0.01
"""


def test_slow_and_nan_faults_in_process():
    desc = parse_description(FAULTY, "<faulty>")
    healthy = load_description("pcie-4gpu")
    slow = next(m for m in _run(desc, (0, 1), "p2p", sizes=(1 << 20,)) if m.test == "p2p.copy")
    ref = next(m for m in _run(healthy, (0, 1), "p2p", sizes=(1 << 20,)) if m.test == "p2p.copy")
    ratio = slow.algbw_gbps / ref.algbw_gbps
    # latency is not slowed, so slightly above the factor
    assert 0.25 <= ratio < 0.27, ratio
    ms = _run(desc, (2, 3), "collectives") + _run(desc, (2, 3), "p2p")
    assert {m.test for m in ms if m.wrong} >= {"collective.all_reduce", "p2p.staged", "p2p.copy"}


@pytest.mark.parametrize("size", [4, 12, 1000])
def test_odd_and_tiny_sizes_verify_clean(seed, size):
    for group in ("p2p", "dp", "collectives"):
        ms = _run(seed, (0, 1), group, sizes=(size,), samples=2)
        assert ms and all(m.wrong == 0 and m.n == 2 for m in ms), group


def test_measure_beats_after_each_warmup_run_and_sample(seed):
    """The worker's sign of progress: one beat per warm-up run and per sample, so the runner's
    --timeout ("no progress for N s") bounds one transfer, not a whole measurement."""
    ops = SimOps((0, 1), (0, 1), SimModel(seed, {}))
    (case,) = [c for c in cases_for("p2p", (0, 1), (64 << 10,), (4,))
               if c.test == "p2p.copy" and c.direction == "0->1"]
    beats = []
    m = measure(build_spec(ops, case, latency_repeat=5), ops, warmup=2, samples=4,
                link_class="NV4", beat=lambda: beats.append(1))
    warm = 2 if ops.needs_warmup else 0
    assert m.n == 4 and len(beats) == warm + 4


def test_case_preparation_beats_while_it_runs_and_stops_before_it_returns():
    """Preparing a 256 MiB case takes seconds on a busy CPU: beats go out meanwhile (a short
    --timeout turned healthy pairs into hangs), and none after it returns (one sender)."""
    import time

    from gputopo.bench import worker

    sent = []
    prepare = worker._beating(lambda: time.sleep(5 * worker.BEAT_S) or "prepared",
                              lambda: sent.append(time.monotonic()))
    assert prepare() == "prepared"
    done = time.monotonic()
    assert len(sent) >= 2
    time.sleep(2 * worker.BEAT_S)
    assert all(t <= done for t in sent) and len(sent) <= 5


def test_case_preparation_stuck_for_ever_stops_beating(monkeypatch):
    """A preparation that never returns (a wedged GPU) must still end as a hang."""
    import time

    from gputopo.bench import worker

    monkeypatch.setattr(worker, "PREPARE_BEATS_MAX_S", 3 * worker.BEAT_S)
    sent = []
    worker._beating(lambda: time.sleep(10 * worker.BEAT_S), lambda: sent.append(1))()
    assert 1 <= len(sent) <= 3


def test_nccl_labelled_dp_primitives_count_as_collective_path():
    """Issue 8: dp.broadcast_coalesced / dp.reduce_add run through torch.cuda.nccl; a wrong
    result there is the collective transport's, not a raw peer copy's."""
    from gputopo.report.measured_findings import corrupt_findings, path_kind
    from gputopo.model import Measurement

    def m(test, path, wrong=0):
        return Measurement(test=test, gpus=(0, 1), size_bytes=1 << 20, samples_s=[1e-3],
                           timing="modeled", fabric="sim", figures_of="simulated-gpus", wrong=wrong, extra={"path": path},
                           link_class="SYS")

    assert path_kind(m("dp.broadcast_coalesced", "nccl")) == "collective"
    assert path_kind(m("dp.reduce_add", "nccl")) == "collective"
    assert path_kind(m("dp.scatter", "p2p")) == "peer"
    (f,) = corrupt_findings([m("dp.reduce_add", "nccl", wrong=3), m("p2p.staged", "host")])
    assert f.evidence["tests"]["dp.reduce_add"]["path"] == "collective"
    assert "staged through host memory were correct" not in f.message


def test_pair_summary_has_no_wrong_count_where_nothing_completed():
    """bench's table showed '#wrong 0 hang' for a pair whose every transfer hung: nothing was
    compared, so the count is None ('-' in the table), and 0 only after a completed transfer."""
    from gputopo.bench.results import pair_summary
    from gputopo.model import Measurement

    def m(error=None, wrong=0):
        return Measurement(test="p2p.copy", gpus=(0, 1), size_bytes=1 << 20,
                           samples_s=[] if error else [1e-4], timing="modeled", fabric="sim", figures_of="simulated-gpus",
                           direction="0->1", wrong=wrong, error=error)

    assert pair_summary((0, 1), "SYS", [])["wrong"] is None
    assert pair_summary((0, 1), "SYS", [m(error="TimeoutError: hung")])["wrong"] is None
    assert pair_summary((0, 1), "SYS", [m(error="TimeoutError: hung"), m()])["wrong"] == 0
    assert pair_summary((0, 1), "SYS", [m(wrong=5)])["wrong"] == 5
