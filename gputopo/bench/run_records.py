"""What the bench runner (runner.py) keeps about the steps its workers run (the workers
themselves are the pool's records, gputopo/workers/pool.py), and the progress hook it reports
to when nothing is shown.

Why a module of its own: the runner's loop (starting workers, handing out steps, timeouts,
failures) is one job; these records, and which case a worker was in when its step ended
(the evidence of a hang or a crash), are another.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

from .plan import Case, Step


@dataclass
class RunningStep:
    """A step handed to its workers: who runs it (rank order), its deadline, what came back."""

    step: Step
    keys: List[str]
    ranks: List[Tuple[int, ...]]
    deadline: float
    sent: bool = False
    done: Set[str] = field(default_factory=set)
    delivered: int = 0
    started: float = field(default_factory=time.monotonic)
    #: A shared sim step (shares.py): the cases not handed out yet, in dealing order, and those
    #: handed to each worker, in order; None: every worker of the step runs all its cases.
    queue: Optional[List[Case]] = None
    given: Dict[str, List[Case]] = field(default_factory=dict)
    by_key: Dict[str, int] = field(default_factory=dict)  # measurements each worker delivered

    def hand_out(self, key: str) -> Optional[Case]:
        """The next case of a shared step for worker ``key`` (None: none left)."""
        if not self.queue:
            return None
        case = self.queue.pop(0)
        self.given.setdefault(key, []).append(case)
        return case

    def first_cases(self, key: str) -> Optional[List[Case]]:
        """The cases worker ``key`` starts the step with: all of them, or the next one of a
        shared step; None (and ``key`` done): a shared step with no case left for it (the
        runner gives a shared step no more workers than cases, but must not hand out none)."""
        if self.queue is None:
            return list(self.step.cases)
        case = self.hand_out(key)
        if case is None:
            self.done.add(key)
            return None
        return [case]

    def current_case(self, key: Optional[str]) -> Optional[Case]:
        """The case worker ``key`` was in when the step ended; None: of the workers not done,
        the case that comes first in the step (a hang stops every worker of a shared step)."""
        if self.queue is None:
            return self.step.cases[self.delivered] if self.delivered < len(self.step.cases) else None
        if key is not None:
            return self._in(key)
        now = [c for c in (self._in(k) for k in self.keys if k not in self.done) if c is not None]
        return min(now, key=self.step.cases.index) if now else None

    def _in(self, key: str) -> Optional[Case]:
        given, n = self.given.get(key, []), self.by_key.get(key, 0)
        return given[n] if n < len(given) else None


class NullProgress:
    """Progress hook that shows nothing (not a TTY, or progress off)."""

    def start(self, total: int, description: str = "") -> None:
        pass

    def advance(self, n: int = 1, label: str = "") -> None:
        pass

    def stop(self) -> None:
        pass
