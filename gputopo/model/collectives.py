"""The collectives gputopo knows, one entry each: the one table every layer reads.

An entry says what nccl-tests' ``src/<name>.cu`` says in its ``testColl`` struct: how the
size of a case maps to each rank's buffers (``GetCollByteCount``), the bus-bandwidth factor
(``GetBw``), the operation that runs it and what each rank must hold afterwards (``InitData``'s
expected result). The planner (bench/plan.py) measures the entries that have a fabric
operation, the suite (bench/suites.py) builds and verifies them from ``sizing`` and
``result``, bench/results.py and check/spec.py list them, and the nccl-tests importer reads
every entry (nccl-tests runs them all). Adding a collective is one entry here plus its
operation on each fabric (bench/fabrics/: docs/architecture.md, "How to add ...").

Bandwidths are nccl-tests' (its doc/PERFORMANCE.md): algbw = size / time, where size is the
case's size (nccl-tests' ``size`` column: the larger of a rank's send and receive buffers),
and busbw = algbw x the factor for n ranks, a figure comparable with one link's rate whatever
the number of ranks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

#: Measurement.test of a collective: this prefix and the entry's name.
PREFIX = "collective."

# How a case's size (bytes, nccl-tests' size column) maps to each rank's buffers.
#: every rank sends and receives ``size`` bytes (all_reduce, broadcast, reduce, sendrecv)
WHOLE = "whole"
#: ``size`` is the gathered output; each rank sends ``size / n`` (all_gather, gather, hypercube)
GATHERED = "gathered"
#: ``size`` is each rank's input; each rank receives ``size / n`` (reduce_scatter, scatter)
SCATTERED = "scattered"
#: each rank sends and receives ``size`` bytes, in n chunks of ``size / n`` (alltoall)
EXCHANGED = "exchanged"

#: What a rank's output must hold afterwards, every rank's input being a known pattern.
RESULTS: Dict[str, str] = {
    "sum": "every rank: the elementwise sum of all ranks' inputs",
    "sum-at-root": "the root: the elementwise sum of all ranks' inputs",
    "sum-chunk": "rank r: chunk r of the elementwise sum of all ranks' inputs",
    "all-inputs": "every rank: all ranks' inputs, in rank order",
    "all-inputs-at-root": "the root: all ranks' inputs, in rank order",
    "root-input": "every rank: the root's input",
    "root-chunk": "rank r: chunk r of the root's input",
    "chunk-r-of-all": "rank r: chunk r of every rank's input, in rank order",
    "peer-input": "each rank: the input of the rank before it",
}


def _all_reduce_factor(n: int) -> float:
    """A ring reduce-scatter then a ring all-gather: 2(n-1)/n of the buffer crosses each link."""
    return 2 * (n - 1) / n


def _ring_factor(n: int) -> float:
    """n-1 of the n chunks cross each link."""
    return (n - 1) / n


def _one(n: int) -> float:
    """The whole buffer crosses each link once."""
    return 1.0


@dataclass(frozen=True)
class Collective:
    """One collective: its name (nccl-tests' op name), busbw factor, sizing and result."""

    name: str
    #: busbw / algbw for n ranks (nccl-tests' GetBw factor), algbw being size / time
    busbw: Callable[[int], float]
    #: how a case's size maps to each rank's buffers: WHOLE, GATHERED, SCATTERED or EXCHANGED
    sizing: str
    #: what each rank must hold afterwards: a key of RESULTS
    result: str
    #: the fabric operation (bench/fabrics/base.py's Ops method) the bench runs; None: gputopo
    #: does not run it, only imports nccl-tests' figures of it
    operation: Optional[str] = None
    #: one rank is the root (the planner measures it from a pair's first GPU to the second)
    rooted: bool = False
    #: other spellings of the name in nccl-tests' programs and users' file names
    spellings: Tuple[str, ...] = ()

    @property
    def test(self) -> str:
        """Its Measurement.test ("collective.all_reduce")."""
        return PREFIX + self.name

    def busbw_factor(self, ranks: int) -> float:
        """busbw / algbw over ``ranks`` ranks (at least 1)."""
        if ranks < 1:
            raise ValueError(f"{self.name}: {ranks} ranks")
        return self.busbw(ranks)

    def counts(self, elements: int, ranks: int) -> Tuple[int, int, int]:
        """(size, send, receive) in elements for a case of ``elements`` over ``ranks``: the size
        rounded down to whole chunks of ``elements / ranks`` (at least one element) where the
        buffers are cut in chunks, as nccl-tests' GetCollByteCount does."""
        if self.sizing == WHOLE:
            return elements, elements, elements
        per = max(1, elements // ranks)
        whole = per * ranks
        if self.sizing == GATHERED:
            return whole, per, whole
        if self.sizing == SCATTERED:
            return whole, whole, per
        return whole, whole, whole  # EXCHANGED


#: Every collective, the ones the bench runs first, in the order it measures them.
COLLECTIVES: Tuple[Collective, ...] = (
    Collective("all_reduce", _all_reduce_factor, WHOLE, "sum", "all_reduce", spellings=("allreduce",)),
    Collective("all_gather", _ring_factor, GATHERED, "all-inputs", "all_gather", spellings=("allgather",)),
    Collective("reduce_scatter", _ring_factor, SCATTERED, "sum-chunk", "reduce_scatter",
               spellings=("reducescatter",)),
    Collective("broadcast", _one, WHOLE, "root-input", "broadcast", rooted=True),
    Collective("reduce", _one, WHOLE, "sum-at-root", rooted=True),
    Collective("alltoall", _ring_factor, EXCHANGED, "chunk-r-of-all", spellings=("all_to_all",)),
    Collective("scatter", _ring_factor, SCATTERED, "root-chunk", rooted=True),
    Collective("gather", _ring_factor, GATHERED, "all-inputs-at-root", rooted=True),
    Collective("sendrecv", _one, WHOLE, "peer-input"),
    # nccl-tests prints hypercube's algbw as (n-1)/n of size / time with a factor of 1: the
    # same busbw as (n-1)/n of size / time
    Collective("hypercube", _ring_factor, GATHERED, "all-inputs"),
)

#: The collectives the bench measures (those with a fabric operation).
BENCH_COLLECTIVES: Tuple[Collective, ...] = tuple(c for c in COLLECTIVES if c.operation)

_BY_NAME: Dict[str, Collective] = {c.name: c for c in COLLECTIVES}


def collective(name: str) -> Collective:
    """The entry of ``name`` ("all_reduce") or of its test ("collective.all_reduce"); KeyError
    for a name the table does not hold."""
    return _BY_NAME[name[len(PREFIX):] if name.startswith(PREFIX) else name]


def is_collective(test: str) -> bool:
    """Whether a Measurement.test is a collective's (any, known to the table or not)."""
    return test.startswith(PREFIX)


def spellings() -> Dict[str, str]:
    """Every spelling of every collective -> its name; a spelling that contains another comes
    before it ("reduce_scatter" before "reduce" and "scatter"), the rest in table order."""
    pairs = [(s, c.name) for c in COLLECTIVES for s in (c.name, *c.spellings)]
    inside = {s for s, _ in pairs if any(s != t and s in t for t, _ in pairs)}
    return dict(sorted(pairs, key=lambda p: p[0] in inside))
