"""Findings from imported outputs (imported.json, written by `gputopo import nvbandwidth | p2pbw`)
that the measurements alone cannot carry:

- a testcase whose copy failed nvbandwidth's data check (``Invalid value when checking the
  pattern``) is ``corrupt`` (error), naming the testcase: the bytes that arrived were wrong;
- a testcase that died otherwise (``ASSERT``, a CUDA error, ``ERROR:``) is ``crash`` (error);
- what could not be read (a matrix cut short, ``...`` in a paste, bytes left unread) is
  ``incomplete-data`` (info: coverage, not a fault), one per problem, and the verdict line says
  what was not read (judged.py), so a partial import never reads as whole;
- (pairs the output shows without peer access are ``no-peer-access``: peer_access.py; an
  imported perftest run's findings: perftest_findings.py; each a rule of its own, rules.py)
- without link classes (no ``--topo``), a pair whose two directions of the same series differ
  by more than ASYMMETRY_RATIO is an ``outlier``: both directions cross the same link, so the
  comparison needs no class. With classes, like_gpus.py compares
  pairs of a class instead.
"""

from __future__ import annotations

import statistics

from collections import defaultdict

from gputopo.model import Finding, Measurement
from gputopo.model.flagged_lines import TOOL_LINES, quoted

from .headline import BANDWIDTH_MIN_SIZE_BYTES, measured_gbps
from .imported_tests import is_latency
from .run_folder import Run

#: One direction of a pair below this fraction of the other (same series, same size) is an outlier.
ASYMMETRY_RATIO = 0.7
IMPORT_SOURCES = ("nvbandwidth", "p2pBandwidthLatencyTest")
REMEDY_REIMPORT = "import the whole output (or run the test again) to judge what is missing"


def _failure_finding(doc: dict, f: dict) -> Finding:
    tool, file = doc.get("tool", "?"), doc.get("file", "?")
    tc = f.get("testcase") or "(testcase not named in the output)"
    where = f"{tool} {tc}" + (f" (line {f['line']} of {file})" if f.get("line") else f" ({file})")
    evidence = {"file": doc.get("path") or file, "testcase": f.get("testcase"), "message": f.get("message"),
                "details": f.get("details") or [], "tool": tool,
                TOOL_LINES: quoted([str(f.get("message") or "")] + [str(d) for d in f.get("details") or []])}
    if f.get("kind") == "pattern-check":
        return Finding(
            "corrupt", "error",
            f"{tool} {tc} delivered wrong data ({where.removeprefix(f'{tool} {tc} ').strip('()')}): the copied "
            f"bytes failed nvbandwidth's pattern check ({str(f.get('message', '')).strip()})",
            evidence=evidence,
            cause="a copy of this testcase delivered wrong data: a peer path that corrupts (IOMMU/ACS on PCIe, a "
                  "failing link or GPU); nvbandwidth stops at the first wrong value, so which pair is not known",
            remedies=["run the testcase per pair (gputopo bench --pairs I,J) to find the pair",
                      "check `dmesg` for Xid and IOMMU (DMAR / AMD-Vi) faults",
                      "rerun nvbandwidth with a smaller -b to see whether it repeats"])
    message = str(f.get("message", "")).strip()
    remedies = ["read the message above; check `dmesg` for Xid errors", REMEDY_REIMPORT]
    if "mapping of buffer object failed" in message or "cudaErrorMapBufferObjectFailed" in message:
        # CUDA could not map the peer GPU's memory for the peer copy: the step that needs it failed
        remedies.insert(0, "the peer GPU's memory could not be mapped (cudaErrorMapBufferObjectFailed): check that "
                           "Resizable BAR (large BAR) is on in the BIOS and the IOMMU is off or in passthrough")
    return Finding(
        "crash", "error", f"{tool} {tc} stopped before its results ({where.removeprefix(f'{tool} {tc} ').strip('()')}): "
                          f"{message[:160]}",
        evidence=evidence, cause=f"{tool} aborted here; this step's results and every later one are missing",
        remedies=remedies)


def _problem_findings(doc: dict) -> list[Finding]:
    tool, file = doc.get("tool", "?"), doc.get("file", "?")
    return [Finding("incomplete-data", "info", f"{tool} output {file}: {p}",
                    evidence={"file": doc.get("path") or file, "tool": tool}, remedies=[REMEDY_REIMPORT])
            for p in doc.get("problems") or []]


def asymmetry_findings(measurements: list[Measurement]) -> list[Finding]:
    """Pairs with no link class whose two directions of one imported series differ a lot."""
    by: dict[tuple[str, tuple[int, ...]], dict[str, tuple[float, Measurement]]] = defaultdict(dict)
    for m in measurements:
        if (m.extra.get("source") not in IMPORT_SOURCES or len(m.gpus) != 2 or m.link_class
                or is_latency(m.test) or not m.direction or "->" not in m.direction or "<->" in m.direction
                or m.size_bytes < BANDWIDTH_MIN_SIZE_BYTES):
            continue
        g = measured_gbps(m)
        if g is not None:
            by[(m.test, tuple(m.gpus))][m.direction] = (g, m)
    hits: dict[tuple[int, ...], list[dict]] = defaultdict(list)
    for (test, pair), dirs in sorted(by.items()):
        if len(dirs) != 2:
            continue
        (d1, (g1, _)), (d2, (g2, _)) = sorted(dirs.items(), key=lambda kv: kv[1][0])
        if g1 < ASYMMETRY_RATIO * g2:
            hits[pair].append({"series": test, "slow_direction": d1, "gbps": round(g1, 3),
                               "other_direction": d2, "other_gbps": round(g2, 3), "ratio": round(g1 / g2, 3)})
    out = []
    for pair, items in sorted(hits.items()):
        w = min(items, key=lambda d: d["ratio"])
        out.append(Finding(
            "outlier", "warning",
            f"GPUs {pair[0]},{pair[1]} (class unknown: no --topo): {w['series']} {w['slow_direction']} "
            f"{w['gbps']:.3g} GB/s is {w['ratio']:.0%} of {w['other_direction']} {w['other_gbps']:.3g} GB/s "
            f"over the same link (below {ASYMMETRY_RATIO:.0%})",
            gpus=list(pair), evidence={"threshold_ratio": ASYMMETRY_RATIO, "measured": items,
                                       "basis": "the pair's two directions (same link)"},
            cause="one direction of this pair's link is slower; why is not known from this output (no host "
                  "facts): a degraded link lane or retimer, a busy GPU, or ACS/IOMMU on one side of the path; a "
                  "scan of the machine tells the link state and the host settings",
            remedies=["import again with --topo (saved `nvidia-smi topo -m`) to compare the pair with its class",
                      "compare its link state in `gputopo scan`"]))
    return out


