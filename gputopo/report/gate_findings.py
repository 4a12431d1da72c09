"""gate's judgements as findings, for `gputopo health --level quick|pairs` (gputopo/fleet/levels.py):
each GPU, pair, node-wide judgement and all_reduce gate (gputopo/fleet/gate.py) judged ``broken``
is an error, ``degraded`` a warning, of gate's own kind, its detail, cause and action carried
over as gate said them; nothing is judged again here. A kind that is no finding kind (a word of a
worker's failure) is said as ``tool-flagged``, the word kept at the head of its message.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from gputopo.model import Finding
from gputopo.model.finding_kinds import is_kind

#: gate's kinds that are no finding kind are said as this one.
FALLBACK_KIND = "tool-flagged"


def _gate_finding(entry: Dict[str, Any], gpus: List[int]) -> Optional[Finding]:
    status = entry.get("status")
    if status not in ("broken", "degraded"):
        return None
    kind = entry.get("kind") or ""
    detail = str(entry.get("detail") or "")
    if not is_kind(kind):
        detail = f"{kind or 'gate'} {detail}"
        kind = FALLBACK_KIND
    return Finding(kind, "error" if status == "broken" else "warning", detail, gpus=gpus,
                   cause=entry.get("cause"), remedies=[entry["action"]] if entry.get("action") else [],
                   evidence={"gate": {k: entry.get(k) for k in ("status", "scope", "kind")}})


def gate_findings(doc: Dict[str, Any], known: Sequence[Finding]) -> List[Finding]:
    """gate's broken and degraded GPUs, pairs and all_reduce as findings, less those ``known``
    already holds (the same kind on the same GPUs)."""
    seen = {(f.kind, tuple(sorted(f.gpus or []))) for f in known}
    out: List[Finding] = []
    entries = [(e, [int(e["gpu"])]) for e in doc.get("gpus") or []]
    entries += [(e, [int(g) for g in e.get("gpus") or []]) for e in doc.get("pairs") or []]
    entries += [(e, [int(g) for g in (doc.get("selection") or {}).get("gpus") or []]) for e in doc.get("node") or []]
    if doc.get("allreduce"):
        entries.append((doc["allreduce"], [int(g) for g in (doc.get("selection") or {}).get("gpus") or []]))
    for entry, gpus in entries:
        f = _gate_finding(entry, gpus)
        if f is None:
            continue
        key = (f.kind, tuple(sorted(f.gpus or [])))
        if key in seen:
            continue
        seen.add(key)
        out.append(f)
    return out
