"""Pipes as inputs (issue 37): `scan --from-smi <(ssh node nvidia-smi topo -m)`, a named FIFO, a
/dev/fd path. A pipe is read when its first byte comes within GPUTOPO_INPUT_WAIT seconds (30 by
default); one nobody writes is refused in one line after that bound, never waited on forever.

The writers here are threads of this process writing into a FIFO made under tmp_path, or the
write end of an os.pipe() read through /dev/fd/N (what a shell's process substitution hands over);
the texts written are the posted outputs of tests/fixtures/ (sources in its README). Only the
last test starts a shell (marked slow)."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import threading
import time
from pathlib import Path

import pytest

from gputopo.errors import InputFileError, UsageError
from gputopo.inputs import (INPUT_WAIT_ENV, input_wait_s, is_fifo, open_user_stream, read_user_bytes,
                            read_user_text, user_file_problem)
from helpers.cli import gputopo, gputopo_here
from helpers.paths import FIXTURES, REPO

SMI = FIXTURES / "topo" / "club3090-1125_2gpu_node_indented-wrapped-legend_plus-p2p-NS-no-cmdline.txt"


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


@pytest.fixture
def short_wait(monkeypatch):
    monkeypatch.setenv(INPUT_WAIT_ENV, "0.3")


def writer(path: Path, data: bytes, delay: float = 0.0, pause_after: int = 0, pause: float = 0.0,
           close_only: bool = False):
    """A thread that, once a reader has opened ``path``, waits ``delay`` s and writes ``data``
    (with a ``pause`` after its first ``pause_after`` bytes), then closes; it gives up after 10 s
    without a reader, and stops quietly when the reader goes away, so no test can hang on it."""
    pieces = [(b"", delay)]
    if not close_only:
        pieces += [(data[:pause_after], pause), (data[pause_after:], 0.0)]
    return stepwise_writer(path, pieces)


@contextlib.contextmanager
def stepwise_writer(path: Path, pieces, hold: threading.Event | None = None):
    """A thread that, once a reader has opened ``path``, writes each (bytes, pause after) of
    ``pieces``; then closes, or with ``hold`` keeps the pipe open (a writer that stalls) until
    ``hold`` is set. Gives up after 10 s without a reader and stops quietly when the reader goes
    away; never blocks a test for good."""
    done = threading.Event()

    def run():
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
                    break
                except OSError as e:  # ENXIO: no reader yet
                    if e.errno != errno.ENXIO or time.monotonic() > deadline:
                        return
                    time.sleep(0.005)
            try:
                os.set_blocking(fd, True)
                for data, pause in pieces:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view):]
                    time.sleep(pause)
                if hold is not None:
                    hold.wait(15)
            except BrokenPipeError:
                pass
            finally:
                os.close(fd)
        finally:
            done.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        yield
    finally:
        if hold is not None:
            hold.set()
        done.wait(15)


# ----------------------------------------------------------------------------- inputs.py itself


def test_a_fifo_with_a_writer_is_read_whole(fifo):
    data = SMI.read_bytes()
    with writer(fifo, data):
        assert read_user_bytes(fifo, "smi text") == data


def test_a_fifo_is_read_the_same_the_second_time_in_one_process(fifo):
    """A pipe gives its bytes once: a command that reads its input twice sees the same text."""
    with writer(fifo, b"name = 'x'\n"):
        assert read_user_text(fifo, "description") == "name = 'x'\n"
    assert read_user_text(fifo, "description") == "name = 'x'\n"
    with open_user_stream(fifo, "description") as f:
        assert f.read() == b"name = 'x'\n"


def test_a_writer_that_starts_late_within_the_bound_is_waited_for(fifo, monkeypatch):
    monkeypatch.setenv(INPUT_WAIT_ENV, "5")
    with writer(fifo, b"late but in time\n", delay=0.5):
        t0 = time.monotonic()
        assert read_user_bytes(fifo, "log") == b"late but in time\n"
        assert 0.4 < time.monotonic() - t0 < 5


def test_a_writer_whose_pauses_are_each_within_the_bound_is_read_whole(fifo, monkeypatch):
    """The bound is on each wait for a next byte, not on the whole read: a slow writer (three
    pauses of 0.25 s, 0.75 s in all, against a 0.5 s bound) is read to its end."""
    monkeypatch.setenv(INPUT_WAIT_ENV, "0.5")
    data = b"first line\nsecond line\nthird line\n"
    with stepwise_writer(fifo, [(data[:3], 0.25), (data[3:14], 0.25), (data[14:20], 0.25), (data[20:], 0)]):
        assert read_user_bytes(fifo, "log") == data
    fifo2 = fifo.with_name("pipe2")
    os.mkfifo(fifo2)
    with stepwise_writer(fifo2, [(data[:3], 0.25), (data[3:14], 0.25), (data[14:], 0)]):
        with open_user_stream(fifo2, "log") as f:
            assert f.read() == data


@pytest.mark.parametrize("reader", ["read_user_bytes", "open_user_stream", "import kernel-log"])
def test_a_writer_that_stalls_after_some_bytes_is_refused_naming_them(reader, fifo, short_wait, tmp_path):
    """A writer that sends some bytes and then neither writes nor closes (`ssh` hung after the
    first lines): the read waited forever. Now: no byte for GPUTOPO_INPUT_WAIT seconds after the
    last one is one line naming how many came and the variable; the partial input is never used."""
    head = b"[  123.456] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n"
    stop = threading.Event()
    with stepwise_writer(fifo, [(head, 0)], hold=stop):
        t0 = time.monotonic()
        try:
            if reader == "read_user_bytes":
                with pytest.raises(InputFileError) as info:
                    read_user_bytes(fifo, "log")
                msg = str(info.value)
            elif reader == "open_user_stream":
                with pytest.raises(InputFileError) as info:
                    with open_user_stream(fifo, "log") as f:
                        f.read()
                msg = str(info.value)
            else:
                rc, out, err = gputopo_here("import", "kernel-log", fifo, "--out", tmp_path / "o", "--no-history",
                                            cwd=tmp_path, timeout=30)
                assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
                assert not (tmp_path / "o").exists()  # nothing made of the partial log
                msg = err.strip().removeprefix("gputopo: error: ")
        finally:
            stop.set()
    assert time.monotonic() - t0 < 5
    assert msg == (f"{fifo}: cannot read the {'input' if reader == 'import kernel-log' else 'log'}: it is a pipe "
                   f"(FIFO) that gave {len(head)} bytes, then nothing more for 0.3 s without being closed; is the "
                   "command that writes it stuck? (set GPUTOPO_INPUT_WAIT=SECONDS to wait longer)")


def test_the_same_streamed_pipe_opened_again_is_refused_at_once(fifo, monkeypatch):
    """A streamed pipe's bytes are not kept: opening it again waited GPUTOPO_INPUT_WAIT seconds
    for a writer long gone, then blamed the writer. `import nccl-debug P P` is one such read."""
    monkeypatch.setenv(INPUT_WAIT_ENV, "5")
    with writer(fifo, b"NCCL INFO a line\n"):
        with open_user_stream(fifo, "log") as f:
            assert f.read() == b"NCCL INFO a line\n"
    t0 = time.monotonic()
    with pytest.raises(InputFileError, match="this pipe was read already by this command and a pipe gives its "
                                             "bytes once; give it once"):
        open_user_stream(fifo, "log")
    assert time.monotonic() - t0 < 1


def test_import_nccl_debug_with_the_same_pipe_twice_is_one_line_at_once(fifo, tmp_path, monkeypatch):
    monkeypatch.setenv(INPUT_WAIT_ENV, "5")
    log = FIXTURES / "nccl-debug" / "megatron-516_p4d_8gpu_p2p-ipc-read_busid_excerpt.log"
    with writer(fifo, log.read_bytes()):
        t0 = time.monotonic()
        rc, _, err = gputopo_here("import", "nccl-debug", fifo, fifo, "--json", cwd=tmp_path, timeout=30)
    assert time.monotonic() - t0 < 3
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "this pipe was read already" in err, err


@pytest.mark.serial  # a wall-time bound: run alone, after the parallel part
def test_a_fifo_nobody_writes_is_refused_after_the_bound(fifo, short_wait):
    t0 = time.monotonic()
    with pytest.raises(InputFileError) as info:
        read_user_bytes(fifo, "smi text")
    took = time.monotonic() - t0
    assert 0.25 < took < 3
    assert str(info.value) == (f"{fifo}: cannot read the smi text: it is a pipe (FIFO) and nothing came through "
                               "it in 0.3 s; is the command that writes it running? (set "
                               "GPUTOPO_INPUT_WAIT=SECONDS to wait longer)")
    with pytest.raises(InputFileError, match="nothing came through it in 0.3 s"):
        open_user_stream(fifo, "log")


def test_a_writer_that_opens_and_writes_nothing_gives_an_empty_input(fifo, short_wait):
    with writer(fifo, b"", close_only=True):
        assert read_user_bytes(fifo, "log") == b""


def test_a_fifo_larger_than_the_bound_is_refused(fifo):
    with writer(fifo, b"x" * 300_000):
        with pytest.raises(InputFileError, match="larger than 100000 bytes"):
            read_user_bytes(fifo, "smi text", max_bytes=100_000)


def test_run_folder_files_still_refuse_a_fifo_at_once(fifo):
    t0 = time.monotonic()
    with pytest.raises(InputFileError, match="is a FIFO"):
        read_user_text(fifo, "run.json", fifo_ok=False)
    assert time.monotonic() - t0 < 1
    assert user_file_problem(fifo) == "is a FIFO (named pipe), not a regular file"
    assert user_file_problem(fifo, fifo_ok=True) is None and is_fifo(fifo)


def test_a_dev_fd_pipe_as_process_substitution_hands_over_is_read(short_wait):
    """`<(command)` gives the reader /dev/fd/N, the read end of an anonymous pipe."""
    r, w = os.pipe()
    data = SMI.read_bytes()
    try:
        t = threading.Thread(target=lambda: (os.write(w, data), os.close(w)), daemon=True)
        t.start()
        path = f"/dev/fd/{r}"
        assert is_fifo(path)
        assert read_user_bytes(path, "smi text") == data
        t.join(5)
    finally:
        os.close(r)


def test_a_dev_fd_pipe_whose_writer_never_writes_is_bounded(short_wait):
    r, w = os.pipe()
    try:
        with pytest.raises(InputFileError, match="nothing came through it in 0.3 s"):
            read_user_bytes(f"/dev/fd/{r}", "smi text")
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.parametrize("value,want", [("", 30.0), ("0", 0.0), ("2.5", 2.5), (" 7 ", 7.0)])
def test_the_wait_bound_is_settable(value, want, monkeypatch):
    monkeypatch.setenv(INPUT_WAIT_ENV, value)
    assert input_wait_s() == want


@pytest.mark.parametrize("value", ["nan", "-1", "soon", "1e9", "inf"])
def test_a_wait_bound_that_is_no_number_of_seconds_is_refused(value, monkeypatch):
    monkeypatch.setenv(INPUT_WAIT_ENV, value)
    with pytest.raises(UsageError, match=re.escape(f"GPUTOPO_INPUT_WAIT={value!r}: expected the seconds")):
        input_wait_s()


# ----------------------------------------------------------------------------- every command that reads a text file


READERS = [  # (argv with {f} the input and {o} an output folder, the posted output written into the pipe)
    (("scan", "--from-smi", "{f}"), SMI),
    (("scan", "--from-smi", "{f}", "--format", "smi"), FIXTURES / "topo" / "rse-sheffield_dgx1_8xp100_nv1_soc_mlx5_mangled-header.txt"),
    # scan --sim loads the description twice (the scan, then its history record): the pipe is read once
    (("scan", "--sim", "{f}", "--json"), REPO / "gputopo" / "sim" / "machines" / "pcie-4gpu.toml"),
    (("scan", "--sim", "pcie-4gpu", "--kernel-log", "{f}", "--no-history"),
     FIXTURES / "xid" / "bumblebee-677_xid32_xid31.txt"),
    (("import", "nccl-tests", "{f}", "--out", "{o}", "--no-history"), FIXTURES / "nccl-tests" / "autodl_2x2080ti_all_reduce.txt"),
    (("import", "nvbandwidth", "{f}", "--out", "{o}", "--no-history"),
     FIXTURES / "nvbandwidth" / "nvbandwidth-50_6xa6000_d2d_read_ce_v0.8.txt"),
    (("import", "p2pbw", "{f}", "--out", "{o}", "--no-history"), FIXTURES / "p2pbw" / "stelline_asus-esc8000a_4xrtx6000ada.txt"),
    (("import", "kernel-log", "{f}", "--out", "{o}", "--no-history"), FIXTURES / "xid" / "bumblebee-677_xid32_xid31.txt"),
    (("import", "nccl-debug", "{f}", "--json"), FIXTURES / "nccl-debug" / "nccl-1609_h800_4rank_shm_rank-ne-dev_excerpt.log"),
    (("import", "nvbandwidth", "{f}", "--out", "{o}", "--no-history"),
     FIXTURES / "nvbandwidth" / "constructed_json_v0.8_2gpu_read_ce_h2d_waived.json"),
    (("import", "p2pbw", FIXTURES / "p2pbw" / "stelline_asus-esc8000a_4xrtx6000ada.txt", "--topo", "{f}", "--out", "{o}",
      "--no-history"), FIXTURES / "topo" / "stelline_asus-esc8000a_4xrtx6000ada_amd_nics.txt"),
]


@pytest.mark.parametrize("argv,source", READERS, ids=lambda x: " ".join(map(str, x[:3])) if isinstance(x, tuple) else "")
def test_every_reader_reads_a_pipe_as_it_reads_the_file(argv, source, tmp_path, monkeypatch):
    """The same command on the posted file and on a pipe carrying it: the same exit code and
    output (paths aside); nothing waits for a second read of the pipe (the bound is short)."""
    monkeypatch.setenv(INPUT_WAIT_ENV, "2")
    (tmp_path / "p").mkdir()
    (tmp_path / "f").mkdir()
    pipe = tmp_path / "p" / source.name  # the same name as the file: outputs name it
    os.mkfifo(pipe)
    copy = tmp_path / "f" / source.name
    copy.write_bytes(source.read_bytes())

    def run(f: Path, out: str):
        args = [str(a).replace("{f}", str(f)).replace("{o}", str(tmp_path / out)) for a in argv]
        return gputopo_here(*args, cwd=tmp_path, timeout=60, env={"GPUTOPO_HISTORY": str(tmp_path / "h.sqlite")})

    rc_file, out_file, err_file = run(copy, "from-file")
    with writer(pipe, source.read_bytes()):
        rc_pipe, out_pipe, err_pipe = run(pipe, "from-pipe")
    assert "nothing came through" not in err_pipe
    assert rc_pipe == rc_file, err_pipe
    norm = [s.replace(str(pipe), "F").replace(str(copy), "F").replace("from-pipe", "O").replace("from-file", "O")
            for s in (out_file, out_pipe, err_file, err_pipe)]
    norm = [re.sub(r"\b\d{8}-\d{6}\b|\d{4}-\d\d-\d\dT[\d:.]+(?:Z|[+-]\d\d:\d\d)?", "T", s) for s in norm]
    assert norm[1] == norm[0]
    assert norm[3] == norm[2]


def test_a_cluster_description_in_a_pipe_is_read(fifo, tmp_path, short_wait):
    with writer(fifo, (REPO / "examples" / "cluster-64.toml").read_bytes()):
        rc, out, err = gputopo_here("cluster", "--sim", fifo, "--out", tmp_path / "o", "--no-history",
                                    cwd=tmp_path, timeout=120)
    assert rc == 0, err
    assert "SIMULATED 64 nodes" in out and "SLOW-NODE (error): node node0037" in out


def test_the_same_pipe_given_twice_to_import_nccl_tests_is_refused(fifo, tmp_path, short_wait):
    rc, _, err = gputopo_here("import", "nccl-tests", fifo, fifo, "--out", tmp_path / "o", "--no-history",
                              cwd=tmp_path, timeout=30)
    assert rc == 2 and "is given twice (the same pipe" in err and len(err.strip().splitlines()) == 1


def test_dash_keeps_meaning_stdin(tmp_path):
    rc, out, err = gputopo_here("scan", "--from-smi", "-", "--format", "smi", input=SMI.read_text(), cwd=tmp_path)
    assert rc == 0 and out.startswith("\tGPU0\tGPU1"), err


@pytest.mark.slow
def test_process_substitution_from_a_shell(tmp_path):
    """What a user types: `gputopo scan --from-smi <(cat topo.txt)` in bash, and a writer that never
    writes bounded by GPUTOPO_INPUT_WAIT."""
    import shutil
    import subprocess

    from helpers.cli import cli_env

    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash here")
    cmd = f'"$PY" -m gputopo scan --from-smi <(cat "{SMI}") --format smi'
    env = cli_env({"PY": os.sys.executable, INPUT_WAIT_ENV: "5"})
    proc = subprocess.run([bash, "-c", cmd], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("\tGPU0\tGPU1"), proc.stderr
    direct = gputopo("scan", "--from-smi", SMI, "--format", "smi", cwd=tmp_path, timeout=60)
    assert proc.stdout == direct.stdout
    env[INPUT_WAIT_ENV] = "0.5"
    t0 = time.monotonic()
    proc = subprocess.run([bash, "-c", '"$PY" -m gputopo scan --from-smi <(exec 2>/dev/null; sleep 3)'], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert time.monotonic() - t0 < 15
    assert proc.returncode == 2 and "nothing came through it in 0.5 s" in proc.stderr, proc.stderr
