"""How the localised findings (gputopo.report.why.localise) read in every output: first in the
story, with the reasoning and the per-pair evidence underneath, and first in the findings
table, with the groups of findings each explains nested under it. Findings a culprit explains
are not told again on their own.
"""

from __future__ import annotations

from typing import Dict, List, Tuple

from gputopo.model import Finding
from gputopo.model.finding import SEVERITIES
from gputopo.model.finding_kinds import is_culprit
from gputopo.report.why.localise import finding_id

#: Prefix of a nested row's kind (a group a localised finding explains).
NESTED = "  └ "


def is_localised(f: Finding) -> bool:
    return is_culprit(f.kind)


def explained(f: Finding) -> bool:
    """Whether a localised finding explains ``f`` (then it is told under that finding)."""
    return bool((f.evidence or {}).get("explained_by"))


def culprits(findings: List[Finding]) -> List[Finding]:
    """The localised findings, worst first, then those that explain the most first."""
    return sorted((f for f in findings if is_localised(f)),
                  key=lambda f: (SEVERITIES.index(f.severity), -len((f.evidence or {}).get("explains") or [])))


def explained_groups(lf: Finding, findings: List[Finding]) -> List[List[Finding]]:
    """The findings ``lf`` explains, grouped like the findings table (severity, kind, class)."""
    fid = finding_id(lf)
    groups: Dict[tuple, List[Finding]] = {}
    for f in findings:
        if fid in ((f.evidence or {}).get("explained_by") or []):
            groups.setdefault((f.severity, f.kind, f.link_class), []).append(f)
    return list(groups.values())


def nested_groups(findings: List[Finding], group_findings) -> List[Tuple[int, List[Finding]]]:
    """(depth, group) rows: each localised finding (depth 0) with the groups it explains
    (depth 1), then the groups nothing explains, worst first."""
    rows: List[Tuple[int, List[Finding]]] = []
    for lf in culprits(findings):
        rows.append((0, [lf]))
        rows += [(1, g) for g in explained_groups(lf, findings)]
    rows += [(0, g) for g in group_findings([f for f in findings if not is_localised(f) and not explained(f)])]
    return rows


def evidence_line(lf: Finding, findings: List[Finding], where) -> str:
    """'underneath: corrupt on 16 pairs: 0,4 0,5 ...; nan on 8 pairs: ...' (by kind)."""
    by_kind: Dict[str, List[Finding]] = {}
    for g in explained_groups(lf, findings):
        by_kind.setdefault(g[0].kind, []).extend(g)
    parts = [f"{kind} on {where(fs) if any(f.gpus for f in fs) else 'the host'}" for kind, fs in by_kind.items()]
    return "underneath: " + "; ".join(parts) if parts else ""


def localised_story(findings: List[Finding], where, story_item, more_details=None) -> List:
    """One story point per localised finding: its message, why, the findings underneath, the
    likely cause and the remedies. ``more_details(told)`` may add lines from what the caller
    knows of the pairs (e.g. which transport NCCL used on them)."""
    out = []
    for lf in culprits(findings):
        details = []
        why = (lf.evidence or {}).get("reasoning") or []
        if why:
            details.append("why: " + "; ".join(why))
        ev = evidence_line(lf, findings, where)
        if ev:
            details.append(ev)
        told = [lf] + [f for g in explained_groups(lf, findings) for f in g]
        if more_details is not None:
            details.extend(more_details(told))
        out.append(story_item(lf.severity, lf.message + ".", lf.cause, list(lf.remedies), told, details))
    return out
