"""Published figures of healthy machines, and which one a measured series is judged against.

Users ask "is this number expected?" more than anything else. The theoretical link rate answers
it badly: an H100 NV18 pair reaches ~84 % of its 450 GB/s, an all_reduce's busbw depends on the
algorithm, and PCIe traffic across the sockets of an Intel host is slow by design (NCCL models it
at 10 GB/s). So every bandwidth verdict first looks for a published figure of the same GPU model,
link class, test and GPU count (data/reference_rates.csv, one row per figure with its public
source), and falls back to the theoretical rate only where no row matches.

A row's ``gbps`` is what a healthy machine reached; a measurement below REFERENCE_FRACTION of it
is slow. The closest row wins: an exact link class over "PCIe" (any PCIe class), a named platform
over any, a named model over any. A row's model is matched by whole words of the GPU's name, and
the name's board words (PCIe, NVL, SXM<n>) must lie inside the match (``model_matches``): GH200 is
not H200, GB200 not B200, H100 PCIe and H100 NVL not the H100 SXM a row measured.

Rows of class MNNVL are figures measured across the trays (hosts) of one NVLink domain (multi-node
NVLink: the trays of a GB200 NVL72 rack), for more GPUs than one tray holds. No single machine's
topology names that link, so expected_basis.py also offers them to a series whose class is
unknown, and says so (a figure below them is then a note, not a fault: those trays may be joined
only by the network).
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable, List, Optional, Sequence

#: A measurement below this fraction of a published healthy figure is `slow` (warning). Published
#: figures are the lower end of what healthy machines reached, so 0.75 leaves room for run-to-run
#: spread and a different driver, not for a fault.
REFERENCE_FRACTION = 0.75
#: Where the rows live (shipped as package data).
TABLE_PATH = Path(__file__).with_name("data") / "reference_rates.csv"
#: Link classes a "PCIe" row stands for.
PCIE_CLASSES = ("PIX", "PXB", "PHB", "NODE", "SYS")
#: The class of rows measured across the trays of one NVLink domain (multi-node NVLink).
MNNVL = "MNNVL"


@dataclass(frozen=True)
class Reference:
    """One published figure (a row of reference_rates.csv)."""

    id: str
    model: str  # regular expression over the GPU name; "" = any model
    machine: str  # what the source measured, in words
    link_class: str  # NV<n> | PIX..SYS | "PCIe" | "host" | "MNNVL"
    platform: str  # "intel" | "amd" | "" (any)
    test: str
    gpus: int
    metric: str  # algbw | busbw
    gbps: float
    tool: str
    source: str

    def matches_model(self, names: Sequence[str]) -> bool:
        """Every name is of the row's model, matched by whole word (model_matches)."""
        if not self.model:
            return True
        return bool(names) and all(model_matches(self.model, n) for n in names)

    def describe(self) -> str:
        """'8x H100 SXM (HGX) p2p.copy 376 GB/s (p2pBandwidthLatencyTest ...; source)'."""
        return (f"{self.machine}, {self.tool}: {self.gbps:g} GB/s {self.metric} "
                f"({self.source})")

    def to_json(self) -> dict:
        return {"id": self.id, "machine": self.machine, "link_class": self.link_class,
                "platform": self.platform or None, "test": self.test, "gpus": self.gpus,
                "metric": self.metric, "gbps": self.gbps, "tool": self.tool, "source": self.source}


#: Words of a GPU name that say its board (form factor): a different board of one chip is a
#: different model here (H100 PCIe and H100 NVL are not the H100 SXM a row measured).
FORM_FACTOR_WORDS = re.compile(r"(?<![A-Za-z0-9])(PCIe|NVL|SXM\d*)(?![A-Za-z0-9])", re.IGNORECASE)


@lru_cache(maxsize=None)
def _model_pattern(model: str) -> re.Pattern:
    """A row's model expression as whole words, compiled once (every headline of a run asks every
    row): no letter or digit just before or after it, so H200 is not GH200, B200 not GB200 and
    RTX 4090 not a longer number."""
    return re.compile(rf"(?<![A-Za-z0-9])(?:{model})(?![A-Za-z0-9])", re.IGNORECASE)


def model_matches(model: str, name: str) -> bool:
    """Whether the GPU ``name`` is of a row's ``model``: the expression matches whole words of it,
    and every board word of the name (PCIe, NVL, SXM<n>) lies inside the match, so a row for one
    board is never taken for another board of the same chip."""
    for m in _model_pattern(model).finditer(name):
        if all(m.start() <= f.start() and f.end() <= m.end() for f in FORM_FACTOR_WORDS.finditer(name)):
            return True
    return False


class ReferenceTableError(ValueError):
    """The shipped table is malformed (a packaging defect, never user input)."""


@lru_cache(maxsize=None)
def reference_rows(path: Path = TABLE_PATH) -> tuple:
    """Every row of the table, checked: a bad row is a defect of gputopo, so it raises."""
    rows: List[Reference] = []
    with open(path, encoding="utf-8", newline="") as f:
        lines = (ln for ln in f if not ln.startswith("#"))
        for n, rec in enumerate(csv.DictReader(lines), start=2):
            try:
                gbps, gpus = float(rec["gbps"]), int(rec["gpus"])
                re.compile(rec["model"] or "")
            except (KeyError, TypeError, ValueError, re.error) as e:
                raise ReferenceTableError(f"{path.name} row {n}: {e}") from e
            if not gbps > 0 or gpus < 1 or not rec["source"]:
                raise ReferenceTableError(f"{path.name} row {n}: needs gbps > 0, gpus >= 1 and a source")
            rows.append(Reference(
                id=rec["id"], model=rec["model"] or "", machine=rec["machine"],
                link_class=rec["link_class"], platform=(rec["platform"] or "").lower(),
                test=rec["test"], gpus=gpus, metric=rec["metric"], gbps=gbps, tool=rec["tool"],
                source=rec["source"]))
    return tuple(rows)


def _class_score(row_class: str, link_class: Optional[str]) -> Optional[int]:
    if link_class is None:
        return None
    if row_class == link_class:
        return 2
    if row_class == "PCIe" and (link_class in PCIE_CLASSES or link_class == "PCIe"):
        return 1  # ("PCIe" asked: some PCIe class, which one unknown)
    return None


def closest_reference(test: str, gpus: int, link_class: Optional[str], names: Iterable[str],
                      platform: Optional[str], rows: Optional[Sequence[Reference]] = None
                      ) -> Optional[Reference]:
    """The best-matching published figure, or None.

    ``link_class`` is the pair's class ("host" for host <-> device copies; "PCIe" where it is
    some PCIe class, which one unknown: it matches only "PCIe" rows; None when unknown, which
    matches no row: a figure for NV18 says nothing about an unknown link). ``names`` are the
    GPU names of the measured GPUs; ``platform`` the host's CPU vendor (None when unknown, which
    matches only rows for any platform).
    """
    names = [n for n in names if n]
    best: Optional[Reference] = None
    best_score = (-1, -1, -1)
    for row in rows if rows is not None else reference_rows():
        if row.test != test or row.gpus != gpus:
            continue
        cls = _class_score(row.link_class, link_class)
        if cls is None:
            continue
        if row.platform and row.platform != (platform or "").lower():
            continue
        if not row.matches_model(names):
            continue
        score = (cls, 1 if row.platform else 0, 1 if row.model else 0)
        if score > best_score:
            best, best_score = row, score
    return best
