"""`corrupt` findings: wrong elements after a copy, a DataParallel primitive or a collective.

One finding per pair (or GPU, or collective group), gathering every test that returned wrong
data on it, because the *pattern* is the diagnosis: peer copies wrong while staged copies are
right points at the P2P path (IOMMU/ACS); staged copies wrong too points at a GPU or its link.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Dict, List, Optional

from gputopo.model import Finding, Measurement, Topology

from .causes import collective_broken, path_facts, peer_path_broken, staged_path_broken
from .headline import link_class_of

PEER_TESTS_PREFIX = ("p2p.copy", "p2p.latency", "dp.")
STAGED_TESTS_PREFIX = ("p2p.staged", "self.")


def path_kind(m: Measurement) -> str:
    """'peer', 'staged' or 'collective': which data path a measurement exercised."""
    if m.extra.get("path") == "host" or m.test.startswith(STAGED_TESTS_PREFIX):
        return "staged"
    if m.test.startswith("collective."):
        return "collective"
    return "peer"


def corrupt_findings(measurements: List[Measurement], topo: Optional[Topology]) -> List[Finding]:
    by_key: Dict[tuple, List[Measurement]] = defaultdict(list)
    for m in measurements:
        by_key[tuple(sorted(m.gpus))].append(m)
    out = []
    for gpus, ms in sorted(by_key.items()):
        bad = [m for m in ms if m.wrong and m.wrong > 0]
        if not bad:
            continue
        lc = link_class_of(topo, bad[0])
        tests: Dict[str, dict] = {}
        for m in bad:
            t = tests.setdefault(m.test, {"wrong": 0, "runs": 0, "sizes": [], "directions": [],
                                          "first_bad_index": None, "path": path_kind(m)})
            t["wrong"] += int(m.wrong)
            t["runs"] += 1
            if m.size_bytes not in t["sizes"]:
                t["sizes"].append(m.size_bytes)
            if m.direction and m.direction not in t["directions"]:
                t["directions"].append(m.direction)
            if t["first_bad_index"] is None and m.first_bad_index is not None:
                t["first_bad_index"] = m.first_bad_index
            count = m.extra.get("count")
            if isinstance(count, int) and count > 0:
                t["max_wrong_fraction"] = max(t.get("max_wrong_fraction", 0.0), round(m.wrong / count, 6))
        bad_paths = {t["path"] for t in tests.values()}
        clean = sorted({m.test for m in ms if m.ok and m.test not in tests})
        clean_paths = {path_kind(m) for m in ms if m.ok and m.test not in tests}
        facts = path_facts(topo, list(gpus), lc)
        if "staged" in bad_paths:
            cause, remedies = staged_path_broken(facts)
        elif "peer" in bad_paths:
            cause, remedies = peer_path_broken(facts, "corrupted")
        else:
            cause, remedies = collective_broken(facts)
        total = sum(t["wrong"] for t in tests.values())
        who = (f"GPU {gpus[0]}" if len(gpus) == 1 else f"GPUs {','.join(map(str, gpus))}") + (f" ({lc})" if lc else "")
        msg = (f"{who}: {total} wrong element(s) in {', '.join(sorted(tests))}")
        if "peer" in bad_paths and "staged" not in bad_paths and "staged" in clean_paths:
            msg += "; copies staged through host memory were correct"
        out.append(Finding(
            "corrupt", "error", msg, gpus=list(gpus), link_class=lc,
            evidence={"total_wrong": total, "tests": tests, "clean_tests": clean, **facts.evidence()},
            cause=cause, remedies=remedies))
    return out
