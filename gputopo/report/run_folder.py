"""A run folder as the report judges it: the folder's facts (gputopo.runfolder.reader) plus what
makes it unreadable as a whole, each a ``problem`` the report turns into an ``incomplete-data`` /
``invalid-data`` finding (data_findings.py), and the history's judgement kept in it.

The problems, in order: what of the files could not be read (skipped lines per file, a kernel
log's unread lines, measurements appended twice), a missing file, an unfinished run, a file
holding fewer results than events.jsonl recorded (coverage.py), measurements whose link class
contradicts topology.json, and a measurements file emptied under a run that says it completed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, List, Mapping, Optional

from gputopo.bench.fabrics.fabric import fill_figures_of
from gputopo.model import Measurement, Topology
from gputopo.runfolder.layout import MEASUREMENTS_JSONL
from gputopo.runfolder.reader import RunFolder, is_gpu_list, is_number, read_folder

from .coverage import folder_problems
from .history_record import HistoryRecord, history_record


@dataclass
class Run(RunFolder):
    """Everything a run folder holds, parsed, and what the report must say about its data."""

    #: What makes the folder's data incomplete (skipped lines, an emptied file) or doubled; the
    #: report turns each into a finding (data_findings.py) so it never reads like a clean run.
    problems: List[str] = field(default_factory=list)
    #: history_findings.json: what the machine's history said when the run was recorded (None:
    #: never recorded, e.g. --no-history)
    history: Optional[HistoryRecord] = None


def load_run(run_dir) -> Run:
    """Read a run folder. Raises UsageError when it is not one, InputFileError on a broken file."""
    folder = read_folder(run_dir, numerics_check=numerics_record_problem)
    run = Run(**{f.name: getattr(folder, f.name) for f in fields(RunFolder)})
    fill_figures_of(run.measurements)  # lines written before the field: from their fabric
    if folder.history_doc is not None:
        run.history = history_record(folder.history_doc, run.notes)
    problems = list(folder.damaged)
    problems += [p for p in folder_problems(run.path, run.info, run.events,
                                            len(run.measurements) + folder.doubled, run.numerics)
                 if p not in problems]
    mixed = class_disagreement(run.measurements, run.topology)
    if mixed:
        problems.append(f"{MEASUREMENTS_JSONL}: {mixed}")
    if ((run.path / MEASUREMENTS_JSONL).exists() and not run.measurements
            and run.info.get("status") == "complete"):
        problems.append(f"{MEASUREMENTS_JSONL}: no measurement in it, yet run.json says the run completed: "
                        "the file was emptied or replaced, so no transfer can be judged")
    run.problems = problems
    return run


def _number_or_text(v) -> bool:
    """A loss as numerics.jsonl writes it: a number, null, or "nan"/"inf"/"-inf"."""
    return v is None or is_number(v) or v in ("nan", "inf", "-inf")


def numerics_record_problem(rec: Mapping[str, Any], gpu_indices: Optional[set] = None) -> Optional[str]:
    """Why a numerics.jsonl line is not a numerics record a report can use, or None: the wrong
    types, a verdict or way numerics never writes (an unknown verdict read as "not bad" would
    pass a gate), one GPU twice, or a GPU the run's topology does not have."""
    from gputopo.numerics.verdict import FAILED_VERDICTS, VERDICTS

    gpus = rec.get("gpus")
    if not is_gpu_list(gpus):
        return f"gpus must be a list of one or two GPU indices, got {gpus!r}"
    assert isinstance(gpus, list)
    if len(set(gpus)) != len(gpus):
        return f"gpus {gpus} names a GPU twice"
    if gpu_indices and any(g not in gpu_indices for g in gpus):
        return f"gpus {gpus}: the run's topology has no GPU {[g for g in gpus if g not in gpu_indices][0]}"
    if not isinstance(rec.get("way"), str) or not isinstance(rec.get("verdict"), str):
        return "way and verdict must be strings"
    if rec["verdict"] not in VERDICTS + FAILED_VERDICTS:
        return (f"verdict {rec['verdict'][:40]!r} is not one numerics writes "
                f"({', '.join(VERDICTS + FAILED_VERDICTS)})")
    step = rec.get("step")
    if step is not None and (not isinstance(step, int) or isinstance(step, bool) or step < 0):
        return f"step must be a step number or null, got {step!r}"
    losses = rec.get("losses")
    if losses is not None and (not isinstance(losses, list) or not all(_number_or_text(x) for x in losses)):
        return "losses must be a list of numbers"
    if rec["verdict"] == "ok" and any(x in ("nan", "inf", "-inf") or (is_number(x) and not math.isfinite(x))
                                      for x in losses or []):
        return "verdict ok, yet a loss is NaN or infinite"
    return None


def class_disagreement(measurements: List[Measurement], topology: Optional[Topology]) -> Optional[str]:
    """Why topology.json cannot be the measured machine's, or None: measurements that name another
    link class for their pair than topology.json does (a topology copied from another machine, or
    a measurements file from another run). Every writer takes a measurement's class from the same
    topology it saves, so one disagreement means the files do not belong together, and judging
    a pair by a class it was not measured on is a wrong verdict."""
    if topology is None or not topology.pairs:
        return None
    wrong, example = 0, ""
    for m in measurements:
        if len(m.gpus) != 2 or not m.link_class:
            continue
        try:
            in_topology = str(topology.link_class(*m.gpus))
        except KeyError:
            continue
        if in_topology != m.link_class:
            wrong += 1
            example = example or f"GPUs {m.gpus[0]},{m.gpus[1]}: {m.link_class} measured, {in_topology} in topology.json"
    if not wrong:
        return None
    return (f"{wrong} measurement(s) name another link class for their pair than topology.json ({example}): "
            "the topology is not the measured machine's, so no pair can be judged by its class")
