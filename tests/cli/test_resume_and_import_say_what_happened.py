"""Issue 18, "What a person sees", as a user runs it: `bench --resume DIR` first says which
run it continues and how far it got; `--concurrent` on a simulated machine is refused in one
line (exit 2) rather than silently ignored."""

from __future__ import annotations


import pytest

from helpers.cli import gputopo, gputopo_here
from helpers.paths import REPO



@pytest.mark.slow
def test_resume_says_first_which_run_it_continues_and_how_far_it_got(tmp_path):
    run = tmp_path / "run"
    first = gputopo("bench", "--sim", "pcie-4gpu", "--quick", "--pairs", "0,1", "--tests", "p2p",
                    "--out", run, "--json", cwd=tmp_path, timeout=240)
    assert first.returncode == 0, first.stderr
    ms = run / "measurements.jsonl"
    lines = ms.read_text(encoding="utf-8").splitlines(keepends=True)
    total, lost = len(lines), 3
    assert total > lost
    ms.write_text("".join(lines[:-lost]), encoding="utf-8")  # as if the last ones were never taken

    proc = gputopo("bench", "--resume", run, "--json", cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr
    said = proc.stderr.splitlines()
    assert said, "--resume said nothing about what it continues"
    assert said[0] == (f"resuming {run}: bench on pcie-4gpu (SIMULATED), {total - lost} of {total} "
                       f"measurements done, {lost} to go; tests p2p"), said[0]
    assert len(ms.read_text(encoding="utf-8").splitlines()) == total  # and it did what it said


def test_concurrent_on_a_simulated_machine_is_refused_in_one_line(tmp_path):
    proc = gputopo_here("bench", "--sim", "pcie-4gpu", "--quick", "--pairs", "0,1", "--tests", "p2p",
                        "--concurrent", "--out", tmp_path / "run", cwd=tmp_path)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--concurrent" in lines[0] and "sim" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists()  # nothing started


# --- `import nccl-tests`: a log has no topology ------------------------------------------------

NCCL_DATA = REPO / "tests" / "data" / "nccl_tests"
NCCL_FIXTURES = REPO / "tests" / "fixtures" / "nccl-tests"


def test_import_of_a_log_with_wrong_elements_headlines_them_not_also_or_a_question_mark(tmp_path):
    """It headlined "PROBLEM Also: GPUs 0,1; nccl-tests broadcast." (an "Also" with nothing
    before it, and the pair's finding cut to its GPUs) with the likely cause "collectives PCIe (?)
    return wrong results"."""
    proc = gputopo_here("import", "nccl-tests", NCCL_DATA / "h200_broadcast_mpi.log", "--out", tmp_path / "run",
                        cwd=tmp_path)
    assert "Traceback" not in proc.stderr, proc.stderr
    md = (tmp_path / "run" / "report.md").read_text(encoding="utf-8")
    for text in (proc.stdout, md):
        assert "Also:" not in text and "(?)" not in text, text
        assert "1024 wrong element(s) in collective.broadcast" in text
        assert "3 out-of-bounds value(s)" in text
        assert "pass --topo FILE" in " ".join(text.split())  # (the terminal may fold the line)
    first = next(line for line in md.splitlines() if line.startswith("- "))
    assert first.startswith("- **Problem:** GPUs 0,1: 1024 wrong element(s)"), first


def test_import_of_a_clean_log_does_not_call_an_unknown_class_fine(tmp_path):
    proc = gputopo_here("import", "nccl-tests", NCCL_FIXTURES / "autodl_2x2080ti_all_reduce.txt",
                        "--out", tmp_path / "run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert "Every link class is fine: unknown" not in out
    assert "verdict: not-judged" in out and "none judged: link class unknown" in out  # not called ok either
    md = " ".join((tmp_path / "run" / "report.md").read_text().split())
    assert "Note: Measured, not judged (nothing to compare the figures with): no problem found on 1 pair of " \
           "unknown link class (no topology: pass --topo FILE)" in md


def test_resume_line_of_a_numerics_only_run_counts_no_bench_measurements():
    """`numerics --resume DIR` has no bench steps: its first line names the run and the numerics
    (the numerics phase then counts its pairs), not "0 of 0 measurements"."""
    from gputopo.runfolder.resume import resume_line

    line = resume_line("run", "pcie-4gpu", "sim", True, (), (), 0, 0)
    assert line == "resuming run: numerics on pcie-4gpu (SIMULATED)"
    line = resume_line("run", "box", "cuda", False, ("p2p",), (), 10, 0)
    assert line == "resuming run: bench on box (fabric cuda), 10 of 10 measurements done, nothing to go; tests p2p"
