"""`gputopo health --level passive`: what needs no GPU work, within a time budget.

The steps run in order in one daemon thread: the scan (NVML, the host's files, the kernel log,
the NIC ports: gputopo/probe/scan.py's one sequence, or a simulated machine's), its findings
(gputopo/report/rules.py's ``scan`` judgement), then the history (counter growth against the
machine's earlier scans, the last measuring run's drift: gputopo/recording.py). The caller waits
for them at most the budget; a step that has not finished by then is ``not judged``, never a
failure, and the verdict is made of what did finish. Nothing here touches a GPU a job uses: NVML
queries and files only.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from gputopo.model import Finding, Topology

from .checks import APPLICABLE, CHECKS, NOT_JUDGED, CheckResult, not_judged, scan_checks
from .verdict import NodeVerdict

#: A scan is recorded in the history at least this often (seconds of the scan's own clock), and
#: whenever a counter changed: health checks every few seconds do not fill the database.
RECORD_EVERY_S = 3600.0


def history_check(topo: Topology, findings: List[Finding], path: Optional[Path], sim: Optional[str],
                  argv: List[str], record: bool = True) -> CheckResult:
    """Counter growth of this scan against the machine's earlier scans and the drift the history
    found in its last measuring run; the scan recorded when due (:data:`RECORD_EVERY_S`, or a
    counter changed). A database that cannot be used is ``not judged``, with why."""
    if path is None:
        return not_judged("history", "no history database (--no-history)")
    from gputopo.errors import GputopoError
    from gputopo.history.counters import SCANS_BACK
    from gputopo.history.db import open_history
    from gputopo.history.query import counter_history, counter_run_ids, last_measured_drift, machine_id
    from gputopo.history.record import record_run
    from gputopo.recording import history_findings, record_from_scan, sim_clock

    try:
        identity, rec = record_from_scan(topo, findings, argv, sim_clock(sim), command="health")
        conn = open_history(path)
    except (GputopoError, OSError) as e:
        return not_judged("history", f"history database {path} cannot be used: {e}")
    try:
        mid = machine_id(conn, identity)
        before = counter_run_ids(conn, mid, SCANS_BACK, rec.time_s) if mid is not None else []
        found = history_findings(conn, identity, rec)
        last_run, drift = last_measured_drift(conn, mid) if mid is not None else (None, [])
        # the last scan recorded, whenever its time (a simulated clock repeats itself)
        last = counter_history(conn, mid, 1) if mid is not None else {}
        now = {(c.gpu_uuid, c.counter, c.link): c.value for c in rec.counters}
        changed = any(not last.get(k) or last[k][-1][1] != v for k, v in now.items())
        last_s = max((s[-1][0] for s in last.values()), default=None)
        due = changed or last_s is None or abs(rec.time_s - last_s) >= RECORD_EVERY_S
        if record and rec.counters and due:
            record_run(conn, identity, rec, [f.to_json() for f in found])
    except GputopoError as e:
        return not_judged("history", f"history database {path}: {e}")
    finally:
        conn.close()
    parts = []
    judged = False
    if not rec.counters:
        parts.append("no error counter read by the scan")
    elif before:
        judged = True
        parts.append(f"{len(now)} error counter(s) against {len(before)} earlier scan(s) of this machine in {path}")
    else:
        parts.append(f"counter growth not judged: no earlier scan of this machine in {path}"
                     + (" (this one is recorded)" if record else ""))
    if last_run is not None:
        judged = True
        parts.append(f"drift: the last measuring run ({last_run['command']}, run {last_run['id']}) "
                     "against its baseline")
    else:
        parts.append("drift not judged: no measuring run of this machine in the history")
    drift_findings = [Finding.from_json(d) for d in drift]
    return CheckResult("history", APPLICABLE if judged else NOT_JUDGED, "; ".join(parts), found + drift_findings)


def run_passive(load: Callable[[], Topology], budget_s: float, history: Optional[Path], sim: Optional[str],
                argv: List[str], record: bool = True) -> NodeVerdict:
    """The passive level within ``budget_s`` seconds. An error of the scan itself (no driver, a
    bad description) is raised as it was (the command could not run); once the budget is spent,
    what is left is not judged and the thread is left behind (a daemon: it never holds the exit)."""
    start_wall, start = time.time(), time.monotonic()
    got: Dict[str, Any] = {}
    done = threading.Event()

    def work() -> None:
        try:
            topo = load()
            got["topo"] = topo
            from gputopo.report.kernel_log_findings import scan_kernel_log_notes
            from gputopo.report.rules import scan_findings

            findings = scan_findings(topo)
            got["scan"] = scan_checks(topo, findings, scan_kernel_log_notes(topo))
            got["history"] = history_check(topo, findings, history, sim, argv, record)
        except BaseException as e:  # noqa: BLE001 - handed to the caller, raised there
            got["error"] = e
        finally:
            done.set()

    threading.Thread(target=work, name="gputopo-health-passive", daemon=True).start()
    done.wait(timeout=budget_s)
    used = time.monotonic() - start
    if "error" in got and done.is_set():
        raise got["error"]
    late = f"did not finish within the budget of {budget_s:g} s"
    topo = got.get("topo")
    if "scan" in got:
        checks = list(got["scan"])
        cut = "" if "history" in got else f"the history {late}"
        checks.append(got.get("history") or not_judged("history", late))
    else:
        step = "the scan's findings" if topo is not None else "the scan (NVML, host files, kernel log, NIC ports)"
        cut = f"{step} {late}"
        checks = [not_judged(name, late) for name in CHECKS]
    return NodeVerdict("passive", checks, budget_s, used, start_wall,
                       machine=str(getattr(topo, "machine", "") or ""), source=str(getattr(topo, "source", "") or ""),
                       simulated=bool(getattr(topo, "simulated", False)), cut_short=cut)
