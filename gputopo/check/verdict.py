"""The acceptance verdict of a run against a spec: pass (exit 0) or fail (exit 1), with every
rule's outcome; `--json` prints `Verdict.to_json()`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

from gputopo import SCHEMA_VERSION
from gputopo.errors import EXIT_FINDINGS, EXIT_OK
from gputopo.report.summary import Summary, summarize_dir

from .cluster_rules import cluster_rules
from .rules import FAILED, PASSED, SKIPPED, Outcome, evaluate
from .spec import Spec, load_spec


@dataclass
class Verdict:
    spec: Spec
    summary: Summary
    outcomes: List[Outcome]

    @property
    def failed(self) -> List[Outcome]:
        return [o for o in self.outcomes if o.status == FAILED]

    @property
    def passed(self) -> bool:
        return not self.failed

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.passed else EXIT_FINDINGS

    def counts(self) -> dict:
        return {s: sum(1 for o in self.outcomes if o.status == s) for s in (PASSED, FAILED, SKIPPED)}

    def to_json(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION, "passed": self.passed, "exit_code": self.exit_code,
            "spec": {"path": self.spec.path, "name": self.spec.name, "strict": self.spec.strict},
            "run": str(self.summary.run.path), "simulated": self.summary.simulated,
            "fabric": self.summary.run.fabric, "counts": self.counts(),
            "failures": [o.to_json() for o in self.failed],
            "outcomes": [o.to_json() for o in self.outcomes],
        }

    def text(self, max_failures: Optional[int] = 50) -> str:
        """What `gputopo check` prints: the verdict line, then each failure with its evidence."""
        c = self.counts()
        sim = "SIMULATED run; " if self.summary.simulated else ""
        head = (f"check {'PASSED' if self.passed else 'FAILED'}: spec {self.spec.name} on {self.summary.run.path} "
                f"({sim}{c[PASSED]} passed, {c[FAILED]} failed, {c[SKIPPED]} skipped)")
        lines = [head]
        shown = self.failed if max_failures is None else self.failed[:max_failures]
        for o in shown:
            lines.append(f"  FAIL {o.name}: {o.message}")
        if len(shown) < len(self.failed):
            lines.append(f"  ... {len(self.failed) - len(shown)} more failures (--junit / --json list all)")
        return "\n".join(lines)


def check_summary(spec: Spec, summary: Summary) -> Verdict:
    return Verdict(spec=spec, summary=summary, outcomes=evaluate(spec, summary, (cluster_rules,)))


def run_check(spec_path, run_dir) -> Verdict:
    """Load the spec (InputFileError -> exit 2) and judge the run folder (UsageError if not one).

    The run is analysed afresh from its raw files (its summary.json is not trusted/needed).
    """
    spec = load_spec(spec_path)
    return check_summary(spec, summarize_dir(Path(run_dir)))
