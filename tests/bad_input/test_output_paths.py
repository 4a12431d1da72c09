"""Every file a user names for gputopo to write (--plot, --junit, check --init's --spec, and the
outputs a re-render replaces in a run folder) on an unusual path: a FIFO without a reader is
refused in one line within a bounded time, a FIFO with a reader (`cat FIFO`) gets the bytes,
/dev/full, a place that cannot be written and a folder are one line and exit 2, never a
traceback or a hang.

The readers are threads of this process that read a FIFO made under tmp_path to its end, as
`cat FIFO` does (so a writer that opens and closes the FIFO before writing ends them early, as
it ended cat); the commands run in this process (gputopo_here), bounded by its timeout."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

import pytest

from gputopo.errors import UsageError
from gputopo.inputs import INPUT_WAIT_ENV
from gputopo.writable import write_file_bytes
from helpers.cli import gputopo_here
from helpers.threads import call_within


@contextlib.contextmanager
def cat(path: Path):
    """A reader of the FIFO ``path`` that reads until its end of file, as `cat FIFO` does; yields
    the list its bytes go to (complete once the block ends). Never left blocked: when nothing
    opened the FIFO for writing, the cleanup opens and closes it to end the reader."""
    got: list = []
    done = threading.Event()

    def run():
        try:
            with open(path, "rb") as f:  # blocks until a writer opens it, as cat's open does
                got.append(f.read())
        finally:
            done.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    time.sleep(0.05)
    try:
        yield got
    finally:
        if not done.wait(5):
            with contextlib.suppress(OSError):
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            done.wait(5)


def one_line(rc, err):
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gputopo: error: "), err
    assert "Traceback" not in err and "internal error" not in err
    return lines[0]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A history with runs of pair 0,1 and a run folder to judge and to make a spec from."""
    from conftest_report import write_run

    w = tmp_path_factory.mktemp("outputs")
    env = {"GPUTOPO_HISTORY": str(w / "h.sqlite")}
    assert gputopo_here("scan", "--sim", "seed-8gpu", env=env, cwd=w)[0] == 0
    write_run(w / "run", [])
    return w


#: (the command with {o} the file it writes, the option, what the file starts with when written)
WRITERS = {
    "history --plot": (["history", "--pair", "0,1", "--plot", "{o}"], "--plot", ".png", b"\x89PNG\r\n"),
    "check --junit": (["check", "{w}/run", "--spec", "pcie-box", "--junit", "{o}", "--no-history"], "--junit",
                      ".xml", b"<?xml"),
    "check --init --spec": (["check", "--init", "--from", "{w}/run", "--spec", "{o}"], "--spec", ".toml",
                            b"# gputopo"),
}


def run_writer(name, work, target, tmp_path, wait="2"):
    argv, _, _, _ = WRITERS[name]
    args = [a.replace("{o}", str(target)).replace("{w}", str(work)) for a in argv]
    return gputopo_here(*args, cwd=tmp_path, timeout=30,
                        env={"GPUTOPO_HISTORY": str(work / "h.sqlite"), INPUT_WAIT_ENV: wait})


@pytest.mark.parametrize("name", WRITERS)
def test_a_fifo_with_a_reader_gets_the_whole_file(name, work, tmp_path):
    """`--junit gate.xml` with `cat gate.xml | upload` reading: the file arrives whole. (The
    start-up check opened and closed the FIFO, which ended cat before a byte was written, so
    --junit was refused as 'no process reads'; --plot was an internal error (matplotlib seeks);
    --init --spec refused the FIFO as a file that exists.)"""
    _, _, suffix, magic = WRITERS[name]
    fifo = tmp_path / f"out{suffix}"
    os.mkfifo(fifo)
    with cat(fifo) as got:
        rc, out, err = run_writer(name, work, fifo, tmp_path)
    assert rc in (0, 1) and "error" not in err, err  # check may fail the run (1): the XML is written
    assert got and got[0].startswith(magic), (got, err)
    plain = tmp_path / f"plain{suffix}"
    assert run_writer(name, work, plain, tmp_path)[0] == rc
    if suffix != ".png":  # the same bytes as into a plain file (a PNG carries its own time)
        norm = [b.replace(str(p).encode(), b"F") for b, p in ((got[0], fifo), (plain.read_bytes(), plain))]
        assert norm[0].count(b"\n") == norm[1].count(b"\n")


@pytest.mark.parametrize("name", WRITERS)
def test_a_fifo_without_a_reader_is_one_line_at_once(name, work, tmp_path):
    _, flag, suffix, _ = WRITERS[name]
    fifo = tmp_path / f"out{suffix}"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    line = one_line(*run_writer(name, work, fifo, tmp_path)[::2])
    assert time.monotonic() - t0 < 10
    assert line == f"gputopo: error: {flag} {fifo}: a FIFO that no process reads (writing would wait forever)"


@pytest.mark.parametrize("name", ["history --plot", "check --junit"])
def test_dev_full_names_the_option_and_the_path(name, work, tmp_path):
    """/dev/full (through a link with the format's ending): was "cannot write the output (disk
    full...); free space and run it again", naming neither the option nor the file."""
    _, flag, suffix, _ = WRITERS[name]
    link = tmp_path / f"full{suffix}"
    link.symlink_to("/dev/full")
    line = one_line(*run_writer(name, work, link, tmp_path)[::2])
    assert line == f"gputopo: error: {flag} {link}: cannot write it: no space left on device"


