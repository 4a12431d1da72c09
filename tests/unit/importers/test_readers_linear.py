"""Every reader of user text does work that grows with its input's size, not its square (issue
44): a 22 MB nccl-tests log of 200,000 rows was still being read after minutes, because every
cell asked the log's ``validated``, which walks every row again.

The guard counts work, not seconds: the lines of Python run (each iteration of a comprehension
included) while reading the inputs benchmarks/reader_scale.py generates (the same readers, the
same inputs), at N lines and at 10N lines. Linear work runs at most 10x the lines (less, with
fixed costs); work that grows with the square ~100x. Counting is exact on any machine, however
loaded. (Work done inside C, a regex or a sort, is not counted.)
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile

import pytest

from helpers.paths import REPO

_spec = importlib.util.spec_from_file_location("reader_scale", REPO / "benchmarks" / "reader_scale.py")
assert _spec is not None and _spec.loader is not None
reader_scale = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reader_scale)

#: Lines of the small input; the large has ten times as many.
SMALL = 300
#: The most work 10x the input may take: linear is <= 10x (6-10x seen, fixed costs included);
#: 12x leaves room for a reader whose per-line work differs with where in its repeated fixture
#: the input ends. A square term too small to show at 3,000 lines (nvbandwidth's check of every
#: testcase against every matrix once was) shows in benchmarks/reader_scale.py at 200,000.
MOST = 12.0


def _calls(make, read, suffix, n: int) -> int:
    """Lines of Python run (trace events: calls, lines, returns) while ``read`` reads a generated
    input of ``n`` lines."""
    count = 0

    def counter(frame, event, arg):  # every line of Python run (a comprehension's too)
        nonlocal count
        count += 1
        return counter

    with tempfile.TemporaryDirectory() as tmp:
        if make is None:
            path = reader_scale.run_folder_input(n, tmp)
        else:
            path = f"{tmp}/input{suffix}"
            with open(path, "w") as f:
                f.write(make(n))
        sys.settrace(counter)
        try:
            read(path, tempfile.mkdtemp(dir=tmp))
        except Exception:  # a refusal is read work too (the benchmark prints it)
            pass
        finally:
            sys.settrace(None)
    return count


READERS = {name: (make, read, suffix) for name, _, make, read, suffix in reader_scale.all_readers()}


@pytest.mark.parametrize("name", sorted(READERS))
def test_ten_times_the_input_is_at_most_about_ten_times_the_work(name):
    make, read, suffix = READERS[name]
    _calls(make, read, suffix, SMALL)  # the first read imports modules: not the reader's work
    small = _calls(make, read, suffix, SMALL)
    large = _calls(make, read, suffix, SMALL * 10)
    assert small > 0
    assert large / small <= MOST, f"{name}: {small} lines run for {SMALL} lines, {large} for {SMALL * 10}"


def test_the_count_sees_work_that_grows_with_the_square():
    """The guard can fail: a reader that walks every line again per line, in a comprehension
    (as nvbandwidth's did once per testcase run)."""

    def quadratic(path, tmp):
        lines = open(path).read().splitlines()
        seen = [line for line in lines if line in {x for x in lines}]
        assert len(seen) == len(lines)

    make = reader_scale.nccl_tests_rows
    small = _calls(make, quadratic, ".txt", 100)
    large = _calls(make, quadratic, ".txt", 1000)
    assert large / small > MOST
