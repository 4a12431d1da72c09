"""Bad input and hostile environments as a user meets them (issue 18): files that are not files,
paths and names from user text, broken launch environments, output trouble, signals, no torch.
Every case runs the command with a timeout: one line on stderr, exit 2 (or 3), never rc 4, never a
hang. What only a process shows (stdout a closed pipe or /dev/full, a closed stdin, a signal, no
torch, a rank that waits for its peer) runs `python -m gputopo` (tests marked slow); the rest run
the command's entry point in this process (tests/helpers/cli.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from helpers.cli import gputopo, gputopo_here
from helpers.paths import REPO



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
    rc, _, err = gputopo_here(*argv, cwd=tmp_path, timeout=30)
    line = one_line_error(rc, err)
    assert "/dev/zero" in line and "not a regular file" in line


@pytest.mark.parametrize("i", range(7))
def test_a_fifo_with_no_writer_is_refused_after_the_wait_bound(i, fifo, tmp_path):
    """A pipe is read (tests/bad_input/test_input_pipes.py); one nobody writes is refused once
    GPUTOPO_INPUT_WAIT seconds pass without its first byte, never waited on forever."""
    import time

    argv = _user_file_commands(fifo)[i]
    t0 = time.monotonic()
    rc, _, err = gputopo_here(*argv, cwd=tmp_path, timeout=30, env={"GPUTOPO_INPUT_WAIT": "0.2"})
    line = one_line_error(rc, err)
    assert "pipe (FIFO) and nothing came through it in 0.2 s" in line and "GPUTOPO_INPUT_WAIT" in line
    assert time.monotonic() - t0 < 10


def test_a_measurements_file_that_is_a_device_is_refused(tmp_path):
    from conftest_report import write_run

    run = write_run(tmp_path / "run", [])
    (run / "measurements.jsonl").unlink()
    (run / "measurements.jsonl").symlink_to("/dev/zero")
    rc, _, err = gputopo_here("report", run, cwd=tmp_path, timeout=30)
    assert "measurements.jsonl" in one_line_error(rc, err)


@pytest.mark.slow
def test_closed_stdin_with_dash_says_so(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(f"{sys.executable} -m gputopo scan --from-smi - <&-", shell=True, cwd=tmp_path,
                          capture_output=True, text=True, timeout=30, env=env, check=False)
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
    rc, _, err = gputopo_here("scan", "--sim", tmp_path / "loop.toml", cwd=tmp_path, timeout=30)
    assert "symbolic links loop" in one_line_error(rc, err)


# ---------------------------------------------------------------- user text as names and numbers

def test_a_machine_name_with_slashes_never_becomes_a_path(tmp_path):
    (tmp_path / "evil.toml").write_text('name = "../../x/y"\nextends = "seed-8gpu"\n')
    rc, out, err = gputopo_here("scan", "--sim", tmp_path / "evil.toml", cwd=tmp_path, timeout=60)
    assert rc == 0 and "Traceback" not in err, err
    assert "'../../x/y'" in out  # shown as the user wrote it, used in no path


def test_a_machine_name_with_escapes_and_newlines_is_printed_escaped(tmp_path):
    (tmp_path / "ansi.toml").write_text('name = "a\\u001b[31mRED\\nline2"\nextends = "seed-8gpu"\n'
                                        '[defaults]\nname = "NVIDIA RTX A6000\\u001b[2J"\n')
    rc, out, err = gputopo_here("scan", "--sim", tmp_path / "ansi.toml", "--format", "table", cwd=tmp_path,
                                timeout=60)
    assert rc == 0, err
    assert "\x1b" not in out and "line2" not in out.split("RED", 1)[0]
    assert "a\\x1b[31mRED\\nline2" in out


@pytest.mark.parametrize("argv", [("bench", "--sim", "seed-8gpu", "--pairs", "0,{big}"),
                                  ("bench", "--sim", "seed-8gpu", "--gpus", "1-{big}"),
                                  ("bench", "--sim", "seed-8gpu", "--sizes", "{big}M"),
                                  ("place", "{big}", "--sim", "seed-8gpu"),
                                  ("place", "2", "--exclude", "{big}", "--sim", "seed-8gpu")])
def test_a_100000_digit_number_is_one_short_line(argv, tmp_path):
    big = "9" * 100_000
    rc, _, err = gputopo_here(*[a.replace("{big}", big) for a in argv], cwd=tmp_path, timeout=60)
    line = one_line_error(rc, err)
    assert len(line) < 400 and "100,0" in line


@pytest.mark.parametrize("argv", [("bench", "--sim", "seed-8gpu", "--quick", "--out", "loop"),
                                  ("bench", "--sim", "seed-8gpu", "--quick", "--out", "loop/x"),
                                  ("import", "nccl-tests", "--out", "loop",
                                   REPO / "tests/fixtures/nccl-tests/autodl_2x2080ti_all_reduce.txt")])
def test_an_out_symlink_loop_is_one_line(argv, tmp_path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    rc, _, err = gputopo_here(*argv, cwd=tmp_path, timeout=60)
    assert "symbolic links loop" in one_line_error(rc, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loop"]


def test_hundreds_of_gpus_behind_one_host_bridge_build_a_machine(tmp_path):
    """130 GPUs on one PXB tree need more bridge buses than one PCI domain has (was: "PCI domain
    0000 has no free bus numbers", rc 4); the tree spills into fresh domains and keeps its shape."""
    lines = ['name = "pxb130"', "[defaults]", 'name = "NVIDIA RTX A6000"', "[pairs]", 'default = "PXB"']
    lines += ["[[gpu]]\nnuma_node = 0"] * 130
    (tmp_path / "pxb.toml").write_text("\n".join(lines) + "\n")
    rc, out, err = gputopo_here("scan", "--sim", tmp_path / "pxb.toml", "--csv", cwd=tmp_path, timeout=120)
    assert rc == 0, err
    rows = [r for r in out.splitlines()[1:] if r.strip()]
    assert len(rows) == 130 * 129 // 2 and all(",PXB," in r for r in rows)


# ---------------------------------------------------------------- sizes that would run for minutes

def test_place_on_a_1024_gpu_machine_is_refused_at_once(tmp_path):
    rc, _, err = gputopo_here("place", "4", "--sim", "synthetic-1024gpu", cwd=tmp_path, timeout=20)
    assert "1,024 GPUs" in one_line_error(rc, err)


def test_pairwise_plan_at_the_largest_node_count_is_instant(tmp_path):
    rc, out, err = gputopo_here("cluster", "--plan", "--nodes", "1000000", "--pattern", "pairwise", "--json",
                                cwd=tmp_path, timeout=20)
    assert rc == 0, err
    import json

    assert json.loads(out)["rounds"] == 999_999


# ---------------------------------------------------------------- broken launch environments

_BASE = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29617"}


@pytest.mark.parametrize("env,named", [
    ({"RANK": "0", "WORLD_SIZE": "0", **_BASE}, "WORLD_SIZE=0"),
    ({"RANK": "3", "WORLD_SIZE": "2", **_BASE}, "RANK=3"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "99999"}, "MASTER_PORT=99999"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "x", **_BASE}, "LOCAL_RANK"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_JOB_NODELIST": "a[b"},
     "SLURM_JOB_NODELIST"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_JOB_NODELIST": ",,"},
     "SLURM_JOB_NODELIST"),
])
def test_a_broken_launch_environment_is_one_line(env, named, tmp_path):
    clean = {k: None for k in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "MASTER_ADDR", "MASTER_PORT")}
    rc, _, err = gputopo_here("cluster", "--fabric", "cpu", "--timeout", "3", cwd=tmp_path,
                              env={**clean, **env}, timeout=60)
    assert named in one_line_error(rc, err)
    assert not (tmp_path / "reports").exists()


