"""A run's conclusions in one record: findings (worst first), class table, per-pair table.

`summarize(run)` is pure (no files written); the outputs in ``outputs/`` render a Summary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from gputopo import SCHEMA_VERSION
from gputopo.model import Finding

from .coverage import coverage, partial_line
from .analysis import Analysis, analyze
from .classes import ClassRow, class_rows, overall_verdict
from .like_gpus import peer_bases
from .judged import Judgement, SeriesKey, judgement, series_key
from .numerics_findings import pair_numerics
from .nccl_routes import attach_imported_transports
from .pairs import PairRow, pair_rows
from .perftest_findings import perftest_measured
from .run_folder import Run, load_run


@dataclass
class Summary:
    run: Run
    analysis: Analysis
    pairs: List[PairRow]
    classes: List[ClassRow]
    verdict: str
    #: What the verdict was judged against (judged.py): each series' basis, the facts judged.
    judged: Judgement = field(default_factory=Judgement)

    @property
    def findings(self) -> List[Finding]:
        return self.analysis.findings

    @property
    def simulated(self) -> bool:
        return self.run.simulated

    @property
    def notes(self) -> List[str]:
        return self.analysis.notes

    @property
    def partial(self) -> Optional[str]:
        """"partial: N of M pairs measured ..." when the run is partial (coverage.py): every
        output shows it first."""
        return partial_line(self.run)

    def pair(self, i: int, j: int) -> Optional[PairRow]:
        key = (min(i, j), max(i, j))
        return next((p for p in self.pairs if p.gpus == key), None)

    def class_row(self, link_class: str) -> Optional[ClassRow]:
        return next((c for c in self.classes if c.link_class == link_class), None)

    def run_json(self) -> Dict[str, Any]:
        r, topo = self.run, self.run.topology
        return {
            "path": str(r.path), "machine": r.machine, "fabric": r.fabric, "simulated": r.simulated,
            "started": r.info.get("started"), "gputopo_version": r.info.get("gputopo_version"),
            "argv": r.info.get("argv"), "source": r.info.get("source") or (topo.source if topo else None),
            "gpus": len(topo.gpus) if topo else None,
        }

    def to_json(self) -> Dict[str, Any]:
        """The summary.json document (schema_version; ``simulated`` and ``fabric`` at the top)."""
        counts: Dict[str, int] = {}
        for f in self.findings:
            counts[f.severity] = counts.get(f.severity, 0) + 1
        return {
            "schema_version": SCHEMA_VERSION,
            "simulated": self.run.simulated,
            "fabric": self.run.fabric,
            "machine": self.run.machine,
            "verdict": self.verdict,
            # the verdict line's words after the verdict ("ok for 12 of 14 series; 2 not judged: ...")
            "verdict_detail": self.judged.line(self.verdict) or None,
            "partial": coverage(self.run),
            # what was judged and against what (judged.py); "partial" says what was measured
            "judged": self.judged.to_json(),
            "run": self.run_json(),
            "finding_counts": counts,
            "findings": [f.to_json() for f in self.findings],
            "classes": [c.to_json() for c in self.classes],
            "pairs": [p.to_json() for p in self.pairs if len(p.gpus) == 2],
            "groups": [p.to_json() for p in self.pairs if len(p.gpus) > 2],
            "headlines": [dict(h.to_json(), judged_basis=self.judged.series[series_key(h)].to_json())
                          if series_key(h) in self.judged.series else h.to_json()
                          for h in self.analysis.headlines],
            "nccl_tests": self.run.nccl_tests,
            "nccl_debug": {k: v for k, v in self.run.nccl_debug.items() if k != "pairs"},
            "measurements": len(self.run.measurements),
            "numerics_records": len(self.run.numerics),
            "notes": list(self.notes),
            # what the findings with evidence basis "history" were compared against (None: the
            # run was never recorded in a history database, e.g. --no-history)
            "history": self.run.history.doc if self.run.history is not None else None,
        }


def summarize(run: Run, peers: Optional[Mapping[SeriesKey, str]] = None) -> Summary:
    """``peers``: series key -> the like GPUs of the same run each series was compared with
    (the like-GPU rule's bases; judged.series_basis)."""
    analysis = analyze(run)
    pairs = pair_rows(run.topology, run.measurements, analysis.headlines,
                      pair_numerics(run.numerics), analysis.findings)
    attach_imported_transports(pairs, run.nccl_debug)
    classes = class_rows(pairs, analysis.findings)
    if peers is None:  # the like GPUs each series was compared with (like_gpus.py)
        peers = peer_bases(analysis.headlines, run.topology)
    judged = judgement(run, analysis.headlines, analysis.findings, peers)
    verdict = judged.verdict(overall_verdict(classes, analysis.findings, pairs), run_measured(run))
    return Summary(run=run, analysis=analysis, pairs=pairs, classes=classes, verdict=verdict, judged=judged)


def run_measured(run: Run) -> bool:
    """Whether the run holds a completed measurement or a perftest figure, whatever the pairs say
    (GPUs measured alone by --self or on a one-GPU machine; an imported log that does not name its
    devices, whose figures are the whole job's): then its verdict is ``ok`` where something of it
    was judged and ``not-judged`` where nothing was (judged.py), never ``not-measured``."""
    return any(m.error is None and m.samples_s for m in run.measurements) or perftest_measured(run.imported)


def summarize_dir(run_dir) -> Summary:
    return summarize(load_run(run_dir))
