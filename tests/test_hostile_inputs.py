"""Bad input and hostile environments as a user meets them (issue 18): files that are not files,
paths and names from user text, broken launch environments, output trouble, signals, no torch.
Every case runs the CLI (`python -m gputopo`) in a subprocess with a timeout: one line on stderr,
exit 2 (or 3), never rc 4, never a hang."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_cli(*args, cwd=None, env=None, stdin=subprocess.DEVNULL, timeout=60):
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), full_env.get("PYTHONPATH")) if p)
    full_env.update(env or {})
    proc = subprocess.run([sys.executable, "-m", "gputopo", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd or REPO, env=full_env, stdin=stdin)
    return proc.returncode, proc.stdout, proc.stderr


def one_line_error(rc, err, code=2):
    assert rc == code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gputopo: error: "), err
    assert "Traceback" not in err and "internal error" not in err
    return lines[0]


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


def _user_file_commands(bad):
    return [("scan", "--sim", bad), ("scan", "--from-smi", bad), ("check", ".", "--spec", bad),
            ("import", "nccl-tests", bad), ("import", "nccl-debug", bad), ("cluster", "--sim", bad),
            ("import", "nccl-tests", "--topo", bad, REPO / "tests" / "fixtures" / "README.md")]


@pytest.mark.parametrize("argv", _user_file_commands("/dev/zero"), ids=lambda a: " ".join(map(str, a[:2])))
def test_dev_zero_as_any_input_file_is_refused_in_one_line(argv, tmp_path):
    rc, _, err = run_cli(*argv, cwd=tmp_path, timeout=30)
    line = one_line_error(rc, err)
    assert "/dev/zero" in line and "not a regular file" in line


@pytest.mark.parametrize("i", range(7))
def test_a_fifo_with_no_writer_is_refused_not_waited_on(i, fifo, tmp_path):
    argv = _user_file_commands(fifo)[i]
    rc, _, err = run_cli(*argv, cwd=tmp_path, timeout=30)
    assert "FIFO" in one_line_error(rc, err)


def test_a_measurements_file_that_is_a_device_is_refused(tmp_path):
    from conftest_report import write_run

    run = write_run(tmp_path / "run", [])
    (run / "measurements.jsonl").unlink()
    (run / "measurements.jsonl").symlink_to("/dev/zero")
    rc, _, err = run_cli("report", run, cwd=tmp_path, timeout=30)
    assert "measurements.jsonl" in one_line_error(rc, err)


def test_closed_stdin_with_dash_says_so(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(f"{sys.executable} -m gputopo scan --from-smi - <&-", shell=True, cwd=tmp_path,
                          capture_output=True, text=True, timeout=30, env=env)
    assert "stdin is closed" in one_line_error(proc.returncode, proc.stderr)


def test_an_oversized_file_is_refused_by_size_before_reading(tmp_path):
    from gputopo.errors import InputFileError
    from gputopo.inputs import read_user_text

    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * 2000)
    with pytest.raises(InputFileError, match="larger than 1000 bytes"):
        read_user_text(big, "description", 1000)
    assert read_user_text(big, "description", 2000) == "#" * 2000


def test_a_symlink_loop_as_a_description_is_one_line(tmp_path):
    (tmp_path / "loop.toml").symlink_to(tmp_path / "loop.toml")
    rc, _, err = run_cli("scan", "--sim", tmp_path / "loop.toml", cwd=tmp_path, timeout=30)
    assert "symbolic links loop" in one_line_error(rc, err)
