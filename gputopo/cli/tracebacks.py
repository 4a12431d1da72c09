"""Where an internal error's traceback is kept: one function, for the entry point (cli/main.py)
and for a command that answers in its own terms (`gputopo health`'s dialects)."""

from __future__ import annotations

import os
import tempfile
import traceback

from gputopo.errors import GputopoError


def save_traceback(folder: str | None = None) -> str:
    """Write the current exception's traceback to a file and return its path: the run folder's
    error.txt, else a temporary file; never raises (the disk may be what failed): then it
    returns why nothing was saved. Written as every output file is (writable.write_file_bytes):
    an error.txt that is a FIFO without a reader (or with one that stopped reading, bounded by
    GPUTOPO_INPUT_WAIT), a folder or /dev/full is passed over for the temporary file, never
    waited on."""
    from gputopo.runfolder.layout import ERROR_TXT
    from gputopo.writable import write_file_bytes

    data = traceback.format_exc().encode("utf-8", "replace")
    for where in ([os.path.join(folder, ERROR_TXT)] if folder and os.path.isdir(folder) else []) + [None]:
        try:
            if where is None:
                fd, where = tempfile.mkstemp(prefix="gputopo-error-", suffix=".txt")
                os.close(fd)
            write_file_bytes(where, data, "error report")
            return where
        except (OSError, GputopoError):
            continue
    return "nowhere: the disk refused the file too"


def could_not_run_words(e: BaseException, json_words: bool = False) -> "tuple[str, int]":
    """What a fleet check (health, gate) says of an exception that kept it from a verdict, and
    its own exit code: a gputopo error's message and code, ``interrupted`` (130), else an internal
    error (4) whose traceback is saved (its file named). ``json_words``: the words of the JSON
    document only (the error itself is re-raised and said by the CLI): no traceback saved."""
    from gputopo.errors import GputopoError

    if isinstance(e, GputopoError):
        return str(e), e.exit_code
    if isinstance(e, KeyboardInterrupt):
        return "interrupted", 130
    if json_words:
        return f"internal error: {type(e).__name__}: {e}", 4
    return f"internal error: {type(e).__name__}: {e} (traceback in {save_traceback()})", 4
