"""Each consumer's terms: the output and exit code of a node verdict (or of a check that could not
run) for `gputopo health --as json | npd | nagios | slurm-healthcheck`.

| --as | pass | warn | fail | not judged | could not run | output | default budget |
|---|---|---|---|---|---|---|---|
| json | 0 | 0 | 1 | 2 | its own code: no driver 3, internal 4, interrupted 130, refused 2 | the verdict as JSON | 60 s |
| npd | 0 | 0 | 1 | 2 | 2 (NPD's Unknown) | one line of at most 80 bytes | 4 s |
| nagios | 0 | 1 | 2 | 3 | 3 (UNKNOWN) | ``OK - ...`` / ``WARNING - ...`` / ``CRITICAL - ...`` | 30 s |
| slurm-healthcheck | 0 | 0 | 0 | 0 | 0 | one log line (gputopo drains the node itself) | 45 s |
| slurm-prolog (gate only) | 0 | 0 | 1 | 0 (1 with --on-unknown drain) | 0 (1 with --on-unknown drain) | one log line (Slurm drains on the non-zero exit) | 10 s |

`gputopo gate` takes json, npd, nagios and slurm-prolog, with a default budget of 10 s (npd 4 s);
`gputopo health` takes json, npd, nagios and slurm-healthcheck.

docs/fleet.md is this table for users.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from gputopo.model.reason import NPD_BYTES, Segment, clean, parse, reason

from gputopo import SCHEMA_VERSION

from .verdict import HEALTH_SCHEMA, NodeVerdict


@dataclass(frozen=True)
class Dialect:
    name: str
    codes: Dict[str, int]  # verdict -> exit code
    #: the exit code of a check that could not run; None: the command's own (3, 4, 130, 2)
    could_not_run: Optional[int]
    budget_s: float
    #: the commands that speak it
    commands: Tuple[str, ...] = ("health", "gate")


DIALECTS: Dict[str, Dialect] = {
    "json": Dialect("json", {"pass": 0, "warn": 0, "fail": 1, "not-judged": 2}, None, 60.0),
    "npd": Dialect("npd", {"pass": 0, "warn": 0, "fail": 1, "not-judged": 2}, 2, 4.0),
    "nagios": Dialect("nagios", {"pass": 0, "warn": 1, "fail": 2, "not-judged": 3}, 3, 30.0),
    "slurm-healthcheck": Dialect("slurm-healthcheck", {"pass": 0, "warn": 0, "fail": 0, "not-judged": 0}, 0, 45.0,
                                 ("health",)),
    # a prolog's non-zero exit drains the node and requeues the job held (Slurm's prolog guide):
    # only a failure does; a gate that judged nothing or could not run never drains a fleet
    # unless --on-unknown drain (:func:`gate_exit_code`)
    "slurm-prolog": Dialect("slurm-prolog", {"pass": 0, "warn": 0, "fail": 1, "not-judged": 0}, 0, 10.0, ("gate",)),
}
#: gate's default budget per dialect (NPD kills its plugin at its timeout, 5 s in docs/fleet.md)
GATE_BUDGET_S = {"json": 10.0, "npd": 4.0, "nagios": 10.0, "slurm-prolog": 10.0}


def dialects_of(command: str) -> List[str]:
    """The --as values ``command`` takes, in the table's order."""
    return [name for name, d in DIALECTS.items() if command in d.commands]


def gate_exit_code(dialect: str, verdict: str, on_unknown: str = "ignore") -> int:
    """gate's exit code: the dialect's, but with slurm-prolog and ``--on-unknown drain`` a
    verdict that judged nothing (or a gate that could not run: verdict ``could-not-run``)
    exits 1 so Slurm drains the node."""
    if dialect == "slurm-prolog" and on_unknown == "drain" and verdict in ("not-judged", "could-not-run"):
        return 1
    if verdict == "could-not-run":
        mapped = DIALECTS[dialect].could_not_run
        if mapped is None:
            raise ValueError(f"--as {dialect}: a gate that could not run exits with its own code")
        return mapped
    return DIALECTS[dialect].codes[verdict]
NAGIOS_WORDS = {"pass": "OK", "warn": "WARNING", "fail": "CRITICAL", "not-judged": "UNKNOWN"}


def exit_code(dialect: str, verdict: str) -> int:
    return DIALECTS[dialect].codes[verdict]


def could_not_run_code(dialect: str, own: int) -> int:
    mapped = DIALECTS[dialect].could_not_run
    return own if mapped is None else mapped


def fit_bytes(text: str, limit: int) -> str:
    """``text`` as printable ASCII in at most ``limit`` bytes, cut at a word with ``...``."""
    text = clean(text)
    if len(text) <= limit:
        return text
    cut = text[:limit - 3]
    if " " in cut:
        cut = cut[:cut.rindex(" ")]
    return cut.rstrip(" ,") + "..."


def _simulated(v: NodeVerdict) -> str:
    return "SIMULATED " if v.simulated else ""




def pass_line(v: NodeVerdict) -> str:
    """What a pass (or a warn's and fail's tail) says was judged."""
    judged, na = v.judged(), v.not_applicable()
    text = f"{len(judged)} checks passed"
    if na:
        text += f", {len(na)} not applicable"
    if v.not_judged():
        text += ", not judged: " + ", ".join(c.name for c in v.not_judged())
    return text


