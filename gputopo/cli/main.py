"""The `gputopo` entry point and its error handling: every failure ends as one line + exit code.

The click group is in group.py; click commands live in the sibling modules, one per command, and
add themselves to that group; this module imports them (never the other way round). They only
parse options and call the layers below. Heavy libraries (torch, pandas, matplotlib) are imported inside the commands
that need them, never here.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
from typing import Optional

import click

from gputopo.cli.group import cli
from gputopo.console import clip, printable
from gputopo.errors import EXIT_INTERNAL, EXIT_USAGE, GputopoError
from gputopo.cli.tracebacks import save_traceback


def _register():
    # Each module adds its commands to `cli`; they import their layers lazily, so this is cheap.
    from gputopo.cli import (  # noqa: F401
        bench,
        check,
        cluster,
        export,
        gate,
        health,
        history,
        importer,
        place,
        report,
        scan,
        sims,
    )


#: errnos of a full disk or an exhausted quota.
_DISK_FULL_ERRNOS = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


def _disk_full(e: OSError):
    """A full disk is the machine's state, not a bug: one line, exit 2, and run.json's status
    set to "failed" where the run was still marked running (best effort: the same disk)."""
    run_dir = getattr(e, "run_dir", None)
    where = e.filename or run_dir or "a file"
    if run_dir:
        try:
            from gputopo.runfolder.resume import read_run_info
            from gputopo.runfolder.writer import set_run_status

            if read_run_info(run_dir).get("status") == "running":
                set_run_status(run_dir, "failed", error="disk full")
        except Exception:  # noqa: BLE001 - best effort on a full disk; the line below matters
            pass
    if e.filename is None and not run_dir:
        _stdout_gone()  # stdout itself (`> /dev/full`), so the interpreter's last flush is quiet
        click.echo(f"gputopo: error: cannot write the output (disk full: {e.strerror or e}); free space "
                   "and run it again", err=True)
        sys.exit(EXIT_USAGE)  # as the README says: no file was named, it was the output
    resume = (f"; free space, then `gputopo bench --resume {run_dir}` or `gputopo report "
              f"{run_dir}`") if run_dir else "; free space and run it again"
    click.echo(f"gputopo: error: disk full ({e.strerror or e}) while writing {where}{resume}",
               err=True)
    sys.exit(EXIT_USAGE)


def _caused_by_interrupt(e: BaseException) -> bool:
    """Whether a KeyboardInterrupt is behind ``e`` (Python wraps one raised inside a class body's
    ``__set_name__`` in a RuntimeError, so Ctrl-C while matplotlib imports looked like a bug)."""
    seen = set()
    cur: Optional[BaseException] = e
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, KeyboardInterrupt):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


def _one_line(e: click.ClickException) -> str:
    """Click's message on one line, pointing at the command's --help (instead of click's
    Usage/Try/blank/Error block)."""
    message = " ".join(e.format_message().split())
    ctx = getattr(e, "ctx", None)
    if isinstance(e, click.UsageError) and ctx is not None:
        message += f" (see `{ctx.command_path} --help`)"
    return message


def _terminate_as_interrupt():
    """SIGTERM (a CI job cancelled, `kill`) stops a run as Ctrl-C does: the run folder is left
    a valid partial run marked "interrupted", never "running" with its workers orphaned.
    Returns the handler it replaced (None when it left SIGTERM alone)."""
    def on_sigterm(signum, frame):
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler):  # Python's own (KeyboardInterrupt), or a runner's "hold it" window
            handler(signal.SIGINT, frame)
        else:
            # SIG_IGN: a background job of a non-interactive shell (`gputopo bench ... &`) starts
            # with SIGINT ignored, so re-raising SIGINT did nothing and TERM was lost
            raise KeyboardInterrupt

    try:
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            return signal.signal(signal.SIGTERM, on_sigterm)
    except ValueError:  # not the main thread (an embedding program): leave signals alone
        pass
    return None


#: A reader that closed the pipe (`gputopo scan | head -1`): no message, the status a shell
#: gives a program killed by SIGPIPE (128 + 13), so `set -o pipefail` still sees the output cut.
EXIT_BROKEN_PIPE = 141


def _stdout_gone() -> None:
    """Point stdout at /dev/null so the interpreter's last flush cannot fail a second time."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _plain_streams() -> None:
    """stdout/stderr that cannot encode a character (PYTHONIOENCODING=ascii, a C locale) print
    it as '?' instead of failing with UnicodeEncodeError; a bogus MPLBACKEND (matplotlib refuses
    to import) is replaced by Agg, which every gputopo plot uses anyway."""
    for stream in (sys.stdout, sys.stderr):
        enc = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
        if enc and not enc.startswith("utf") and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="replace")
            except (ValueError, OSError):
                pass
    if "matplotlib" not in sys.modules and os.environ.get("MPLBACKEND", "").lower() != "agg":
        os.environ["MPLBACKEND"] = "Agg"
    _matplotlib_config_dir()


