"""--junit into a FIFO: its reader may be gone by the time the verdict is written (check looked
before measuring). Writing then is one refusal, never an open() that waits forever."""

from __future__ import annotations

import os

import pytest

from gputopo.errors import UsageError
from gputopo.writable import write_text_file
from helpers.threads import call_within


def _bounded(fn, seconds=5.0):
    return call_within(fn, seconds, "writing into a FIFO without a reader waited (a hang)")


def test_fifo_without_reader_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "gate.xml"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="a FIFO that no process reads"):
        _bounded(lambda: write_text_file(fifo, "<testsuites/>", "--junit"))


def test_fifo_with_reader_gets_the_text(tmp_path):
    fifo = tmp_path / "gate.xml"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader, as `xmllint <(...)` would be
    try:
        _bounded(lambda: write_text_file(fifo, "<testsuites/>", "--junit"))
        assert os.read(fd, 100) == b"<testsuites/>"
    finally:
        os.close(fd)


def test_plain_file_is_written(tmp_path):
    write_text_file(tmp_path / "gate.xml", "<testsuites/>", "--junit")
    assert (tmp_path / "gate.xml").read_text() == "<testsuites/>"