def npd_line(v: NodeVerdict) -> str:
    """One line of at most 80 bytes: the reason built to fit (never cut), or what passed, or why
    nothing was judged. Where gate's last verdict failed: on a warn or fail, the health reason's
    segments and then gate's, built to fit together (each segment whole, ``+N more`` counted);
    on a pass or not judged, a short head and gate's reason built to fit the rest."""
    sim = _simulated(v)
    gate = v.gate_failed()
    if v.verdict in ("fail", "warn"):
        theirs = _parsed(gate.reason) if gate is not None else None
        if theirs is None:
            return v.reason(NPD_BYTES)
        own = _parsed(v.reason()) or ([], 0)
        return _fitted(own[0] + theirs[0], own[1] + theirs[1], NPD_BYTES)
    if gate is not None:
        head = "gputopo ok" if v.verdict == "pass" else "gputopo not judged"
        head = f"{head}; last gate failed: "
        segs = _parsed(gate.reason)
        if segs is not None:
            return head + _fitted(segs[0], segs[1], NPD_BYTES - len(head))
        return fit_bytes(head + gate.text(), NPD_BYTES)
    if v.verdict == "pass":
        return fit_bytes(f"gputopo ok: {sim}{pass_line(v)}", NPD_BYTES)
    return fit_bytes(f"gputopo not judged: {sim}{v.cut_short or v.summary()}", NPD_BYTES)


def _parsed(text: str) -> Optional[Tuple[List[Segment], int]]:
    """A reason's segments and its ``+N more`` count; None where ``text`` is not a reason."""
    try:
        return parse(text) if text else None
    except ValueError:
        return None


def _fitted(segments: List[Segment], more: int, limit: int) -> str:
    """:func:`reason` of ``segments`` in ``limit`` bytes, the ``more`` already left out counted in
    its ``+N more`` too (nothing flagged goes unsaid)."""
    if not more:
        return reason(segments, limit)
    tail = f"; +{more + len(segments)} more"
    for keep in range(len(segments), 0, -1):
        text = reason(segments[:keep], limit - len(f"; +{more + len(segments) - keep} more"))
        if text and not text.endswith(" more"):
            return f"{text}; +{more + len(segments) - keep} more"
    return tail.removeprefix("; ")


def gate_text(v: NodeVerdict) -> str:
    """The line a person's dialect adds for gate's kept verdict ("" where none is kept)."""
    if v.gate is None:
        return ""
    return clean(f"last {v.gate.text()} (kept on this node; not judged again by health)", semicolons=True)


def nagios_line(v: NodeVerdict) -> str:
    """The status line (``CRITICAL - <reason> | perfdata``), then Nagios' long output: SIMULATED
    where it is, and what was judged, not applicable and not judged."""
    word = NAGIOS_WORDS[v.verdict]
    if v.verdict in ("fail", "warn"):
        text = v.reason()  # the grammar's own "; " between segments
    elif v.verdict == "pass":
        text = f"gputopo health: {pass_line(v)}"
    else:
        text = f"gputopo health: not judged: {v.cut_short or v.summary()}"
    perf = f"time={v.used_s:.3f}s;;;0;{v.budget_s:g} checks_judged={len(v.judged())}"
    lines = [f"{word} - {clean(text, semicolons=True)} | {perf}"]
    if v.simulated:
        lines.append(simulated_text(v))
    lines.append(clean(v.summary()))
    if gate_text(v):
        lines.append(gate_text(v))
    return "\n".join(lines)


def simulated_text(v: NodeVerdict) -> str:
    return f"SIMULATED machine '{clean(v.machine) or '?'}': no real GPU was read"


def slurm_line(v: NodeVerdict, action: str) -> str:
    """The health check's one log line: the verdict, the reason, what was done to the node."""
    reason = v.reason()
    what = {"pass": pass_line(v), "not-judged": f"not judged: {v.cut_short or v.summary()}"}.get(v.verdict, reason)
    gate = f"; {gate_text(v)}" if v.gate_failed() else ""
    return clean(f"gputopo health: {_simulated(v)}{v.verdict}: {what}; node: {action}{gate}", semicolons=True)


def render(dialect: str, v: NodeVerdict, action: str = "") -> str:
    if dialect == "json":
        doc = v.to_json()
        return json.dumps(doc, indent=2)
    if dialect == "npd":
        return npd_line(v)
    if dialect == "nagios":
        return nagios_line(v)
    return slurm_line(v, action)


def could_not_run_doc(message: str) -> Dict[str, object]:
    """The json dialect's document for a check that could not run (no verdict was reached)."""
    return {"schema_version": SCHEMA_VERSION, "health_schema": HEALTH_SCHEMA, "command": "health",
            "verdict": "could-not-run", "error": clean(message)}


def could_not_run_text(dialect: str, message: str, action: str = "unchanged") -> str:
    """What a check that could not run prints, in the dialect's terms (the error line itself goes
    to stderr as every command's does; json: one document with verdict ``could-not-run`` and the
    error, so a consumer parsing stdout reads why, beside the exit code that says it)."""
    if dialect == "json":
        return json.dumps(could_not_run_doc(message))
    if dialect == "npd":
        return fit_bytes(f"gputopo could not run: {message}", NPD_BYTES)
    if dialect == "nagios":
        return f"UNKNOWN - gputopo health could not run: {clean(message)}"
    return clean(f"gputopo health: could not run: {message}; node: {action}", semicolons=True)
