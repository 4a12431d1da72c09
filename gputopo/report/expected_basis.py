"""What one measured series is judged against, and how far below it may fall.

Two bases, in this order (issue: "judged against the closest reference where one exists, and
against theoretical x a typical efficiency otherwise"):

- ``reference``: a published figure of a healthy machine with the same GPU model, link class,
  test and GPU count (references.py); below REFERENCE_FRACTION of it is slow. This is also how a
  slow-by-design path (PCIe across the sockets of an Intel host) is "expected for this class on
  this platform" instead of a fault.
- ``theoretical``: the link's theoretical rate (expected.py); plain peer copies below
  SLOW_EFFICIENCY of it are slow. Other series have no theoretical basis (an all_reduce's busbw
  depends on the algorithm), so without a reference they are judged only against their peers.

A copy staged through host memory whose pair class is unknown (an import without --topo) is
judged by the "PCIe" rows: it crosses each GPU's PCIe link whatever joins the pair.
A series whose link class is unknown (a job over several hosts: no one machine's topology has a
class for it) is offered the rows measured across the trays of one NVLink domain (MNNVL rows, for
more GPUs than a tray holds). Reaching such a figure is "as expected"; falling below it is said
(info), not called a fault, since those hosts may be joined only by the network.
Series that reach their reference are said too (expected_notes): "is this number expected?" has
an answer either way. A series far above its reference (more than ABOVE_REFERENCE_FACTOR of it)
is not "as expected" either: the published figure is the lower end of what a healthy machine
reached, and one this far below what was measured was most likely taken on another machine (an
older CPU interconnect, another link or tool), so that note says the reference may not fit.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from gputopo.model import Topology, is_value
from gputopo.model.finding import gpu_ranges

from .headline import HEADLINE_ORDER, Headline
from .network_floor import FLOOR_FRACTION, nic_floor, spans_hosts
from .imported_tests import STAGED_TESTS, is_bidirectional_total, is_host_copy, is_peer_copy
from .references import MNNVL, REFERENCE_FRACTION, Reference, closest_reference

#: A pure link transfer below this fraction of the theoretical rate is `slow` (warning).
#: Good hardware reaches 0.8-0.9 (docs/report.md), so 0.5 leaves room for overheads, not for faults.
SLOW_EFFICIENCY = 0.5
#: A series above this multiple of its published figure is not said "as expected": the figure (the
#: lower end of healthy machines' range; published ranges span up to ~1.3x) may not fit it.
ABOVE_REFERENCE_FACTOR = 1.5
#: Series judged against the theoretical rate: plain peer copies, nothing else in the way.
SLOW_SERIES = ("p2p.copy", "p2p.copy_bidir")


@dataclass(frozen=True)
class Judged:
    """A series' figure against its basis: ``fraction`` = measured / ``expected_gbps``."""

    basis: str  # "reference" | "theoretical" | "nics" (a job across hosts: network_floor.py)
    expected_gbps: float
    fraction: float
    threshold: float
    text: str  # "the 376 GB/s published for 8x H100 SXM (...)" / "the link's theoretical 100 GB/s"
    reference: Optional[Reference] = None
    #: False where the series' link class is unknown and the reference is an MNNVL row offered to
    #: it (the hosts may be joined by NVLink or only by the network: below it is not a fault)
    class_known: bool = True

    @property
    def as_expected(self) -> bool:
        return self.fraction >= self.threshold

    @property
    def far_above(self) -> bool:
        """Far above a published figure: that figure may not fit this machine (not a fault)."""
        return self.basis == "reference" and self.fraction > ABOVE_REFERENCE_FACTOR


def gpu_names(topo: Optional[Topology], gpus) -> List[str]:
    """The NVML names of ``gpus`` (empty when any is unknown: a mixed or unknown set matches
    only rows for any model)."""
    if topo is None:
        return []
    names = []
    for g in gpus:
        try:
            name = topo.gpu(g).name
        except KeyError:
            return []
        if not is_value(name) or not name:
            return []
        names.append(str(name))
    return names


def platform_of(topo: Optional[Topology]) -> Optional[str]:
    vendor = topo.host.cpu_vendor if topo is not None and topo.host is not None else None
    return str(vendor) if is_value(vendor) and vendor else None


def reference_test(test: str) -> str:
    """The bench series an imported one measures the same way as (the table's test names):
    nvbandwidth's and p2pBandwidthLatencyTest's one-way peer copies are ``p2p.copy``, their
    one-way host copies ``self.h2d`` / ``self.d2h`` (not the bidirectional ones), their copies
    staged through host memory ``p2p.staged``."""
    if is_peer_copy(test):
        return "p2p.copy"
    if test == "p2p.copy_bidir_read":
        return "p2p.copy_bidir"
    if test in STAGED_TESTS and not is_bidirectional_total(test):
        # copies through host memory, however the tool names them (p2pBandwidthLatencyTest's
        # P2P=Disabled matrix, or its P2P=Enabled one on a pair without peer access)
        return "p2p.staged"
    if is_host_copy(test):
        name = test.removeprefix("nvbandwidth.")
        if "bidirectional" in name:
            return test  # one direction measured while the other runs: no one-way figure fits it
        return "self.h2d" if name.startswith("host_to_device") else "self.d2h" if name.startswith(
            "device_to_host") else test
    return test


