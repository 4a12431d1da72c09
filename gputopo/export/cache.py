"""The last scan, shared by every scrape: at most one scan at a time, at most one per interval.

Why: a Prometheus server (or several, or a person with curl) may scrape at any rate and at
once; an NVML scan reads every GPU and the host, so scrapes must share one. A scrape that
finds the last scan older than the interval scans (holding the lock); scrapes that arrive
meanwhile wait for that scan and serve its result. A scan that fails as a whole (no driver,
an internal error) keeps the last good result and counts the failure.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gputopo.model import Failed, Finding, Topology
from gputopo.model.health import GpuHealth


@dataclass
class HistoryFacts:
    """What the exporter shows from the history database for the scanned machine."""

    last_run_s: float | None = None
    last_figures_run_s: float | None = None
    figures: list[dict[str, Any]] = field(default_factory=list)  # headline figures of that run
    findings: list[dict[str, Any]] = field(default_factory=list)  # of the machine's newest run
    #: Series the newest run's verdict could not judge (report/judged.py); None: not recorded
    series_not_judged: int | None = None
    error: str | None = None  # the database could not be read


@dataclass
class Snapshot:
    topology: Topology | None
    findings: list[Finding]
    history: HistoryFacts
    scanned_s: float | None  # wall-clock time of the last successful scan
    scan_duration_s: float | None
    scans: int  # scans attempted
    scan_errors: int  # NVML errors met while scanning (per GPU/field) and scans that failed whole
    last_error: str | None = None


def nvml_failures(topo: Topology) -> int:
    """How many NVML reads of this scan failed (a lost GPU counts once, each Failed field once)."""
    n = 0
    for g in topo.gpus:
        if g.lost is not None:
            n += 1
            continue
        values = [g.name, g.uuid, g.pci_bus_id, g.mig_mode, g.pcie.gen_current, g.pcie.gen_max,
                  g.pcie.width_current, g.pcie.width_max, g.pcie.replay_counter, g.health]
        for lk in g.nvlinks:
            values += [lk.active, *lk.errors.values()]
        if isinstance(g.health, GpuHealth):  # ECC, remapped rows, temperature, power...
            values += [getattr(g.health, name) for name in g.health.__dataclass_fields__]
        n += sum(_failed(v) for v in values)
    return n


def _failed(v: Any) -> int:
    if isinstance(v, dict):
        return sum(_failed(x) for x in v.values())
    return int(isinstance(v, Failed))


class ScanCache:
    """``scan()`` returns a Topology; ``judge(topo)`` its findings; ``history(topo)`` the
    HistoryFacts. ``current()`` is what one scrape calls."""

    def __init__(self, scan: Callable[[], Topology], judge: Callable[[Topology], list[Finding]],
                 history: Callable[[Topology], HistoryFacts], interval_s: float,
                 clock: Callable[[], float] = time.time):
        self._scan, self._judge, self._history = scan, judge, history
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._snap = Snapshot(None, [], HistoryFacts(), None, None, 0, 0)
        self._attempted_s: float | None = None
        #: why the last scan failed as a whole (None after a good one): `export` refuses to
        #: start when its very first scan fails (no driver: exit 3)
        self.last_exception: BaseException | None = None

    def current(self) -> Snapshot:
        with self._lock:  # one scan at a time; the others wait and then serve its result
            now = self._clock()
            if self._attempted_s is None or now - self._attempted_s >= self.interval_s:
                self._attempted_s = now
                self._rescan(now)
            return self._snap

    def _rescan(self, now: float) -> None:
        s = self._snap
        started = time.monotonic()
        try:
            topo = self._scan()
        except Exception as e:  # noqa: BLE001 - a scrape must answer; the failure is a metric
            self.last_exception = e
            self._snap = Snapshot(s.topology, s.findings, s.history, s.scanned_s, s.scan_duration_s,
                                  s.scans + 1, s.scan_errors + 1, f"{type(e).__name__}: {e}")
            return
        duration = time.monotonic() - started
        self.last_exception = None
        self._snap = Snapshot(topo, self._judge(topo), self._history(topo), now, duration,
                              s.scans + 1, s.scan_errors + nvml_failures(topo), None)
