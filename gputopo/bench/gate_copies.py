"""The measurements of `gputopo gate`: one verified peer copy per pair each way at one size, and
(``--measure copy+allreduce``) one small all_reduce over the whole set, run through the bench's
own worker pool (runner.py's :class:`Runner`), fabrics and specs (suites.py), so a gate copy is
timed and verified exactly as a bench one is.

It measures and returns what it measured: the measurements, the steps that hung or crashed
(StepFailure facts) and the steps it never started because the deadline had passed. It judges
nothing: gputopo/fleet/gate.py decides the verdict.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

from gputopo.model import Measurement, Topology
from gputopo.model.step_failure import StepFailure
from gputopo.runfolder.writer import RunLog
from gputopo.workers.peer_mappings import PEER_LIMIT, nvswitch_gpus

from .api import worker_config
from .fabrics.fabric import Fabric, fabric_named
from .plan import Case, Step
from .runner import NullProgress, Runner

Pair = Tuple[int, int]
#: The one collective `--measure copy+allreduce` adds (model/collectives.py's test name).
ALLREDUCE_TEST = "collective.all_reduce"
#: The most ranks the bench's all_reduce can verify (suites.py's SEED_RANK: one seed per rank).
MAX_ALLREDUCE_RANKS = 16


def copy_step(topology: Topology, pair: Pair, size_bytes: int) -> Step:
    """One pair's step: a peer copy each way (p2p.copy i->j, j->i) at ``size_bytes``."""
    i, j = pair
    cases = [Case("p2p.copy", (i, j), f"{a}->{b}", size_bytes, a, b) for a, b in ((i, j), (j, i))]
    return Step(f"p2p:{i}-{j}", "p2p", (i, j), str(topology.link_class(i, j)), cases)


def allreduce_step(gpus: Sequence[int], size_bytes: int) -> Step:
    """One all_reduce over every GPU of the set (the bench's collective spec, N ranks)."""
    g = tuple(sorted(gpus))
    return Step("collectives:" + "-".join(map(str, g)), "collectives", g, None,
                [Case(ALLREDUCE_TEST, g, "both", size_bytes, None, None)])


@dataclass
class GateMeasured:
    """What the gate's copies gave: measurements, failures, and steps never started (why)."""

    measurements: List[Measurement] = field(default_factory=list)
    failures: List[StepFailure] = field(default_factory=list)
    not_started: List[Step] = field(default_factory=list)
    elapsed_s: float = 0.0
    run_dir: Optional[Path] = None
    interrupted: bool = False


class _DeadlineRunner(Runner):
    """The bench's Runner that starts no step once ``deadline`` (time.monotonic()) has passed:
    the steps left are handed back, never run."""

    def __init__(self, *, deadline: float, **kw):
        super().__init__(**kw)
        self.deadline = deadline
        self.not_started: List[Step] = []

    def _launch(self, pending, running) -> None:
        if pending and time.monotonic() >= self.deadline:
            self.not_started.extend(pending)
            pending.clear()
        super()._launch(pending, running)


def run_gate_steps(topology: Topology, steps: Sequence[Step], fabric: Union[str, Fabric], run_dir: Path,
                   description=None, deadline: Optional[float] = None, timeout_s: float = 10.0,
                   argv: Optional[List[str]] = None) -> GateMeasured:
    """Run ``steps`` (copy_step / allreduce_step) on ``fabric`` with one untimed warm-up and one
    timed, verified sample each, writing a bench run folder in ``run_dir``. A step sending
    nothing for ``timeout_s`` is a hang (its workers killed); no step starts after ``deadline``."""
    t0 = time.monotonic()
    fabric = fabric_named(fabric)
    log = RunLog(run_dir)
    log.start(fabric=fabric.name, simulated=bool(topology.simulated or fabric.simulated),
              machine=topology.machine, options={"gate": True, "steps": [s.id for s in steps]},
              topology=topology, argv=list(argv or []),
              sim=getattr(description, "name", None) if description is not None else None)
    runner = _DeadlineRunner(
        deadline=deadline if deadline is not None else float("inf"),
        fabric=fabric, log=log, timeout_s=timeout_s, concurrent=False,
        pool_size=fabric.pool_size(None), progress=NullProgress(),
        config=worker_config(topology, fabric, description, timeout_s, 1),
        peer_limit=PEER_LIMIT if fabric.real_gpus else None,
        peer_exempt=nvswitch_gpus(topology) if fabric.real_gpus else (),
        step_settings={"warmup": 1, "samples": 1, "latency_repeat": 1})
    status = "failed"
    try:
        runner.run(list(steps))
        status = "interrupted" if runner.interrupted else "complete"
    finally:
        log.finish(status, steps_run=runner.steps_done, elapsed_s=round(time.monotonic() - t0, 3))
    return GateMeasured(measurements=list(runner.measurements), failures=list(runner.failures),
                        not_started=list(runner.not_started), elapsed_s=time.monotonic() - t0,
                        run_dir=run_dir, interrupted=runner.interrupted)