def reference_match(h: Headline, topo: Optional[Topology]) -> Optional[Tuple[Reference, bool]]:
    """(the published figure a headline is compared with, whether its link class is known), if
    one matches its metric too. A series of unknown class is offered the MNNVL rows only."""
    test = reference_test(h.test)
    link_class = "host" if test.startswith("self.") else h.link_class
    names, platform = gpu_names(topo, h.gpus), platform_of(topo)
    ref = closest_reference(test, len(h.gpus), link_class, names, platform)
    known = True
    if ref is None and link_class is None and test == "p2p.staged":
        # a copy staged through host memory crosses each GPU's PCIe link whatever joins the pair
        ref = closest_reference(test, len(h.gpus), "PCIe", names, platform)
    if ref is None and link_class is None:
        ref, known = closest_reference(test, len(h.gpus), MNNVL, names, platform), False
    return (ref, known) if ref is not None and ref.metric == h.metric else None


def reference_for(h: Headline, topo: Optional[Topology]) -> Optional[Reference]:
    """The published figure a headline is compared with, if one matches its metric too."""
    match = reference_match(h, topo)
    return match[0] if match is not None else None


def judge_rate(h: Headline, topo: Optional[Topology]) -> Optional[Judged]:
    """The basis a headline is judged on, or None when it has none (then it is not judged slow:
    nothing is concluded from a figure with nothing to compare it with)."""
    if not h.of_gpus:
        return None
    match = reference_match(h, topo)
    if match is not None:
        ref, known = match
        return Judged("reference", ref.gbps, h.gbps / ref.gbps, REFERENCE_FRACTION,
                      f"the {ref.gbps:g} GB/s {ref.metric} published for {ref.machine} "
                      f"({ref.tool}; {ref.source})", ref, class_known=known)
    if (h.series in SLOW_SERIES or is_peer_copy(h.series)) and len(h.gpus) == 2 and h.efficiency is not None and h.expected.gbps:
        return Judged("theoretical", h.expected.gbps, h.efficiency, SLOW_EFFICIENCY,
                      f"the link's theoretical {h.expected.gbps:g} GB/s ({h.expected.basis})")
    if spans_hosts(h, topo):
        floor = nic_floor(topo)
        if floor is not None and floor.gbps > 0:
            return Judged("nics", floor.gbps, h.gbps / floor.gbps, FLOOR_FRACTION, floor.text)
    return None


#: How every line of expected_notes begins (the terminal picks them out of a summary's notes).
AS_EXPECTED = "as expected: "
#: How expected_notes' lines for a series far above its published figure begin.
ABOVE_REFERENCE = "above the reference: "
#: What a series judged against an MNNVL row it was offered (its link class unknown) cannot tell.
UNKNOWN_TRAY_LINK = ("the link between the hosts is not in this output: below this figure is a "
                     "fault where they share one NVLink domain (multi-node NVLink not in use: "
                     "NCCL_MNNVL_ENABLE, the IMEX channels), and expected where only the network "
                     "joins them (another rack, GB200 NVL4 nodes)")


def _span(xs: List[float], fmt: str) -> str:
    lo, hi = min(xs), max(xs)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}-{fmt.format(hi)}"


def _where(hs: List[Headline]) -> str:
    """'GPUs 0-7', 'GPU 3', '28 pairs', '4 GPU sets' or 'the whole job (its GPUs not named)'."""
    where = sorted({h.pair_key for h in hs})
    if where == [()]:
        return "the whole job (its GPUs not named)"
    if len(where) == 1:
        gpus = where[0]
        return f"GPUs {gpu_ranges(gpus)}" if len(gpus) > 1 else f"GPU {gpus[0]}"
    if all(len(w) == 1 for w in where):
        return f"GPUs {gpu_ranges([w[0] for w in where])}"
    return f"{len(where)} {'pairs' if all(len(w) == 2 for w in where) else 'GPU sets'}"


def expected_notes(heads: List[Headline], topo: Optional[Topology]) -> List[str]:
    """One line per published figure that measured series reached (at least its threshold):
    "as expected" with the figure, the share of it and its source, or, for series more than
    ABOVE_REFERENCE_FACTOR of it, "above the reference" (the figure may not fit this machine).
    Series below it are `slow` findings (bandwidth_findings.py); these lines say the rest, so the
    question "is this number expected?" is answered for every series a row matches."""
    groups: Dict[tuple, List[Tuple[Headline, Judged]]] = defaultdict(list)
    for h in heads:
        j = judge_rate(h, topo)
        if j is not None and j.basis == "reference" and j.reference is not None and j.as_expected:
            groups[(j.reference.id, h.test, j.class_known, j.far_above)].append((h, j))
    notes = []
    for (_, test, known, above), hjs in groups.items():
        h0, j0 = hjs[0]
        what = _where([h for h, _ in hjs])
        classes = sorted({h.link_class for h, _ in hjs if h.link_class})
        cls = f" ({', '.join(classes)})" if classes else ""
        gbps = _span([h.gbps for h, _ in hjs], "{:.3g}")
        share = _span([j.fraction * 100 for _, j in hjs], "{:.0f}")
        if above:
            line = (f"{ABOVE_REFERENCE}{test} on {what}{cls}: {gbps} GB/s {h0.metric} = {share}% of {j0.text}: "
                    f"more than {ABOVE_REFERENCE_FACTOR:g}x a healthy machine's published figure, so the "
                    "reference may not fit this machine (another CPU generation, link or tool); not a "
                    "fault, and not confirmed by it either")
        else:
            line = (f"{AS_EXPECTED}{test} on {what}{cls}: {gbps} GB/s {h0.metric} = {share}% of {j0.text} "
                    f"(at least {REFERENCE_FRACTION:.0%})")
        if not known:
            line += "; the link between the hosts is not in this output"
        notes.append(line)
    return notes