def _matplotlib_config_dir() -> None:
    """Where matplotlib's own config folder cannot be written (a read-only or missing HOME, as in
    many containers), point MPLCONFIGDIR at a folder of this user's under the temp dir, so the
    plots are drawn without matplotlib's two warning lines about making a temporary one."""
    if "matplotlib" in sys.modules or os.environ.get("MPLCONFIGDIR"):
        return
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    folder = os.path.join(xdg, "matplotlib")
    while not os.path.exists(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    if os.access(folder, os.W_OK):
        return
    import tempfile

    fallback = os.path.join(tempfile.gettempdir(), f"gputopo-matplotlib-{os.getuid()}")
    try:
        os.makedirs(fallback, mode=0o700, exist_ok=True)
    except OSError:
        return
    if os.access(fallback, os.W_OK):
        os.environ["MPLCONFIGDIR"] = fallback


def main(argv=None):
    """Entry point: run the click group, map errors to exit codes (README.md)."""
    old_sigterm = _terminate_as_interrupt()
    _plain_streams()
    try:
        _main(argv)
        _flush_stdout()
    except SystemExit as e:  # a failure keeps its own exit code; a success may still fail to write
        _flush_stdout(quiet_exit=e.code in (None, 0))
        raise
    finally:
        _stop_helpers()
        if "gputopo.writable" in sys.modules:  # a FIFO held for --junit/--plot but never written
            sys.modules["gputopo.writable"].close_held()
        if old_sigterm is not None:  # main() called in-process (tests) leaves no trace
            signal.signal(signal.SIGTERM, old_sigterm)


def _drop_lost_ctrl_c_noise() -> None:
    """A Ctrl-C that lands in a garbage-collection callback (a weakref's, a ``__del__``) cannot
    be raised there: Python prints "Exception ignored in ..." and a KeyboardInterrupt traceback
    and goes on, the command's outcome unchanged (seen once in 16 double Ctrl-Cs of the demo,
    tests/tools/ctrl_c_stress.py). Those lines are dropped; any other unraisable error still shows."""
    shown = sys.unraisablehook

    def hook(unraisable) -> None:
        if not isinstance(unraisable.exc_value, KeyboardInterrupt):
            shown(unraisable)

    sys.unraisablehook = hook


def entry() -> None:
    """The `gputopo` command (console script, ``python -m gputopo``): :func:`main`, then the
    exit handlers (atexit: temporary folders, multiprocessing's children), a last flush, and
    ``os._exit``. Why: tearing down an interpreter with torch, matplotlib and pandas loaded took
    0.6 to 0.8 s after the command had finished (measured on the demo's bench); every file the
    command wrote is closed and its helper processes are stopped by then. In-process callers
    (tests, embedding) call :func:`main` and keep the normal exit."""
    import atexit

    code = 0
    _drop_lost_ctrl_c_noise()
    try:
        main()
    except SystemExit as e:
        code = e.code  # type: ignore[assignment]
    except KeyboardInterrupt:  # a Ctrl-C between the command's end and main()'s return
        code = 130
    try:  # the outcome is decided: a Ctrl-C from here on would only print a traceback
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread
        pass
    if isinstance(code, str):  # as the interpreter does with SystemExit("message")
        print(code, file=sys.stderr)
        code = 1
    elif not isinstance(code, int):
        code = 0 if code is None else 1
    try:
        atexit._run_exitfuncs()
    except Exception:  # noqa: BLE001 - best effort on the way out; never mask the exit code
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(code)


def _flush_stdout(quiet_exit: bool = True) -> None:
    """Flush what is left of stdout now, while an error can still be said in one line: a
    closed pipe ends quietly (141), a full disk (`> /dev/full`) says so (exit 2). With
    ``quiet_exit`` False (the command failed already) stdout is only silenced."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _stdout_gone()
        if quiet_exit:
            sys.exit(EXIT_BROKEN_PIPE)
    except OSError as e:
        _stdout_gone()
        if quiet_exit:
            click.echo(f"gputopo: error: cannot write the output: {e.strerror or e}", err=True)
            sys.exit(EXIT_USAGE)
    except (ValueError, AttributeError):  # stdout closed or None
        pass


def _stop_helpers() -> None:
    """End the multiprocessing forkserver a bench or numerics run started, so that no python
    process outlives the command (left alone it lingers while torch tears down). A Ctrl-C
    during it changes nothing: the command has ended. Commands that started no forkserver
    import nothing here (multiprocessing alone is 10 ms of every `scan`)."""
    if "multiprocessing.forkserver" not in sys.modules:
        return
    try:
        from gputopo.workers.processes import despite_ctrl_c, stop_forkserver

        despite_ctrl_c(stop_forkserver)
    except Exception:  # noqa: BLE001 - best effort on the way out; never mask the exit code
        pass


#: OSErrors about a path the user gave (a read-only folder, a folder where a file goes...).
_USER_PATH_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.EISDIR, errno.ENOTDIR,
                     errno.ENAMETOOLONG, errno.ENOSPC, errno.ELOOP, errno.EEXIST}


def _internal_error(e: Exception):
    if _caused_by_interrupt(e):  # Ctrl-C inside an import (e.g. wrapped in a RuntimeError)
        click.echo("gputopo: aborted", err=True)
        sys.exit(130)
    path = save_traceback(getattr(e, "run_dir", None))
    click.echo(f"gputopo: internal error: {type(e).__name__}: {printable(clip(str(e), 2000))} "
               f"(traceback in {path})", err=True)
    sys.exit(EXIT_INTERNAL)


def _main(argv=None):
    _register()
    try:
        rv = cli.main(args=argv, prog_name="gputopo", standalone_mode=False)
    except SystemExit:
        # click answers EPIPE itself (even outside standalone mode): it wraps stdout in its
        # _PacifyFlushWrapper and exits 1, a failure with nothing said; end as a closed pipe does
        if type(sys.stdout).__name__ == "_PacifyFlushWrapper":
            _stdout_gone()
            sys.exit(EXIT_BROKEN_PIPE)
        raise
    except GputopoError as e:
        click.echo(f"gputopo: error: {printable(clip(str(e), 4000))}", err=True)  # one line, whatever paths it names
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        click.echo("gputopo: aborted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # bare `gputopo`: the help, as click shows it
            e.show()
            sys.exit(EXIT_USAGE)
        click.echo(f"gputopo: error: {printable(clip(_one_line(e), 4000))}", err=True)
        sys.exit(EXIT_USAGE if isinstance(e, click.UsageError) else e.exit_code)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except BrokenPipeError:
        _stdout_gone()
        sys.exit(EXIT_BROKEN_PIPE)
    except OSError as e:
        if e.errno in _DISK_FULL_ERRNOS:
            _disk_full(e)  # one line; a run folder's run.json marked failed where it was running
        if e.errno in (errno.EFBIG, errno.EIO) and e.filename is None:
            _stdout_gone()  # stdout itself, or a file whose name the error lost: not our bug
            click.echo(f"gputopo: error: cannot write the output: {e.strerror or e}", err=True)
            sys.exit(EXIT_USAGE)
        if e.errno not in _USER_PATH_ERRNOS or e.filename is None:
            _internal_error(e)
        from gputopo.writable import os_error_line  # a path the user gave: not our bug

        click.echo(f"gputopo: error: {printable(os_error_line(e))}", err=True)
        sys.exit(EXIT_USAGE)
    except Exception as e:  # internal error: one line here, the traceback in a file
        _internal_error(e)
    sys.exit(rv if isinstance(rv, int) else 0)
