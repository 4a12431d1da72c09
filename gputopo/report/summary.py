"""A run's conclusions in one record: findings (worst first), class table, per-pair table.

`summarize(run)` is pure (no files written); the outputs in ``outputs/`` render a Summary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from gputopo import SCHEMA_VERSION
from gputopo.model import Finding

from .coverage import coverage, partial_line
from .analysis import Analysis, analyze
from .classes import ClassRow, class_rows, overall_verdict
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
            "partial": coverage(self.run),
            "run": self.run_json(),
            "finding_counts": counts,
            "findings": [f.to_json() for f in self.findings],
            "classes": [c.to_json() for c in self.classes],
            "pairs": [p.to_json() for p in self.pairs if len(p.gpus) == 2],
            "groups": [p.to_json() for p in self.pairs if len(p.gpus) > 2],
            "headlines": [h.to_json() for h in self.analysis.headlines],
            "nccl_tests": self.run.nccl_tests,
            "nccl_debug": {k: v for k, v in self.run.nccl_debug.items() if k != "pairs"},
            "measurements": len(self.run.measurements),
            "numerics_records": len(self.run.numerics),
            "notes": list(self.notes),
            # what the findings with evidence basis "history" were compared against (None: the
            # run was never recorded in a history database, e.g. --no-history)
            "history": self.run.history.doc if self.run.history is not None else None,
        }


def summarize(run: Run) -> Summary:
    analysis = analyze(run)
    pairs = pair_rows(run.topology, run.measurements, analysis.headlines,
                      pair_numerics(run.numerics), analysis.findings)
    attach_imported_transports(pairs, run.nccl_debug)
    classes = class_rows(pairs, analysis.findings)
    verdict = measured_verdict(overall_verdict(classes, analysis.findings, pairs), run)
    return Summary(run=run, analysis=analysis, pairs=pairs, classes=classes, verdict=verdict)


def measured_verdict(verdict: str, run: Run) -> str:
    """A verdict never contradicts the figures printed under it: where the pairs and classes
    say "not-measured" but the run holds measurements that completed (GPUs measured alone by
    --self or on a one-GPU machine; an imported log that does not name its devices, whose
    figures are the whole job's), something was measured and nothing was found in it, so the
    run is "ok"; what is not known (which GPUs) is said beside the figures, not by the verdict.
    The same holds for NIC port states read from a saved ``ibstat``: they were read and judged
    (port down, rate below its peers), so a table of healthy ports is "ok", not "not-measured"."""
    if verdict == "not-measured" and (any(m.error is None and m.samples_s for m in run.measurements)
                                      or perftest_measured(run.imported)
                                      or any(d.get("tool") == "ibstat" and d.get("ports") for d in run.imported)):
        return "ok"
    return verdict


def summarize_dir(run_dir) -> Summary:
    return summarize(load_run(run_dir))
