"""The root causes first, each once with its remedies once; the per-pair findings below only as
evidence.

seed-8gpu's report led with a ten-line paragraph ending in "Culprit:", its verdict counted "49
errors" for what is one fault of the host's PCIe peer path, and its "Causes and remedies" told
the same five remedies again under each of seven finding groups. Here:

- a *root cause* is a story point told from a localised finding (gputopo.report.why.localise: a
  GPU, a link or a whole class found at fault, with the findings it explains nested under it);
  any other error or warning point of the story is a *problem* of its own;
- :func:`verdict_counts` counts those first, then the findings ("1 root cause (49 errors in 24
  pairs, 2 warnings)");
- :func:`evidence_entries` is the findings section under the story: each group of alike
  findings with its example and evidence, naming the root cause that explains it, and a cause
  or remedy only where the story did not already tell it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gputopo.model import Finding
from gputopo.report.why.localise import finding_id
from gputopo.report.summary import Summary

from .diagnosis import is_localised
from gputopo.report.outputs.bridge_names import bridge_key
from .explain import Explanation, explanations
from gputopo.report.outputs.story import StoryItem, story

PROBLEM_SEVERITIES = ("error", "warning")


def is_root_cause(item: StoryItem) -> bool:
    """Whether a story point tells a localised finding (a root cause) rather than one problem."""
    return item.severity in PROBLEM_SEVERITIES and bool(item.findings) and is_localised(item.findings[0])


def root_cause_tags(items: Sequence[StoryItem]) -> dict[int, str]:
    """'Root cause' (or 'Root cause 1 of 2', ...) by id() of each root-cause story point."""
    roots = [it for it in items if is_root_cause(it)]
    if len(roots) == 1:
        return {id(roots[0]): "Root cause"}
    return {id(it): f"Root cause {k} of {len(roots)}" for k, it in enumerate(roots, 1)}


def problem_counts(items: Sequence[StoryItem]) -> tuple[int, int]:
    """(root causes, other problems) among the story's points."""
    roots = sum(1 for it in items if is_root_cause(it))
    others = sum(1 for it in items if it.severity in PROBLEM_SEVERITIES and not is_root_cause(it))
    return roots, others


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def verdict_counts(summary: Summary) -> str:
    """'1 root cause (49 errors in 24 pairs, 2 warnings)'; '' when nothing is wrong (then the
    plain finding counts say the rest)."""
    roots, others = problem_counts(story(summary))
    if not roots and not others:
        return ""
    head = [_plural(roots, "root cause")] if roots else []
    if others:
        head.append(_plural(others, "other problem" if roots else "problem"))
    errors = [f for f in summary.findings if f.severity == "error"]
    pairs = {tuple(sorted(f.gpus)) for f in errors if f.gpus and len(f.gpus) == 2}
    counts = []
    if errors:
        counts.append(_plural(len(errors), "error") + (f" in {_plural(len(pairs), 'pair')}" if pairs else ""))
    for sev in ("warning", "info"):
        n = sum(1 for f in summary.findings if f.severity == sev)
        if n:
            counts.append(_plural(n, sev))
    return " and ".join(head) + (f" ({', '.join(counts)})" if counts else "")


@dataclass
class EvidenceEntry:
    """One group of alike findings under the story: where, an example, which root cause explains
    it, and only the cause and remedies the story did not tell already."""

    explanation: Explanation
    example: str
    explained_by: str | None = None  # "Root cause" / "Root cause 2 of 3" tag of the story point
    cause: str | None = None
    remedies: list[str] = field(default_factory=list)


def _told(items: Sequence[StoryItem]) -> set:
    """The causes and remedies the story tells, bridge lists aside (they are named there)."""
    return {bridge_key(t) for it in items for t in [it.cause, *it.remedies] if t}


def evidence_entries(summary: Summary, items: Sequence[StoryItem] | None = None) -> list[EvidenceEntry]:
    """The findings section under the story, one entry per group of alike findings."""
    items = story(summary) if items is None else items
    tags = root_cause_tags(items)
    by_id = {finding_id(it.findings[0]): tags[id(it)] for it in items if id(it) in tags}
    told = _told(items)
    out = []
    exps = explanations(summary.findings)  # the root causes' own entries first, as in the story
    for ex in sorted(exps, key=lambda e: not is_localised(e.findings[0])):
        first: Finding = ex.findings[0]
        ids = [x for f in ex.findings for x in (f.evidence or {}).get("explained_by") or []]
        by: str | None = None
        if is_localised(first) and finding_id(first) in by_id:
            by = by_id[finding_id(first)]
        else:
            by = next((by_id[x] for x in ids if x in by_id), None)
        example = first.message if len(ex.findings) == 1 else "e.g. " + first.message
        if by is not None:  # its root cause tells cause and remedies, once, above
            out.append(EvidenceEntry(ex, example, by))
            continue
        cause = ex.cause if ex.cause and bridge_key(ex.cause) not in told else None
        remedies = [r for r in ex.remedies if bridge_key(r) not in told]
        out.append(EvidenceEntry(ex, example, None, cause, remedies))
    return out


def explained_note(entry: EvidenceEntry) -> str:
    """What an entry says instead of repeating the cause and remedies the story told."""
    by = entry.explained_by
    if by and is_localised(entry.explanation.findings[0]):
        return f"this is the {by[0].lower()}{by[1:]} told above, with its cause and remedies"
    if by:
        return f"explained by the {by[0].lower()}{by[1:]} above (its cause and remedies are told there)"
    if not entry.cause and not entry.remedies and (entry.explanation.cause or entry.explanation.remedies):
        return "cause and remedies: told in the story above"
    return ""
