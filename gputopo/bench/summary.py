"""The terminal side of a bench run: the rich summary table and the progress bar.

The summary puts the findings its caller passes (the report's judgement) first, ``corrupt``,
``hang`` and ``crash`` before the others, then one row per pair:
link class, GB/s each way with peer access and staged through the host, latency, ``#wrong``
and all_reduce busbw. A simulated run says SIMULATED above everything; ``--concurrent`` says
that its bandwidths are perturbed. The progress bar (with ETA) shows only on a terminal.
"""

from __future__ import annotations

from typing import Dict, Sequence, Set, Tuple

from gputopo.console import literal_console
from gputopo.fit_table import Column, fitted_table, left_out_note
from gputopo.model import Finding, worst_first
from gputopo.model.finding_kinds import family, symptom

from .fabrics.fabric import recorded_fabric
from .nccl_transport import transport_cell
from .options import format_size
from .results import RunResult, bench_document
from .runner import NullProgress

_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "dim"}
#: The pair table after a bench: the pair, its class and #wrong stay whole at any width; NCCL's
#: transport, latency and the staged control leave first on a narrow terminal.
PAIR_COLUMNS = (Column("pair", keep=True), Column("class", keep=True), Column("P2P GB/s", "right", drop=1),
                Column("staged GB/s", "right", drop=4), Column("bidir", "right", drop=3),
                Column("lat us", "right", drop=5), Column("#wrong", "right", keep=True),
                Column("AR busbw", "right", drop=2), Column("NCCL via", drop=6))


def _told_first(kind: str) -> bool:
    """Wrong data, hangs and crashes the bench measured (not the numerics' NaN or divergence): the
    table's data and failure symptoms outside the numerics family, always shown and shown first."""
    return symptom(kind) in ("data", "failure") and family(kind) != "numerics"


