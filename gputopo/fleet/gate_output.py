"""`gputopo gate`'s output in each dialect (--as json | npd | nagios | slurm-prolog): the verdict
of gputopo/fleet/gate.py said in the terms of who asks, with fleet/dialects.py's table of exit
codes. Nothing is judged here."""

from __future__ import annotations

import json
from typing import Dict, List

from gputopo import SCHEMA_VERSION
from gputopo.model.reason import NPD_BYTES, clean

from .dialects import NAGIOS_WORDS, fit_bytes
from .gate import GATE_SCHEMA, GateVerdict


def _sim(v: GateVerdict) -> str:
    return "SIMULATED " if v.simulated else ""


def _passed(v: GateVerdict) -> str:
    measured = sum(1 for p in v.pairs if p.copies)
    text = f"{len(v.gpus)} GPU(s) ok, {measured} pair(s) verified"
    if len(v.gpus) == 1:
        text += " (one GPU: no pair, not applicable)"
    if v.allreduce is not None:
        text += f", all_reduce {v.allreduce.status}"
    return text


def problem_lines(v: GateVerdict) -> List[str]:
    """One line per problem: its subject, scope, what, cause where stated, action."""
    out = []
    for subject, j, also in v.problems():
        line = f"{j.status}: {subject} [{j.scope}] {j.detail}"
        if also and also != [subject]:
            line += f" (on {', '.join(also)})"
        if j.cause:
            line += f"; cause: {j.cause}"
        if j.action:
            line += f"; action: {j.action}"
        out.append(clean(line, semicolons=True))
    if v.best_other is not None:
        b = v.best_other
        out.append(clean("best other set: " + (f"GPUs {','.join(map(str, b['gpus']))} ({b.get('state')})"
                                               if b.get("gpus") else "none") + f"; {b.get('why', '')}", semicolons=True))
    return out


def gate_npd_line(v: GateVerdict) -> str:
    if v.verdict in ("fail", "warn"):
        return v.reason(NPD_BYTES)
    if v.verdict == "pass":
        return fit_bytes(f"gputopo gate ok: {_sim(v)}{_passed(v)}", NPD_BYTES)
    return fit_bytes(f"gputopo gate not judged: {_sim(v)}{'; '.join(v.not_judged()) or v.summary()}", NPD_BYTES)


def gate_nagios_text(v: GateVerdict) -> str:
    word = NAGIOS_WORDS[v.verdict]
    if v.verdict in ("fail", "warn"):
        text = v.reason()
    elif v.verdict == "pass":
        text = f"gputopo gate: {_passed(v)}"
    else:
        text = f"gputopo gate: not judged: {'; '.join(v.not_judged())}"
    measured = sum(1 for p in v.pairs if p.copies)
    perf = f"time={v.used_s:.3f}s;;;0;{v.budget_s:g} pairs_measured={measured}"
    lines = [f"{word} - {clean(text, semicolons=True)} | {perf}"]
    if v.simulated:
        lines.append(f"SIMULATED machine '{clean(v.machine) or '?'}': no real GPU was read")
    lines.append(clean(v.summary(), semicolons=True))
    lines += problem_lines(v)
    return "\n".join(lines)


def prolog_line(v: GateVerdict, code: int, kept: str) -> str:
    """The prolog's one log line: verdict, reason (or what passed, or why not judged), the GPUs,
    what the exit code makes Slurm do, and where the reason is kept."""
    what = {"pass": _passed(v), "not-judged": "not judged: " + "; ".join(v.not_judged())}.get(v.verdict, v.reason())
    gpus = ",".join(str(g.index) for g in v.gpus)
    does = ("exit 1: Slurm drains the node ('Prolog error') and requeues the job held" if code
            else "exit 0: the job starts")
    return clean(f"gputopo gate: {_sim(v)}{v.verdict}: {what}; GPUs {gpus} ({v.selection.get('source', '')}); "
                 f"{does}; {kept}", semicolons=True)


def render_gate(dialect: str, v: GateVerdict, code: int = 0, kept: str = "") -> str:
    if dialect == "json":
        return json.dumps(v.to_json(), indent=2)
    if dialect == "npd":
        return gate_npd_line(v)
    if dialect == "nagios":
        return gate_nagios_text(v)
    return prolog_line(v, code, kept)


def gate_could_not_run_doc(message: str) -> Dict[str, object]:
    return {"schema_version": SCHEMA_VERSION, "gate_schema": GATE_SCHEMA, "command": "gate",
            "verdict": "could-not-run", "error": clean(message)}


def gate_could_not_run_text(dialect: str, message: str, code: int = 0) -> str:
    """What a gate that could not run prints (the error line itself goes to stderr)."""
    if dialect == "json":
        return json.dumps(gate_could_not_run_doc(message))
    if dialect == "npd":
        return fit_bytes(f"gputopo gate could not run: {message}", NPD_BYTES)
    if dialect == "nagios":
        return f"UNKNOWN - gputopo gate could not run: {clean(message)}"
    does = ("exit 1: Slurm drains the node (--on-unknown drain)" if code
            else "exit 0: the job starts (a gate that cannot run never drains; --on-unknown drain to drain)")
    return clean(f"gputopo gate: could not run: {message}; {does}", semicolons=True)