#: How every line of no_reference_notes begins (the terminal picks them out of a summary's notes).
NO_REFERENCE = "not known: "
#: Series no published figure could ever stand for (an on-device copy crosses no link).
NO_LINK_SERIES = ("self.d2d",)


def _model_text(names: List[str]) -> str:
    return " / ".join(sorted(set(names)))


def why_no_reference(h: Headline, topo: Optional[Topology]) -> str:
    """Why no row of the table applies to ``h``, in words (what would have to be known)."""
    names = gpu_names(topo, h.gpus)
    test = reference_test(h.test)
    link_class = "host" if test.startswith("self.") or is_host_copy(h.test) else h.link_class
    n = len(h.gpus)
    if not names:
        what = "the output names no GPU" if not h.gpus else "the output does not name these GPUs' model"
        return f"GPU model unknown ({what}), so no published figure of a model can be chosen"
    if link_class is None and n == 1:
        return (f"a copy of GPU {h.gpus[0]}'s own (no link between GPUs in it): none published for "
                f"{_model_text(names)} for this copy")
    if link_class is None:
        return (f"link class unknown for {_model_text(names)} (no topology names the link between "
                "these GPUs), so no published figure of a link can be chosen")
    cls = "host copies" if link_class == "host" else link_class
    return f"none published for {_model_text(names)} {cls} on {n} GPU{'s' if n != 1 else ''}"


def no_reference_notes(heads: List[Headline], topo: Optional[Topology]) -> List[str]:
    """One line per GPU model, link class and reason for the measured series that no published
    figure applies to (reference_rates.csv has no row for their model, class, test and GPU count,
    or their model or class is unknown): "is this number expected?" then has no answer from the
    table, and that is said, with what the series was judged on instead (the link's theoretical
    rate, or nothing). An unknown is no fault, and no "ok" either: a run whose series none judged is
    `not-judged` (judged.py)."""
    groups: Dict[tuple, List[Tuple[Headline, Optional[Judged]]]] = defaultdict(list)
    for h in heads:
        if not h.of_gpus or h.test in NO_LINK_SERIES:
            continue
        j = judge_rate(h, topo)
        if j is not None and j.basis == "reference":
            continue
        groups[(why_no_reference(h, topo), h.link_class or "", len(h.gpus))].append((h, j))
    notes = []
    for (why, _, _), hjs in groups.items():
        tests = list(dict.fromkeys(h.test for h, _ in sorted(hjs, key=lambda hj: _order(hj[0].test))))
        classes = sorted({h.link_class for h, _ in hjs if h.link_class})
        cls = f" ({', '.join(classes)})" if classes else ""
        figures = ""
        if len(tests) == 1 and len({h.metric for h, _ in hjs}) == 1:
            figures = f": {_span([h.gbps for h, _ in hjs], '{:.3g}')} GB/s {hjs[0][0].metric}"
        theoretical = [t for t in tests if any(h.test == t and j is not None and j.basis == "theoretical"
                                               for h, j in hjs)]
        nics = [t for t in tests if any(h.test == t and j is not None and j.basis == "nics" for h, j in hjs)]
        unjudged = [t for t in tests if t not in theoretical and t not in nics]
        one = len(tests) == 1
        judged = []
        if theoretical:
            judged.append("judged against the link's theoretical rate only" + ("" if one else f": {', '.join(theoretical)}"))
        if nics:
            judged.append("judged against what the job's NICs carry only (a floor: above it is never suspicious)"
                          + ("" if one else f": {', '.join(nics)}"))
        if unjudged:
            judged.append("not judged against any rate (the figure is shown, neither called slow nor as expected)"
                          + ("" if one else f": {', '.join(unjudged)}"))
        what = tests[0] if one else f"{len(tests)} series"
        notes.append(f"{NO_REFERENCE}no reference rate for {what} on {_where([h for h, _ in hjs])}"
                     f"{cls}{figures}: {why}; " + "; ".join(judged))
    return notes


def _order(test: str) -> tuple:
    """Tests in HEADLINE_ORDER (the purest link measurement first), then the others by name."""
    return (HEADLINE_ORDER.index(test) if test in HEADLINE_ORDER else len(HEADLINE_ORDER), test)
