"""Where the exporter's facts come from: the scan (this machine's NVML, or a simulated
machine), its findings (report/topology_checks.py) and the history database (read only: the
exporter never records its scans, so scraping every 15 s does not fill the history)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gputopo.model import Finding, Topology

from .cache import HistoryFacts, ScanCache


def scanner(sim: str | None) -> Callable[[], Topology]:
    """A function that scans once: the simulated machine ``sim`` (loaded once), or this one."""
    if sim:
        from gputopo.sim.description import load_description
        from gputopo.sim.scan import scan_description

        desc = load_description(sim)  # bad input fails here, before serving
        return lambda: scan_description(desc)
    from gputopo.probe.scan import scan_real

    return scan_real


def scan_findings_of(topo: Topology) -> list[Finding]:
    from gputopo.report.rules import scan_findings

    return scan_findings(topo)


def history_reader(path: Path | None) -> Callable[[Topology], HistoryFacts]:
    def read(topo: Topology) -> HistoryFacts:
        if path is None or not Path(path).exists():
            return HistoryFacts()
        from gputopo.history.db import HistoryError, open_history
        from gputopo.history.query import last_figures, last_run_time, machine_id
        from gputopo.history.record import machine_identity

        try:
            conn = open_history(path, create=False)
        except HistoryError as e:
            return HistoryFacts(error=str(e))
        try:
            mid = machine_id(conn, machine_identity(topo))
            if mid is None:
                return HistoryFacts()
            fig_s, figs = last_figures(conn, mid)
            last = conn.execute("SELECT id, judged FROM runs WHERE machine_id = ? ORDER BY time_s DESC, "
                                "id DESC LIMIT 1", (mid,)).fetchone()
            findings = [{"kind": k, "severity": s} for k, s in conn.execute(
                "SELECT kind, severity FROM findings WHERE run_id = ?", (last[0],))] if last else []
            return HistoryFacts(last_run_time(conn, mid), fig_s, figs, findings,
                                series_not_judged=_not_judged(last[1] if last else None))
        except Exception as e:  # noqa: BLE001 - a scrape still answers; history_up says it
            return HistoryFacts(error=f"{type(e).__name__}: {e}")
        finally:
            conn.close()

    return read


def _not_judged(text: str | None) -> int | None:
    """The stored judged record's count of series not judged (None: a scan, or recorded before)."""
    import json

    try:
        n = json.loads(text).get("series_not_judged") if text else None
    except (ValueError, AttributeError):
        return None
    return n if isinstance(n, int) else None


def make_cache(sim: str | None, history_path: Path | None, interval_s: float) -> ScanCache:
    return ScanCache(scanner(sim), scan_findings_of, history_reader(history_path), interval_s)
