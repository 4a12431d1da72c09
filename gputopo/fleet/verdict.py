"""A node's verdict: ``pass``, ``warn``, ``fail`` or ``not-judged``, with every check, what each
was judged against, the time it was made and the budget it used.

- ``fail``: a check has an error finding; ``warn``: a warning and no error;
- ``pass``: no error or warning, and at least one check was judged;
- ``not-judged``: no check could be judged (the budget ran out before the scan finished). Never
  a failure: what was not judged is said, not blamed.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from gputopo import SCHEMA_VERSION
from gputopo.model import Finding
from gputopo.model.finding import worst_first
from gputopo.model.reason import MAX_REASON, findings_reason

from .checks import APPLICABLE, NOT_APPLICABLE, NOT_JUDGED, CheckResult
from .prolog import GateKept

VERDICTS = ("pass", "warn", "fail", "not-judged")
#: The document's own version (its layout), beside gputopo's SCHEMA_VERSION.
HEALTH_SCHEMA = 1


@dataclass
class NodeVerdict:
    level: str
    checks: List[CheckResult]
    budget_s: float
    used_s: float
    time_s: float
    machine: str = ""
    source: str = ""
    simulated: bool = False
    #: a line on what kept the verdict from being whole (the budget ran out), or ""
    cut_short: str = ""
    notes: List[str] = field(default_factory=list)
    #: gate's last verdict kept on this node (gputopo/fleet/prolog.py), said beside this one, never
    #: judged again: health's verdict is its own checks'
    gate: Optional[GateKept] = None

    @property
    def findings(self) -> List[Finding]:
        return worst_first([f for c in self.checks for f in c.findings])

    @property
    def problems(self) -> List[Finding]:
        """The errors and warnings, worst first: what a reason names."""
        return [f for f in self.findings if f.severity in ("error", "warning")]

    @property
    def verdict(self) -> str:
        statuses = {c.status for c in self.checks}
        if "fail" in statuses:
            return "fail"
        if "warn" in statuses:
            return "warn"
        if any(c.applicability == APPLICABLE for c in self.checks):
            return "pass"
        return "not-judged"

    def reason(self, limit: int = MAX_REASON) -> str:
        """The problems in the reason grammar (empty on a pass)."""
        return findings_reason(self.problems, limit)

    def judged(self) -> List[str]:
        return [c.name for c in self.checks if c.applicability == APPLICABLE]

    def not_applicable(self) -> List[str]:
        return [c.name for c in self.checks if c.applicability == NOT_APPLICABLE]

    def not_judged(self) -> List[CheckResult]:
        return [c for c in self.checks if c.applicability == NOT_JUDGED]

    def time_text(self) -> str:
        return _dt.datetime.fromtimestamp(self.time_s, _dt.timezone.utc).isoformat(timespec="seconds")

    def summary(self) -> str:
        """``7 checks: 4 judged (gpus, ...), 2 not applicable (...), 1 not judged (history: why)``."""
        parts = [f"{len(self.judged())} judged ({', '.join(self.judged()) or 'none'})"]
        if self.not_applicable():
            parts.append(f"{len(self.not_applicable())} not applicable ({', '.join(self.not_applicable())})")
        if self.not_judged():
            parts.append(f"{len(self.not_judged())} not judged ("
                         + "; ".join(f"{c.name}: {c.basis}" for c in self.not_judged()) + ")")
        return f"{len(self.checks)} checks: " + ", ".join(parts)

    def to_json(self) -> Dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "health_schema": HEALTH_SCHEMA, "command": "health",
                "level": self.level, "verdict": self.verdict, "reason": self.reason() or None,
                "time": self.time_text(), "budget_s": self.budget_s, "used_s": round(self.used_s, 3),
                "machine": self.machine, "source": self.source, "simulated": self.simulated,
                "cut_short": self.cut_short or None,
                "judged": self.judged(), "not_applicable": self.not_applicable(),
                "not_judged": [c.name for c in self.not_judged()],
                "checks": [c.to_json() for c in self.checks], "notes": list(self.notes),
                "gate_kept": self.gate.to_json() if self.gate is not None else None}

    def gate_failed(self) -> Optional[GateKept]:
        """gate's kept verdict where it failed the Prolog (what every dialect says), else None."""
        return self.gate if self.gate is not None and self.gate.failed else None