#: Series of copies staged through host memory: each crosses both GPUs' own links to the host,
#: whatever the path between the two GPUs.
STAGED_SERIES = ("p2p.staged", "p2p.staged_bidir", "p2p.staged_no_peer", "p2p.staged_no_peer_bidir")


def shared_gpu_findings(measurements: list[Measurement]) -> list[Finding]:
    """Without link classes, a GPU every one of whose staged-copy pairs runs below
    ASYMMETRY_RATIO of the median of the pairs without it (3+ GPUs besides it): a staged copy
    crosses each GPU's own link to the host and no peer path, so the slow part is that GPU's
    link (or the GPU), which no pair's class is needed to say."""
    out = []
    by_test: dict[str, dict[tuple[int, ...], float]] = defaultdict(dict)
    for m in measurements:
        if (m.extra.get("source") not in IMPORT_SOURCES or m.test not in STAGED_SERIES or len(m.gpus) != 2
                or m.link_class or m.size_bytes < BANDWIDTH_MIN_SIZE_BYTES):
            continue
        g = measured_gbps(m)
        if g is not None:
            pair = tuple(m.gpus)
            by_test[m.test][pair] = min(g, by_test[m.test].get(pair, g))  # the slower direction
    hits: dict[int, list[dict]] = defaultdict(list)
    for test, pairs in sorted(by_test.items()):
        gpus = sorted({g for p in pairs for g in p})
        for g in gpus:
            mine = {p: v for p, v in pairs.items() if g in p}
            rest = sorted(v for p, v in pairs.items() if g not in p)
            if len(gpus) < 4 or len(mine) < len(gpus) - 1 or len(rest) < 3:
                continue
            median = statistics.median(rest)
            worst = max(mine.values())
            if worst < ASYMMETRY_RATIO * median:
                hits[g].append({"series": test, "gpu": g, "max_gbps_with_gpu": round(worst, 3),
                                "min_gbps_with_gpu": round(min(mine.values()), 3), "pairs": len(mine),
                                "median_gbps_without_gpu": round(median, 3), "pairs_without": len(rest),
                                "ratio": round(worst / median, 3)})
    for g, items in sorted(hits.items()):
        w = min(items, key=lambda d: d["ratio"])
        out.append(Finding(
            "outlier", "warning",
            f"GPU {g} (class unknown: no --topo): {w['series']} with every other GPU ({w['pairs']} pairs) at "
            f"{w['min_gbps_with_gpu']:.3g}-{w['max_gbps_with_gpu']:.3g} GB/s, at most {w['ratio']:.0%} of the "
            f"{w['median_gbps_without_gpu']:.3g} GB/s median of the {w['pairs_without']} pairs without it "
            f"(below {ASYMMETRY_RATIO:.0%})",
            gpus=[g], evidence={"threshold_ratio": ASYMMETRY_RATIO, "measured": items,
                                "basis": "copies staged through host memory cross each GPU's own link to the "
                                         "host; the pairs without this GPU are the comparison"},
            cause=f"GPU {g}'s own path to the host is slower than the others' (the one part all its slow pairs "
                  "share); what on it is not known from this output: a narrower or older PCIe slot or riser, a "
                  "downtrained link, a BIOS setting of its slot (large BAR), or a slower GPU; a scan of the "
                  "machine tells the link's width and generation",
            remedies=[f"compare GPU {g}'s PCIe generation and width in `gputopo scan` (or `nvidia-smi -q -d PCIE`) "
                      "with the other GPUs'", "import again with --topo (saved `nvidia-smi topo -m`)"]))
    return out


def import_failure_findings(run: Run) -> list[Finding]:
    """Each imported testcase that failed: ``corrupt`` for nvbandwidth's data check, ``crash`` else."""
    return [_failure_finding(doc, f) for doc in run.imported for f in doc.get("failures") or [] if isinstance(f, dict)]


def import_problem_findings(run: Run) -> list[Finding]:
    """What an import could not read, one ``incomplete-data`` per problem."""
    return [f for doc in run.imported for f in _problem_findings(doc)]


def import_asymmetry_findings(run: Run) -> list[Finding]:
    """An imported pair without link classes whose two directions differ a lot (``outlier``)."""
    return asymmetry_findings(run.measurements) if run.imported else []


def import_shared_gpu_findings(run: Run) -> list[Finding]:
    """An imported GPU without link classes all of whose staged pairs are slow (``outlier``)."""
    return shared_gpu_findings(run.measurements) if run.imported else []
