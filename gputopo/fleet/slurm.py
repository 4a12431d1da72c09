"""Drain ownership for `gputopo health --as slurm-healthcheck`: gputopo drains and resumes its own
node through `scontrol` and `sinfo` (paths settable; no Slurm library), as LBNL NHC does.

- a failure drains the node only when no other owner drained it: a node already drained with a
  reason that does not start ``gputopo:`` keeps its drain and its reason;
- a drain that is gputopo's has its reason updated when the failure's reason changed;
- a pass (or a warning) resumes only a drain whose reason starts ``gputopo:``;
- a drain with an empty reason is never touched;
- not judged drains nothing unless ``--on-unknown drain``;
- only a change acts: the same verdict and reason as the last one kept (gputopo/fleet/state.py),
  acted on then, does nothing, not even a query.

Slurm 22.05's forms: ``sinfo -h -N -n NODE -o "%N|%T|%E"`` prints one line per partition the node
is in, ``NAME|STATE|REASON``, STATE the extended state (``idle``, ``mixed``, ``drained``,
``draining``, ``allocated+drain``..., a ``*`` appended when the node does not respond, ``~`` when
powered down), REASON ``none`` when there is none. ``scontrol update NodeName=NODE State=DRAIN
Reason=...`` drains (or, on a drained node, sets its reason); ``State=RESUME`` resumes.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence

from gputopo.model.reason import is_ours

#: seconds a call of scontrol or sinfo may take (slurmctld unreachable: the call is abandoned)
CALL_TIMEOUT_S = 10.0

Runner = Callable[[Sequence[str], float], "Called"]


@dataclass
class Called:
    returncode: int
    stdout: str
    stderr: str


class SlurmError(Exception):
    """scontrol or sinfo could not be run or failed: nothing was changed."""


def run_command(argv: Sequence[str], timeout_s: float) -> Called:
    """Run ``argv`` bounded by ``timeout_s``; SlurmError when it cannot start or does not end."""
    try:
        p = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s,
                           stdin=subprocess.DEVNULL, errors="replace")
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{argv[0]} did not answer within {timeout_s:g} s") from None
    except OSError as e:
        raise SlurmError(f"cannot run {argv[0]}: {e.strerror or e}") from None
    return Called(p.returncode, p.stdout, p.stderr)


@dataclass
class NodeState:
    node: str
    state: str
    reason: str  # "" when Slurm has none

    @property
    def drained(self) -> bool:
        """Whether the node carries Slurm's DRAIN flag (drained, draining, or +drain)."""
        words = re.split(r"[+]", self.state.lower().rstrip("*~#!%$@^-"))
        return any(w.rstrip("*~#!%$@^-") in ("drain", "drained", "draining") for w in words)


def sinfo_argv(sinfo: str, node: str) -> List[str]:
    return [sinfo, "-h", "-N", "-n", node, "-o", "%N|%T|%E"]


def read_node(sinfo: str, node: str, run: Runner = run_command) -> NodeState:
    """The node's state and reason as sinfo prints them (SlurmError when it cannot say)."""
    called = run(sinfo_argv(sinfo, node), CALL_TIMEOUT_S)
    if called.returncode != 0:
        raise SlurmError(f"{sinfo} exited {called.returncode}: {_first(called.stderr or called.stdout)}")
    for line in called.stdout.splitlines():
        parts = line.strip().split("|", 2)
        if len(parts) == 3 and parts[0] == node:
            reason = parts[2].strip()
            return NodeState(node, parts[1].strip(), "" if reason in ("none", "(null)") else reason)
    raise SlurmError(f"{sinfo} does not list node {node!r}: {_first(called.stdout) or 'no output'}")


def _first(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[0][:200] if lines else "no output"


@dataclass
class Action:
    """What to do to the node: ``drain``, ``update`` (a gputopo drain's reason), ``resume`` or
    ``none``, and why in a few words."""

    kind: str
    why: str


def decide(state: NodeState, verdict: str, reason: str, on_unknown: str = "ignore") -> Action:
    """Ownership: see the module's docstring. ``reason``: the failure's reason (the grammar's)."""
    bad = verdict == "fail" or (verdict == "not-judged" and on_unknown == "drain")
    if bad:
        if not state.drained:
            return Action("drain", "drained")
        if not state.reason:
            return Action("none", "already drained with an empty reason: not gputopo's, left as it is")
        if not is_ours(state.reason):
            return Action("none", f"already drained by another owner ({state.reason[:60]}): left as it is")
        if state.reason != reason:
            return Action("update", "gputopo's drain, its reason updated")
        return Action("none", "already drained by gputopo for this reason")
    if state.drained and is_ours(state.reason):
        if verdict == "not-judged":
            return Action("none", "gputopo's drain kept: nothing judged to resume it on")
        return Action("resume", "gputopo's drain resumed")
    if state.drained:
        why = "an empty reason" if not state.reason else f"another owner's ({state.reason[:60]})"
        return Action("none", f"drained with {why}: left as it is")
    return Action("none", "not drained: nothing to do")


def scontrol_argv(scontrol: str, node: str, action: Action, reason: str) -> Optional[List[str]]:
    if action.kind in ("drain", "update"):
        return [scontrol, "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"]
    if action.kind == "resume":
        return [scontrol, "update", f"NodeName={node}", "State=RESUME"]
    return None


def act(scontrol: str, node: str, action: Action, reason: str, run: Runner = run_command) -> None:
    """Carry out ``action`` (SlurmError when scontrol fails: the node is as it was)."""
    argv = scontrol_argv(scontrol, node, action, reason)
    if argv is None:
        return
    called = run(argv, CALL_TIMEOUT_S)
    if called.returncode != 0:
        raise SlurmError(f"{scontrol} exited {called.returncode}: {_first(called.stderr or called.stdout)}")
