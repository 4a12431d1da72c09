"""`--history PATH` / `--no-history` and the one hook each measuring command calls when its run
is finished: record it in the history database and print what the history says about it.

The options store into the click context's ``meta`` (shared by the group and its commands), so
the commands' signatures do not change. The hook runs after the run folder is complete. A
database the user named (``--history PATH`` or ``$GPUTOPO_HISTORY``) is an input of the command:
when it cannot be used, one line naming the kept folder and exit 2. The default location is
not: recording there is a side effect, so a problem with it (a read-only HOME on a CI runner or
in a container) is one warning line and the command keeps its own exit code; check's
``[history]`` rule then has no baseline and says why (skipped, or failed when strict).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from gputopo.cli.options import finish
from gputopo.errors import EXIT_USAGE

_PATH, _OFF = "gputopo.history_path", "gputopo.no_history"


def _store(ctx: click.Context, param: click.Parameter, value) -> None:
    if value:
        ctx.meta[_PATH if param.name == "history_path" else _OFF] = value


def history_options(f=None, *, records: bool = True):
    """Add --history PATH (and, on a command that records its run, --no-history)."""
    def add(f):
        if records:
            f = click.option("--no-history", "no_history", is_flag=True, expose_value=False,
                             callback=_store,
                             help="Do not record this run in the history database (check still "
                                  "reads it).")(f)
        return click.option("--history", "history_path", metavar="PATH", expose_value=False,
                            callback=_store, type=click.Path(dir_okay=False),
                            help="History database (default: $GPUTOPO_HISTORY, else "
                                 "$XDG_DATA_HOME/gputopo/history.sqlite).")(f)

    return add(f) if f is not None else add


def history_path(reading: bool = False) -> Path | None:
    """The database this command uses; None with --no-history, unless ``reading`` (the run is
    not recorded, but check's [history] rule still reads the baseline)."""
    from gputopo.history.db import default_history_path

    meta = click.get_current_context().meta
    if meta.get(_OFF) and not reading:
        return None
    given = meta.get(_PATH)
    return Path(given) if given else default_history_path()


def _named() -> bool:
    """The database was named by the user (--history PATH or $GPUTOPO_HISTORY), not defaulted."""
    from gputopo.history.db import HISTORY_ENV

    return bool(click.get_current_context().meta.get(_PATH) or os.environ.get(HISTORY_ENV))


def _default_unusable(e: Exception, what: str) -> None:
    """The one warning line for a default database that cannot be used."""
    click.echo(f"gputopo: warning: {what} not recorded in the default history database: {e}",
               err=True)


def _argv() -> list[str]:
    return list(sys.argv[1:])


def _say(recorded) -> None:
    for f in recorded.findings:
        click.echo(f"history: {f.severity.upper()} {f.kind}: {f.message}", err=True)


def after_run(run_dir, command: str, sim: str | None = None) -> None:
    """Record a finished run folder; print its drift/counter-growth findings (stderr); a
    database problem ends the command with exit 2 (the folder stays)."""
    if record_exit_code(run_dir, command, sim):
        finish(EXIT_USAGE)


def record_exit_code(run_dir, command: str, sim: str | None = None) -> int:
    """As after_run, for callers that exit by themselves (a cluster rank): 0, or 2 after the
    one line when the database cannot be used."""
    path = history_path()
    if path is None or run_dir is None:
        return 0
    from gputopo.history.db import HistoryError
    from gputopo.recording import record_folder

    try:
        recorded = record_folder(path, run_dir, command, _argv(), sim)
    except HistoryError as e:
        if not _named():  # recording into the default location is a side effect
            _default_unusable(e, f"the run (folder {run_dir}) is complete;")
            return 0
        click.echo(f"gputopo: error: {e} (the run is complete and its folder {run_dir} is kept; "
                   "not recorded)", err=True)
        return EXIT_USAGE
    _say(recorded)
    _keep(run_dir, recorded)
    return 0


def _keep(run_dir, recorded) -> None:
    """The history's findings into the run folder (history_findings.json, report re-rendered);
    a folder that cannot be written keeps its report as it was, said in one line (the run is
    recorded in the database all the same)."""
    from gputopo.errors import GputopoError
    from gputopo.recording import keep_in_folder

    try:
        if keep_in_folder(run_dir, recorded):
            click.echo(f"history: the findings above are now in the run folder's report ({run_dir})",
                       err=True)
            _say_history_basis(run_dir)
    except (OSError, GputopoError) as e:
        what = getattr(e, "strerror", None) or e
        click.echo(f"history: warning: could not write the history's findings into {run_dir} "
                   f"({what}); they are in the database (`gputopo history`)", err=True)


def _say_history_basis(run_dir) -> None:
    """Where the history judged series nothing else could: the verdict the folder now holds, and
    that its only basis for them is this machine's own past (report/judged.py)."""
    import json
    from pathlib import Path

    try:
        doc = json.loads((Path(run_dir) / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    bases = (doc.get("judged") or {}).get("bases") or {}
    if bases.get("history"):
        click.echo(f"history: {bases['history']} series judged against this machine's own past only "
                   f"(no published or theoretical rate applies): the run folder's verdict is now "
                   f"{doc.get('verdict')}", err=True)


def after_scan(topo, findings, sim: str | None = None) -> None:
    path = history_path()
    if path is None:
        return
    from gputopo.history.db import HistoryError
    from gputopo.recording import record_scan

    try:
        _say(record_scan(path, topo, findings, _argv(), sim))
    except HistoryError as e:
        if not _named():  # recording into the default location is a side effect
            _default_unusable(e, "the scan above is complete;")
            return
        click.echo(f"gputopo: error: {e} (the scan above is complete; not recorded)", err=True)
        finish(EXIT_USAGE)


def history_outcomes(spec, summary, sim: str | None = None) -> list:
    """`gputopo check`'s [history] rule outcomes for ``summary`` (before this run is recorded)."""
    from gputopo.check.history_rule import drift_outcomes as judge
    from gputopo.recording import baseline_drift

    from gputopo.history.db import HistoryError

    path = history_path(reading=True)  # --no-history: this run is not recorded, still judged
    assert path is not None
    try:
        if not path.exists():
            return judge(spec, [], 0, f"no history database at {path} yet")
        points, runs = baseline_drift(path, summary, spec.history_runs, sim)
    except (HistoryError, OSError) as e:
        if _named():  # the user's database: an input that cannot be used (exit 2)
            if isinstance(e, HistoryError):
                raise
            raise HistoryError(f"history database {path}: {e.strerror or e}") from None
        return judge(spec, [], 0, f"the default history database cannot be read: {e}")
    return judge(spec, points, runs)