@pytest.mark.slow
def test_one_rank_of_two_alone_names_the_rendezvous_within_the_timeout(tmp_path):
    pytest.importorskip("torch")
    import time

    t0 = time.monotonic()
    rc, _, err = gputopo("cluster", "--fabric", "cpu", "--timeout", "3", cwd=tmp_path, timeout=90,
                         env={"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29618"})
    assert "rendezvous 127.0.0.1:29618" in one_line_error(rc, err)
    assert time.monotonic() - t0 < 60


# ---------------------------------------------------------------- output trouble

def _shell(cmd, tmp_path, env=None):
    full = dict(os.environ, PYTHONPATH=str(REPO), **(env or {}))
    return subprocess.run(["bash", "-c", cmd], cwd=tmp_path, capture_output=True, text=True, timeout=60, env=full, check=False)


@pytest.mark.slow
def test_a_full_disk_on_stdout_is_one_line(tmp_path):
    proc = _shell(f"{sys.executable} -m gputopo scan --sim seed-8gpu > /dev/full", tmp_path)
    assert "No space left on device" in one_line_error(proc.returncode, proc.stderr)


@pytest.mark.parametrize("cmd", ["scan --sim synthetic-64gpu", "scan --sim synthetic-64gpu --csv", "sims"])
@pytest.mark.slow
def test_a_closed_pipe_ends_quietly_with_141(cmd, tmp_path):
    # the reader is gone before gputopo writes: every write fails with EPIPE (rich's table,
    # click.echo and the interpreter's last flush each answered it differently: exit 1 or 0)
    proc = _shell(f"{sys.executable} -m gputopo {cmd} | (exec 0<&-; sleep 0); "
                  "echo ${PIPESTATUS[0]}", tmp_path)
    assert proc.stdout.strip().splitlines()[-1] == "141" and proc.stderr == ""


