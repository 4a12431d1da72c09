"""What ``bench --resume DIR`` (and ``numerics --resume``) reads in a run folder, and what it
continues (docs/run-folder.md, "What each reader relies on").

- Only a bench run, with the tests it was started with: an import or a cluster run has no bench
  steps (resuming one is a usage error, "not a bench run", exit 2, not a search for a GPU
  driver), and a resume runs the tests run.json's options and argv name, never the command
  line's defaults (resuming a finished ``--tests p2p`` run must not add numerics).
- Verified before it is built on: a resumed run appends to the folder it resumes, so a run.json
  of the wrong shape or a measurements.jsonl line that is not a measurement would be carried
  into the finished run (or crash the runner half way). Both are refused with one line naming
  the file, the line or key, and what is wrong (exit 2).
- One writer at a time (writer.run_folder_lock), and its cut last lines cleared first: a worker
  killed while appending leaves the last JSON-lines line cut; appending after it would glue the
  next record onto the cut one and lose both, so the cut bytes are cleared and the step they
  belonged to is redone (its measurement is missing), never dropped.
- A step is finished only when events.jsonl says it ended ``ok`` *and* every one of its
  measurements is in measurements.jsonl: a run marked complete whose measurements were lost, or
  a step whose worker crashed, is redone rather than counted as measured (a resume that
  re-measures nothing must not hand a CI gate a clean-looking run). A step that hung stays a
  result: running it again would wait out the timeout again, and the hang is what the run found.
- Before it measures anything it says one line: which run it continues, how much is done and
  what is left (:func:`resume_line`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Set, Tuple

from gputopo.errors import InputFileError, UsageError
from gputopo.model import Finding, Measurement

from .layout import APPENDED, EVENTS_JSONL, MEASUREMENTS_JSONL, RUN_JSON
from .reader import check_run_json, finding_from_event, read_jsonl

# ----------------------------------------------------------------------------- what it continues


def refuse_non_bench(run_dir, info: Dict[str, Any]) -> None:
    """UsageError unless ``info`` (run.json) is a bench run's: an import or a cluster run has
    nothing a resume could continue."""
    options = info.get("options") or {}
    kind = ("an import of nccl-tests output" if info.get("source") == "nccl-tests"
            or "imported_from" in options else
            "a cluster run" if info.get("kind") == "cluster" else None)
    if kind:
        raise UsageError(f"--resume {run_dir}: not a bench run ({kind}); nothing to resume")


def resumed_tests(info: Dict[str, Any]) -> Tuple[Tuple[str, ...], bool]:
    """(bench test groups, numerics wanted?) the run was started with: the groups from
    run.json's options, numerics from its recorded numerics options when present, else from
    the command it was started with (argv: `numerics`, `check`, or `bench --tests ...`)."""
    groups = tuple((info.get("options") or {}).get("tests") or ())
    if "numerics_options" in info:
        return groups, info["numerics_options"] is not None
    argv = [str(a) for a in info.get("argv") or []]
    command = argv[0] if argv else "bench"
    if command == "numerics":
        return groups, True
    if command == "check":
        return groups, True
    tests_text = None
    for k, a in enumerate(argv):
        if a == "--tests" and k + 1 < len(argv):
            tests_text = argv[k + 1]
        elif a.startswith("--tests="):
            tests_text = a.split("=", 1)[1]
    if not tests_text or tests_text.strip().lower() == "all":
        return groups, True
    return groups, "numerics" in [t.strip().lower() for t in tests_text.split(",")]


def clear_cut_lines(run_dir) -> List[str]:
    """Truncate each appended file after its last complete line (a line cut by a kill: it
    does not parse, and appending after it would glue the next record onto it). Returns one
    note per file cleared."""
    notes = []
    for name in APPENDED:
        path = Path(run_dir) / name
        try:
            with open(path, "rb+") as f:
                size = f.seek(0, os.SEEK_END)
                if size == 0:
                    continue
                f.seek(max(0, size - 65536))
                tail = f.read()
                if tail.endswith(b"\n"):
                    continue
                cut = tail.rfind(b"\n")
                keep = size - len(tail) + cut + 1 if cut >= 0 else (0 if size <= 65536 else None)
                if keep is None:  # one line longer than 64 KiB: leave it to the readers
                    continue
                f.truncate(keep)
                notes.append(f"{name}: cleared a cut last line ({size - keep} bytes); its step is redone")
        except FileNotFoundError:
            continue
    return notes


# ----------------------------------------------------------------------------- run.json


def read_run_info(run_dir) -> Dict[str, Any]:
    """run.json of a run folder (UsageError when it is not one)."""
    p = Path(run_dir)
    path = p / RUN_JSON
    if not path.is_file():
        raise UsageError(f"--resume {p}: not a gputopo run folder (no {RUN_JSON})")
    from gputopo.inputs import MAX_TEXT_BYTES, read_user_text

    try:
        info = json.loads(read_user_text(path, RUN_JSON, MAX_TEXT_BYTES, fifo_ok=False))
    except InputFileError as e:
        raise UsageError(f"--resume {p}: {e}") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"--resume {p}: cannot read {RUN_JSON}: {e}") from None
    return check_run_info(info, path)


def check_run_info(info: Any, path) -> Dict[str, Any]:
    """``info`` (run.json parsed) if it has the shape a resume needs: the keys every reader
    needs (reader.check_run_json) and the ``options`` it measures again; InputFileError naming
    the key otherwise."""
    check_run_json(info, path)
    _check_options(info.get("options") or {}, path)
    return info


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _int_list(x) -> bool:
    return isinstance(x, list) and all(_is_int(v) and v >= 0 for v in x)


_OPTION_CHECKS = (  # key, test, what it must be
    ("pairs", lambda x: isinstance(x, list) and all(_int_list(p) and len(p) == 2 for p in x),
     "a list of GPU pairs [i, j]"),
    ("self_gpus", _int_list, "a list of GPU indices"),
    ("tests", lambda x: isinstance(x, list) and all(isinstance(t, str) for t in x),
     "a list of test names"),
    ("preset", lambda x: isinstance(x, str), "a preset name"),
    ("sizes_bytes", lambda x: x is None or (_int_list(x) and all(v > 0 for v in x)),
     "a list of byte counts or null"),
    ("latency_sizes_bytes", lambda x: x is None or (_int_list(x) and all(v > 0 for v in x)),
     "a list of byte counts or null"),
    ("warmup", lambda x: x is None or (_is_int(x) and x >= 0), "a count or null"),
    ("samples", lambda x: x is None or (_is_int(x) and x > 0), "a count or null"),
    ("concurrent", lambda x: isinstance(x, bool), "true or false"),
)


def _check_options(options: Dict[str, Any], path) -> None:
    for key, ok, what in _OPTION_CHECKS:
        if key in options and not ok(options[key]):
            raise InputFileError(path, f"must be {what}, got {options[key]!r}"[:200],
                                 key=f"options.{key}")


# ----------------------------------------------------------------------------- progress


def read_progress(run_dir) -> Tuple[Dict[str, str], List[Measurement], List[Finding]]:
    """The last status of each step marked done, measurements already taken, findings already
    recorded."""
    p = Path(run_dir)
    done: Dict[str, str] = {}
    findings: List[Finding] = []
    for _, rec in read_jsonl(p / EVENTS_JSONL):
        if rec.get("type") == "step-done":
            step, status = rec.get("step"), rec.get("status")
            if isinstance(step, str) and isinstance(status, str):  # else not a step we can resume
                done[step] = status
        elif rec.get("type") == "finding":
            try:
                findings.append(finding_from_event(rec))
            except (KeyError, TypeError, ValueError):
                pass
    measurements = []
    for lineno, rec in read_jsonl(p / MEASUREMENTS_JSONL):
        try:
            measurements.append(Measurement.from_json(rec))
        except (KeyError, TypeError, ValueError) as e:  # a resume would build on a broken file
            raise InputFileError(p / MEASUREMENTS_JSONL, f"not a measurement ({e}); fix or "
                                 "remove that line to resume", line=lineno) from None
    return done, measurements, findings


#: step-done statuses that are results in themselves (not redone by a resume).
KEPT_FAILURES = ("hang",)


@dataclass
class Redo:
    """A step a resume runs again: its id, why, and how many of its measurements it takes."""

    step: str
    reason: str
    cases: int

    def to_json(self) -> dict:
        return {"type": "step-redo", "step": self.step, "reason": self.reason,
                "cases": self.cases}


def plan_resume(steps: List, status_by_step: Dict[str, str], done_keys: Set[str],
                retry_hung: bool = False):
    """(steps still to run, each with only its missing cases; the Redo of each that had been
    marked done). ``status_by_step`` is the last step-done status per step id; ``retry_hung``
    (--retry-hung) runs steps that hung again instead of keeping the hang as their result."""
    todo, redo = [], []
    for s in steps:
        status = status_by_step.get(s.id)
        if status in KEPT_FAILURES and not retry_hung:
            continue
        missing = [c for c in s.cases if c.key not in done_keys]
        if not missing:
            continue
        if status is not None:  # it was marked done, yet measurements are missing
            why = ("--retry-hung: it hung" if status in KEPT_FAILURES
                   else f"its worker ended with {status}" if status != "ok"
                   else f"{len(missing)} of its {len(s.cases)} measurement(s) are missing")
            redo.append(Redo(s.id, why, len(missing)))
        s.cases = missing
        todo.append(s)
    return todo, redo


def redo_lines(redo: List[Redo], limit: int = 5) -> List[str]:
    """What `bench --resume` tells the user it redoes (one line per step, then a count)."""
    if not redo:
        return []
    lines = [f"resume: redoing {len(redo)} step(s) marked done whose results are not all in "
             "the run folder:"]
    lines += [f"  {r.step}: {r.reason}" for r in redo[:limit]]
    if len(redo) > limit:
        lines.append(f"  ... and {len(redo) - limit} more (events.jsonl lists each as step-redo)")
    return lines


def resume_line(run_dir: str, machine: str, fabric: str, simulated: bool, tests: Sequence[str],
                self_gpus: Sequence[int], total: int, to_go: int) -> str:
    """'resuming D: bench on seed-8gpu (SIMULATED), 312 of 1008 measurements done, 696 to go;
    tests p2p,dp,collectives'."""
    on = f"{machine or 'an unnamed machine'} ({'SIMULATED' if simulated else f'fabric {fabric}'})"
    if not tests and not self_gpus:  # `numerics --resume`: its pairs are counted as they start
        return f"resuming {run_dir}: numerics on {on}"
    done = total - to_go
    left = "nothing to go" if to_go == 0 else f"{to_go} to go"
    what = ",".join(tests) or "none"
    if self_gpus:
        what += " and each GPU alone"
    return (f"resuming {run_dir}: bench on {on}, {done} of {total} measurement"
            f"{'s' if total != 1 else ''} done, {left}; tests {what}")