@pytest.mark.parametrize("name", WRITERS)
@pytest.mark.parametrize("where", ["under a file", "a folder", "/dev/full", "not creatable"])
def test_unwritable_places_are_one_line(name, where, work, tmp_path):
    _, flag, suffix, _ = WRITERS[name]
    (tmp_path / "notes.txt").write_text("precious\n")
    (tmp_path / f"dir{suffix}").mkdir()
    target = {"under a file": tmp_path / "notes.txt" / f"x{suffix}", "a folder": tmp_path / f"dir{suffix}",
              "/dev/full": Path("/dev/full"), "not creatable": Path("/proc") / f"x{suffix}"}[where]
    line = one_line(*run_writer(name, work, target, tmp_path)[::2])
    assert str(target) in line or (where == "not creatable" and "/proc" in line)
    if where == "under a file":
        assert (tmp_path / "notes.txt").read_text() == "precious\n" and "is a file, not a folder" in line


def test_a_history_database_under_a_file_says_so(tmp_path):
    """--history notes.txt/h.sqlite said "cannot open ([Errno 17] File exists: 'notes.txt')"."""
    (tmp_path / "notes.txt").write_text("precious\n")
    rc, _, err = gputopo_here("scan", "--sim", "pcie-4gpu", "--history", tmp_path / "notes.txt" / "h.sqlite",
                              cwd=tmp_path, timeout=30)
    line = one_line(rc, err)
    assert f"cannot open ({tmp_path / 'notes.txt'} is a file, not a folder)" in line, line
    assert (tmp_path / "notes.txt").read_text() == "precious\n"


def test_a_held_fifo_whose_command_fails_later_ends_its_reader(work, tmp_path):
    """check_writable_file keeps a FIFO open until it is written; a command that fails after the
    check (no history database here) closes it, so the reader ends instead of waiting forever."""
    fifo = tmp_path / "p.png"
    os.mkfifo(fifo)
    with cat(fifo) as got:
        rc, _, err = gputopo_here("history", "--pair", "0,1", "--plot", fifo, cwd=tmp_path, timeout=30,
                                  env={"GPUTOPO_HISTORY": str(tmp_path / "none.sqlite")})
        assert rc == 2 and "no such file" in err
        t0 = time.monotonic()
        while not got and time.monotonic() - t0 < 3:
            time.sleep(0.01)
    assert got == [b""]


# ----------------------------------------------------------------------------- the write itself


def _within(fn, seconds=5.0):
    return call_within(fn, seconds, "the write waited on its reader without bound (a hang)")


def test_a_reader_that_stops_reading_is_refused_after_the_wait(tmp_path, monkeypatch):
    """A reader that opened the FIFO but reads nothing: the pipe's buffer fills and a blocking
    write waited forever. Now: no byte taken for GPUTOPO_INPUT_WAIT seconds, one line saying how
    much was written."""
    monkeypatch.setenv(INPUT_WAIT_ENV, "0.3")
    fifo = tmp_path / "gate.xml"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader that never reads
    try:
        t0 = time.monotonic()
        with pytest.raises(UsageError) as info:
            _within(lambda: write_file_bytes(fifo, b"x" * 1_000_000, "--junit"))
        assert 0.25 < time.monotonic() - t0 < 5
        msg = str(info.value)
        assert msg.startswith(f"--junit {fifo}: the process reading that FIFO took no byte for 0.3 s (")
        assert "of 1000000 bytes written" in msg and "GPUTOPO_INPUT_WAIT=SECONDS" in msg
    finally:
        os.close(fd)


def test_a_reader_that_goes_away_midway_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv(INPUT_WAIT_ENV, "5")
    fifo = tmp_path / "gate.xml"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    threading.Timer(0.2, lambda: os.close(fd)).start()  # reads nothing, then exits
    with pytest.raises(UsageError, match=r"the process reading that FIFO went away after \d+ of 1000000 bytes"):
        _within(lambda: write_file_bytes(fifo, b"x" * 1_000_000, "--junit"))


def test_a_slow_reader_gets_everything(tmp_path, monkeypatch):
    """The bound is on a stall, not on the whole write: a reader taking its time gets it all."""
    monkeypatch.setenv(INPUT_WAIT_ENV, "1")
    fifo = tmp_path / "gate.xml"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    data = os.urandom(300_000)
    got = bytearray()

    def slow():
        while True:
            time.sleep(0.05)
            try:
                chunk = os.read(fd, 32_768)
            except BlockingIOError:
                continue
            if not chunk:
                return
            got.extend(chunk)

    t = threading.Thread(target=slow, daemon=True)
    t.start()
    try:
        _within(lambda: write_file_bytes(fifo, data, "--junit"), 10)
        t.join(5)
        assert bytes(got) == data
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- a run folder re-rendered


@pytest.mark.parametrize("name", ["report.html", "report.md", "results.csv"])
def test_a_fifo_among_a_run_folders_outputs_is_refused_not_waited_on(name, tmp_path):
    """`gputopo report RUN` with one of the files it replaces a FIFO: the write waited forever."""
    from conftest_report import write_run

    run = write_run(tmp_path / "run", [])
    os.mkfifo(run / name)
    line = one_line(*gputopo_here("report", run, "--no-plots", cwd=tmp_path, timeout=30)[::2])
    assert line == (f"gputopo: error: report: run folder {run}: its {name} is a FIFO (named pipe), not a file "
                    "a render writes; remove it and run again")
    assert not (run / "report.md").is_file() or name != "report.md"


def test_a_failed_open_says_its_own_reason(tmp_path):
    """The "no process reads" line is for a FIFO: any other failure says its own reason."""
    with pytest.raises(UsageError, match="cannot write it: no such file or directory"):
        write_file_bytes(tmp_path / "missing" / "x.xml", b"x", "--junit")