@pytest.mark.slow
def test_ascii_stdout_no_color_and_a_bogus_mplbackend_degrade(tmp_path):
    proc = _shell(f"{sys.executable} -m gputopo scan --sim seed-8gpu", tmp_path, {"PYTHONIOENCODING": "ascii"})
    assert proc.returncode == 0 and proc.stderr == "" and "GPU0" in proc.stdout
    proc = _shell(f"script -qc '{sys.executable} -m gputopo scan --sim seed-8gpu' /dev/null", tmp_path,
                  {"NO_COLOR": "1"})
    if proc.returncode == 0 and "GPU0" in proc.stdout:  # `script` (a terminal) is there
        assert "\x1b[3" not in proc.stdout and "\x1b[1" not in proc.stdout
    from conftest_report import write_run

    run = write_run(tmp_path / "run", [])
    rc, _, err = gputopo("report", run, cwd=tmp_path, env={"MPLBACKEND": "bogus"}, timeout=120)
    assert rc == 0, err
    assert list(run.glob("*.png"))


# ---------------------------------------------------------------- signals and missing torch

@pytest.mark.slow
def test_sigterm_stops_a_background_bench_like_ctrl_c(tmp_path):
    pytest.importorskip("torch")
    script = (f"{sys.executable} -m gputopo bench --sim seed-8gpu --quick --out run >out.txt 2>err.txt &\n"
              "pid=$!\nfor i in $(seq 1 240); do [ -s run/measurements.jsonl ] && break; sleep 0.5; done\n"
              "kill -TERM $pid\nwait $pid\necho $?\n")
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), check=False)
    assert proc.stdout.strip() == "130", (proc.stdout, (tmp_path / "err.txt").read_text())
    import json

    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "interrupted"
    assert (tmp_path / "run" / "measurements.jsonl").read_text().strip()


_NO_TORCH = '''import sys
class _NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, _NoTorch())
'''


@pytest.mark.parametrize("argv", [("bench", "--sim", "seed-8gpu", "--quick", "--pairs", "0,1"),
                                  ("numerics", "--sim", "seed-8gpu", "--pairs", "0,1"),
                                  ("bench", "--fabric", "cpu", "--quick"),
                                  ("check", "--sim", "seed-8gpu", "--spec", "pcie-box", "--quick"),
                                  ("cluster", "--fabric", "cpu")])
@pytest.mark.slow
def test_without_torch_says_how_to_install_it_and_writes_nothing(argv, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_NO_TORCH)
    work = tmp_path / "work"
    work.mkdir()
    env = {"PYTHONPATH": os.pathsep.join([str(REPO), str(site)]), "RANK": "0", "WORLD_SIZE": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29619"}
    rc, _, err = gputopo(*argv, cwd=work, env=env, timeout=60)
    assert "pip install torch==2.13.0" in one_line_error(rc, err, code=3)
    assert list(work.iterdir()) == []


def test_junit_into_a_fifo_nobody_reads_is_refused_not_waited_on(fifo, tmp_path):
    from conftest_report import write_run

    run = write_run(tmp_path / "run", [])
    rc, _, err = gputopo_here("check", run, "--spec", "pcie-box", "--junit", fifo, cwd=tmp_path, timeout=60)
    assert "no process reads" in one_line_error(rc, err)


def test_an_error_naming_a_path_with_a_newline_or_escape_stays_one_line(tmp_path):
    rc, _, err = gputopo_here("scan", "--sim", "a\nb\x1b[31m.toml", cwd=tmp_path, timeout=60)
    line = one_line_error(rc, err)
    assert "a\\nb\\x1b[31m.toml" in line and "\x1b" not in err


def test_dash_is_stdin_only_where_the_option_says_so(tmp_path):
    rc, _, err = gputopo_here("import", "nccl-tests", "-", cwd=tmp_path, timeout=30)
    assert "-: cannot read the nccl-tests log: no such file" in one_line_error(rc, err)


@pytest.mark.slow
def test_a_full_disk_on_stdout_says_the_output_could_not_be_written(tmp_path):
    """It said "while writing a file", naming no file: it was the output (the README's words)."""
    proc = _shell(f"{sys.executable} -m gputopo sims > /dev/full", tmp_path)
    assert one_line_error(proc.returncode, proc.stderr) == (
        "gputopo: error: cannot write the output (disk full: No space left on device); free space and run it again")
