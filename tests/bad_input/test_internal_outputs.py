"""The files gputopo writes on its own account, not named by an option, go through
writable.write_file_bytes like --plot and --junit (tests/bad_input/test_output_paths.py): the
cluster run's node heatmap (matplotlib's savefig wrote straight to the path) and the error.txt an
internal error leaves in its run folder (a plain open(..., "w")). A FIFO there without a reader
made both wait forever; /dev/full made the heatmap a traceback. Each call here is bounded by
helpers.threads.call_within; a FIFO that a hung writer still waits on is opened and closed by the
cleanup so no thread stays blocked."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
from helpers.threads import call_within
from test_output_paths import cat

from gputopo.errors import UsageError
from gputopo.inputs import INPUT_WAIT_ENV

pytest.importorskip("matplotlib")

#: A cluster document with three nodes measured in two inter-node groups (GB/s).
DOC = {"nodes": [{"name": "n0"}, {"name": "n1"}, {"name": "n2"}], "pattern": "pairs", "simulated": True,
       "rounds": [{"phase": "inter", "groups": [{"nodes": [0, 1], "busbw_gbps": 40.0},
                                                {"nodes": [1, 2], "busbw_gbps": 12.5}]}]}


@contextlib.contextmanager
def released(fifo: Path):
    """Whatever the test did, a writer still blocked opening ``fifo`` (the old code) is freed."""
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))


def _heatmap(run_dir):
    from gputopo.report.cluster_view import write_node_heatmap

    return call_within(lambda: write_node_heatmap(DOC, run_dir), 20,
                       "the heatmap's write waited on a FIFO without bound (a hang)")


def test_the_node_heatmap_into_a_fifo_without_a_reader_is_one_line_not_a_hang(tmp_path):
    fifo = tmp_path / "heatmap_nodes.png"
    os.mkfifo(fifo)
    with released(fifo), pytest.raises(UsageError) as info:
        _heatmap(tmp_path)
    assert str(info.value) == f"cluster report {fifo}: a FIFO that no process reads (writing would wait forever)"


def test_the_node_heatmap_into_a_fifo_with_a_reader_arrives_whole(tmp_path):
    fifo = tmp_path / "heatmap_nodes.png"
    os.mkfifo(fifo)
    with released(fifo), cat(fifo) as got:
        assert _heatmap(tmp_path) == fifo
    assert got and got[0].startswith(b"\x89PNG\r\n") and got[0].rstrip().endswith(b"IEND\xaeB`\x82")


def test_the_node_heatmap_on_dev_full_names_the_path(tmp_path):
    (tmp_path / "heatmap_nodes.png").symlink_to("/dev/full")
    with pytest.raises(UsageError) as info:
        _heatmap(tmp_path)
    assert str(info.value) == f"cluster report {tmp_path / 'heatmap_nodes.png'}: cannot write it: no space left on device"


def test_the_node_heatmap_is_still_written_to_a_plain_folder(tmp_path):
    assert _heatmap(tmp_path) == tmp_path / "heatmap_nodes.png"
    assert (tmp_path / "heatmap_nodes.png").read_bytes().startswith(b"\x89PNG\r\n")


def _traceback_saved(folder):
    from gputopo.cli.main import save_traceback

    def crash():
        try:
            raise RuntimeError("an internal error")
        except RuntimeError:
            return save_traceback(str(folder))

    return call_within(crash, 10, "saving the traceback waited on error.txt without bound (a hang)")


def test_an_error_txt_fifo_without_a_reader_is_passed_over_for_a_temporary_file(tmp_path):
    fifo = tmp_path / "error.txt"
    os.mkfifo(fifo)
    with released(fifo):
        where = _traceback_saved(tmp_path)
    assert where != str(fifo) and os.path.isfile(where)
    try:
        assert "RuntimeError: an internal error" in Path(where).read_text()
    finally:
        os.unlink(where)


def test_an_error_txt_fifo_whose_reader_stops_reading_is_bounded(tmp_path, monkeypatch):
    """A reader that opened error.txt and takes nothing: once the pipe's buffer is full the write
    would wait forever; it gives up after GPUTOPO_INPUT_WAIT and saves the temporary file."""
    monkeypatch.setenv(INPUT_WAIT_ENV, "0.3")
    fifo = tmp_path / "error.txt"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    os.set_blocking(fd, False)
    try:
        from gputopo.cli.main import save_traceback

        def crash():
            try:
                raise RuntimeError("x" * 300_000)  # more than a pipe's buffer
            except RuntimeError:
                return save_traceback(str(tmp_path))

        where = call_within(crash, 10, "saving the traceback waited on a stalled reader without bound (a hang)")
    finally:
        os.close(fd)
    assert where != str(fifo) and os.path.isfile(where)
    os.unlink(where)


def test_an_error_txt_in_a_plain_run_folder_is_written_there(tmp_path):
    where = _traceback_saved(tmp_path)
    assert where == str(tmp_path / "error.txt")
    assert "RuntimeError: an internal error" in (tmp_path / "error.txt").read_text()


# ----------------------------------------------------------------------------- run-folder files of a named folder


def test_a_fifo_where_a_rerender_puts_its_temporary_json_is_not_waited_on(tmp_path):
    """`report RUN` writes summary.json as summary.json.tmp, then renames it: a FIFO of that name
    in the folder the user names was opened and waited on forever. Now the leftover is removed
    and a new temporary file made."""
    from conftest_report import write_run
    from helpers.cli import gputopo_here

    run = write_run(tmp_path / "run", [])
    fifo = run / "summary.json.tmp"
    os.mkfifo(fifo)
    with released(fifo):
        rc, _, err = call_within(lambda: gputopo_here("report", run, "--no-plots", cwd=tmp_path, timeout=60), 60,
                                 "the re-render waited on summary.json.tmp without bound (a hang)")
    assert rc == 0, err
    assert not fifo.exists() and (run / "summary.json").read_text().startswith("{")


@pytest.mark.parametrize("name", ["events.jsonl", "measurements.jsonl", "numerics.jsonl", "numerics_losses.csv"])
def test_resume_refuses_a_fifo_among_the_files_it_appends_to(name, tmp_path):
    """`bench --resume RUN` with events.jsonl a FIFO was an internal error (its cut-line repair
    seeks the file); an append to a FIFO with no reader would wait forever."""
    from conftest_report import write_run
    from helpers.cli import gputopo_here

    run = write_run(tmp_path / "run", [])
    (run / name).unlink(missing_ok=True)
    os.mkfifo(run / name)
    with released(run / name):
        rc, _, err = gputopo_here("bench", "--sim", "seed-8gpu-healthy", "--resume", run, cwd=tmp_path, timeout=60)
    assert rc == 2, err
    assert err.strip() == (f"gputopo: error: --resume {run}: its {name} is a FIFO (named pipe), not a file a run "
                           "appends to; remove it and run again")
