"""Where a numerics run's records go as they complete: numerics.jsonl (each record, a hang or
crash included, the moment it exists) and events.jsonl's lines (Sink): a ``step-failed`` line
per way that hung or crashed (the bench's failure record, model/step_failure.py's
``numerics_failure``, made from the way's record and how its job ended) and a step-done line
per pair; the loss
curves CSV at the end, and done_pairs for --resume (reads numerics.jsonl back). The findings
the records make are the report's (gputopo.report.numerics_record)."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

from gputopo.model.step_failure import numerics_failure, numerics_step_id
from gputopo.runfolder.layout import EVENTS_JSONL, LOSSES_CSV, NUMERICS_JSONL
from gputopo.runfolder.reader import read_jsonl
from gputopo.runfolder.writer import append_jsonl

from .outcome import NumericsRun, Pair, WayFailed
from .result import WAYS, NumericsResult, num_to_json
from .verdict import FAILED_VERDICTS


def done_pairs(run_dir, retry_hung: bool = False) -> List[Pair]:
    """Pairs whose three ways are all recorded in ``run_dir``'s numerics.jsonl (for --resume),
    and pairs with a way that recorded a hang: the hang is their result (running them again
    would wait out the timeout again), unless ``retry_hung`` (--retry-hung)."""
    seen: Dict[Pair, set] = {}
    hung: set = set()
    for _, rec in read_jsonl(os.path.join(str(run_dir), NUMERICS_JSONL)):
        pair = tuple(sorted(rec.get("gpus") or ()))
        if len(pair) == 2:
            seen.setdefault(pair, set()).add(rec.get("way"))
            if rec.get("verdict") == "hang":
                hung.add(pair)
    return sorted(p for p, ways in seen.items()
                  if set(WAYS) <= ways or (p in hung and not retry_hung))


class Sink:
    """Collects records, appends them to the run folder as they complete."""

    def __init__(self, run_dir: Optional[str], write_events: bool, progress):
        self.run_dir = run_dir
        self.write_events = write_events
        self.progress = progress
        self.log_dir = os.path.join(run_dir, "workers") if run_dir else None
        if run_dir:
            os.makedirs(run_dir, exist_ok=True)

    def _append(self, name: str, doc: Dict[str, Any]) -> None:
        if self.run_dir:
            append_jsonl(os.path.join(self.run_dir, name), doc, allow_nan=False)

    def add(self, out: NumericsRun, rec: NumericsResult) -> None:
        out.results.append(rec)
        self._append(NUMERICS_JSONL, rec.to_json())
        if self.progress is not None:
            self.progress(rec)

    def pair_done(self, out: NumericsRun, pair) -> None:
        """A "step-done" event per pair, as the bench's runner writes for its steps."""
        if not self.write_events:
            return
        failed = any(r.verdict in FAILED_VERDICTS for r in out.results if tuple(r.gpus) == tuple(pair))
        self._append(EVENTS_JSONL, {"type": "step-done", "step": numerics_step_id(pair),
                                    "status": "failed" if failed else "ok"})

    def fail(self, out: NumericsRun, pair, lc, way, err: WayFailed, fabric, timing, opts,
             wall_s: float = 0.0) -> None:
        """Way ``way`` on ``pair`` produced nothing (``err``): its numerics.jsonl record (verdict
        ``hang`` or ``crash``), then its failure record, a ``step-failed`` line in events.jsonl
        with what is known of how its job ended (an exit code, a traceback)."""
        rec = NumericsResult(gpus=pair, link_class=lc, way=way, verdict=err.kind, step=None,
                             losses=[], max_rel_loss_dev=None, max_abs_param_diff=None,
                             tolerance={}, fabric=fabric, timing=timing, wall_s=wall_s,
                             model=opts.model, steps=opts.steps, lr=opts.lr, batch=opts.batch,
                             error=str(err))
        self.add(out, rec)
        if self.write_events:
            how = err.outcome.evidence() if err.outcome is not None else {}
            self._append(EVENTS_JSONL, numerics_failure(rec.to_json(), how).to_event())

    def write_losses(self, results: List[NumericsResult]) -> None:
        """Loss curves, one row per pair, way and step (step 0 first); 'nan'/'inf' as written."""
        if not self.run_dir or not results:
            return
        with open(os.path.join(self.run_dir, LOSSES_CSV), "w", encoding="utf-8") as f:
            f.write("gpus,link_class,way,step,loss\n")
            for r in results:
                g = "-".join(map(str, r.gpus))
                for step, loss in enumerate(r.losses):
                    v = num_to_json(loss)
                    f.write(f"{g},{r.link_class},{r.way},{step},{v if isinstance(v, str) else repr(v)}\n")
