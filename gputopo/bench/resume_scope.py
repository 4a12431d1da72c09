"""What a `--resume` continues: only a bench run, with the tests it was started with, by one
writer at a time, after its cut last lines are cleared.

- An import of nccl-tests output or a cluster run has no bench steps: resuming one is a usage
  error ("not a bench run", exit 2), not a search for a GPU driver.
- A resume runs the tests the run was started with (run.json's options and argv), never the
  command line's defaults: resuming a finished `--tests p2p` run must not add numerics.
- One writer per run folder: two resumes of one folder at once would append the same steps
  twice. The lock is ``fcntl.flock`` on ``.gputopo.lock`` in the folder, held while the job
  writes; the second resume says so in one line and exits 2. The lock is re-entrant within
  one process (the bench phase and the numerics phase of one job).
- A worker killed while appending leaves the last JSON-lines line cut. Appending after it
  would glue the next record onto the cut one and lose both; the cut bytes are cleared before a
  resume appends, so the step they belonged to is redone (its measurement is missing), never
  dropped.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

from gputopo.errors import UsageError

#: The lock file a writing job holds in its run folder.
LOCK_FILE = ".gputopo.lock"
#: The JSON-lines files a resume appends to.
APPENDED = ("measurements.jsonl", "events.jsonl", "numerics.jsonl")

_HELD: Dict[str, List[Any]] = {}  # real path -> [fd, depth]


def refuse_non_bench(run_dir, info: Dict[str, Any]) -> None:
    """UsageError unless ``info`` (run.json) is a bench run's: an import or a cluster run has
    nothing a resume could continue."""
    options = info.get("options") or {}
    kind = ("an import of nccl-tests output" if info.get("source") == "nccl-tests"
            or "imported_from" in options else
            "a cluster run" if info.get("kind") == "cluster" else None)
    if kind:
        raise UsageError(f"--resume {run_dir}: not a bench run ({kind}); nothing to resume")


def resumed_tests(info: Dict[str, Any]) -> Tuple[Tuple[str, ...], bool]:
    """(bench test groups, numerics wanted?) the run was started with: the groups from
    run.json's options, numerics from its recorded numerics options when present, else from
    the command it was started with (argv: `numerics`, `check`, or `bench --tests ...`)."""
    groups = tuple((info.get("options") or {}).get("tests") or ())
    if "numerics_options" in info:
        return groups, info["numerics_options"] is not None
    argv = [str(a) for a in info.get("argv") or []]
    command = argv[0] if argv else "bench"
    if command == "numerics":
        return groups, True
    if command == "check":
        return groups, True
    tests_text = None
    for k, a in enumerate(argv):
        if a == "--tests" and k + 1 < len(argv):
            tests_text = argv[k + 1]
        elif a.startswith("--tests="):
            tests_text = a.split("=", 1)[1]
    if not tests_text or tests_text.strip().lower() == "all":
        return groups, True
    return groups, "numerics" in [t.strip().lower() for t in tests_text.split(",")]


#: Seconds a lock held elsewhere is waited for before another writer is named. Why: a flock
#: belongs to the open file, and a process this one starts (the multiprocessing forkserver, from
#: a thread, while a phase holds the lock) shares it until it closes its inherited descriptors
#: at exec, milliseconds later; the next phase's lock in that window was refused as "another
#: gputopo" (seen once in the tests). A real other writer holds it for the whole run.
LOCK_GRACE_S = 2.0


@contextlib.contextmanager
def run_folder_lock(run_dir) -> Iterator[None]:
    """Hold the run folder's write lock (UsageError, one line, when another process holds it)."""
    import fcntl

    key = os.path.realpath(run_dir)
    held = _HELD.get(key)
    if held is not None:
        held[1] += 1
        try:
            yield
        finally:
            held[1] -= 1
        return
    fd = os.open(os.path.join(key, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + LOCK_GRACE_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if time.monotonic() < deadline:  # maybe our own lock, still shared with a child
                time.sleep(0.02)             # this process is starting (see LOCK_GRACE_S)
                continue
            os.close(fd)
            raise UsageError(f"{run_dir}: another gputopo is writing this run folder (it holds "
                             f"{LOCK_FILE}); wait for it to finish, then run this again") from None
        except OSError:  # a filesystem without flock (ENOLCK on some NFS): go on unlocked
            pass
        break
    _HELD[key] = [fd, 1]
    try:
        yield
    finally:
        del _HELD[key]
        os.close(fd)  # closing the descriptor releases the flock


def clear_cut_lines(run_dir) -> List[str]:
    """Truncate each appended file after its last complete line (a line cut by a kill: it
    does not parse, and appending after it would glue the next record onto it). Returns one
    note per file cleared."""
    notes = []
    for name in APPENDED:
        path = Path(run_dir) / name
        try:
            with open(path, "rb+") as f:
                size = f.seek(0, os.SEEK_END)
                if size == 0:
                    continue
                f.seek(max(0, size - 65536))
                tail = f.read()
                if tail.endswith(b"\n"):
                    continue
                cut = tail.rfind(b"\n")
                keep = size - len(tail) + cut + 1 if cut >= 0 else (0 if size <= 65536 else None)
                if keep is None:  # one line longer than 64 KiB: leave it to the readers
                    continue
                f.truncate(keep)
                notes.append(f"{name}: cleared a cut last line ({size - keep} bytes); its step is redone")
        except FileNotFoundError:
            continue
    return notes
