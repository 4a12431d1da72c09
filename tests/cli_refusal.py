"""The one assertion every bad-input test makes: `gputopo ARGV`, run in-process, ends in exactly
one stderr line, no traceback, and the exit code asked for (2 by default)."""

from __future__ import annotations

import pytest

from gputopo.cli.main import main


def refused(capsys, *argv, code=2) -> str:
    """Run `gputopo ARGV` in-process; assert exit ``code`` and exactly one stderr line (no
    traceback); return that line."""
    with pytest.raises(SystemExit) as exit_info:
        main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert exit_info.value.code == code, (argv, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err + out
    return lines[0]