def _num(x, fmt="{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def _two(a, b) -> str:
    if a is None and b is None:
        return "-"
    return f"{_num(a)} / {_num(b)}"


def render_summary(result: RunResult, console=None, *, show_info: bool = False,
                   findings: Sequence[Finding] = (), show_findings: bool = True) -> None:
    """Print the run's summary to ``console`` (a rich Console; stdout when None).

    ``findings``: the report's judgement of the run (gputopo.report.measured_findings
    .bench_findings, and the numerics' own), shown above the table, their hangs and crashes
    marked in it; ``show_findings=False`` marks but does not show them, for callers that print
    the report's analysed findings (with causes and remedies) right after."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    console = console or literal_console()
    doc = bench_document(result)
    fabric = recorded_fabric(result.fabric)
    if result.simulated:
        src = "the link model of the simulated machine" if fabric is not None and fabric.simulated else \
            f"the {result.fabric} fabric"
        console.print(Text(f"SIMULATED machine {result.machine}: times come from {src}; "
                           "no real GPU was measured", style="bold magenta"))
    elif fabric is not None and fabric.stands_in:
        console.print(Text("fabric cpu: worker processes over gloo stand in for GPUs; "
                           "wall-clock CPU numbers", style="bold"))
    if result.interrupted:
        console.print(Text("INTERRUPTED: partial run; continue it with "
                           f"--resume {result.run_dir}", style="bold yellow"))
    if result.options.concurrent and not result.concurrent:
        console.print(Text("--concurrent ignored on the sim fabric: modeled times do not depend on "
                           "what runs beside them", style="dim"))
    if result.concurrent:
        console.print(Text("--concurrent on: disjoint pairs ran at once, bandwidths perturbed",
                           style="yellow"))

    shown = [f for f in worst_first(list(findings)) if show_findings and
             (show_info or f.severity != "info" or _told_first(f.kind))]
    first = [f for f in shown if _told_first(f.kind)]
    rest = [f for f in shown if f not in first]
    for f in first + rest:
        console.print(Text.assemble((f"{f.severity.upper():7} {f.kind:8} ",
                                     _SEVERITY_STYLE.get(f.severity, "")), f.message))

    if doc["pairs"]:
        sizes = sorted({p["size_bytes"] for p in doc["pairs"] if p["size_bytes"]})
        at = f" at {format_size(sizes[-1])}" if sizes else ""
        failed: Dict[Tuple[int, ...], Set[str]] = {}
        for f in findings:
            if symptom(f.kind) == "failure" and f.gpus and len(f.gpus) == 2:
                failed.setdefault(tuple(f.gpus), set()).add(f.kind)
        rows = []
        for p in doc["pairs"]:
            i, j = p["gpus"]
            fwd, back = f"{i}->{j}", f"{j}->{i}"
            wrong = "-" if p["wrong"] is None else str(p["wrong"])
            kinds = " ".join(sorted(failed.get((i, j), ())))
            wrong_cell = Text(f"{wrong} {kinds}".strip() if kinds else wrong,
                              style="bold red" if (p["wrong"] or kinds) else "")
            rows.append([
                f"{i},{j}", p["link_class"] or "?",
                _two(p["p2p_gbps"][fwd], p["p2p_gbps"][back]),
                _two(p["staged_gbps"][fwd], p["staged_gbps"][back]),
                _num(p["bidir_gbps"]),
                _two(p["latency_us"][fwd], p["latency_us"][back]),
                wrong_cell,
                _num(p["busbw_gbps"]["all_reduce"], "{:.2f}"),
                transport_cell(p["nccl_transport"])])
        table, left_out = fitted_table(
            PAIR_COLUMNS, rows, console.width, edges=False,
            title=f"GPU pairs (GB/s{at})", title_justify="left",
            caption="GB/s as i->j / j->i; bidir: both ways at once; lat: smallest copy "
                    "in µs; AR busbw: all_reduce bus bandwidth (nccl-tests); NCCL via: the "
                    "transport NCCL's log names for the pair (modeled on a sim)",
            caption_justify="left", box=box.SIMPLE_HEAD)
        console.print(table)
        if left_out:
            console.print(Text(left_out_note(left_out), style="dim"))
    if doc["self"]:
        table = Table(title="GPUs alone (GB/s)", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        for col in ("gpu", "host->gpu", "gpu->host", "gpu->gpu", "#wrong"):
            table.add_column(col, justify="right")
        for s in doc["self"]:
            table.add_row(str(s["gpu"]), _num(s["h2d_gbps"]), _num(s["d2h_gbps"]),
                          _num(s["d2d_gbps"]), "-" if s["wrong"] is None else str(s["wrong"]))
        console.print(table)
    timing = ", ".join(doc["timing"]) or "none"
    noisy = sum(p["noisy"] for p in doc["pairs"])
    tail = f"{len(result.measurements)} measurements (timing: {timing})"
    if noisy:
        tail += f", {noisy} noisy (IQR/median > 0.1)"
    console.print(Text(f"{tail}; run folder {result.run_dir}", style="dim"))


class RichProgress:
    """A rich progress bar with ETA, advanced once per measurement."""

    def __init__(self, console=None):
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn, TimeRemainingColumn)

        self._progress = Progress(TextColumn("{task.description}", markup=False), BarColumn(),
                                  MofNCompleteColumn(), TimeElapsedColumn(),
                                  TextColumn("ETA"), TimeRemainingColumn(),
                                  console=console, transient=True)
        self._task = None

    def start(self, total: int, description: str = "") -> None:
        self._progress.start()
        self._task = self._progress.add_task(description or "bench", total=total)

    def advance(self, n: int = 1, label: str = "") -> None:
        if self._task is not None:
            self._progress.update(self._task, advance=n, description=label or None)

    def stop(self) -> None:
        self._progress.stop()


def make_progress(console=None, enabled: bool = True):
    """A RichProgress when ``enabled`` and the console is a terminal, else a NullProgress."""
    if not enabled:
        return NullProgress()

    console = console or literal_console()
    if not console.is_terminal:
        return NullProgress()
    return RichProgress(console)


__all__ = ["render_summary", "make_progress", "RichProgress", "NullProgress"]
