"""Bad input of every kind ends in one line `gputopo: error: ...` and exit 2, never a traceback,
an internal error (exit 4) or a silent default: click's own checks, repeated, conflicting,
ignored and empty options, NaN/inf, read-only folders, and broken run folders."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from helpers.cli import refused
from gputopo.cli.main import main
from helpers.paths import DATA




# ----------------------------------------------------------------------------- click's checks

@pytest.mark.parametrize("argv, names", [
    (["bench", "--timeout", "abc"], ["--timeout", "abc"]),
    (["bench", "--cpu-gpus", "0"], ["--cpu-gpus"]),
    (["scan", "--format", "bogus"], ["--format", "bogus"]),
    (["bench", "--fabric", "gpu"], ["--fabric", "gpu"]),
    (["check", "--margin", "2"], ["--margin"]),
    (["diff", "only-one"], ["DIR_B"]),
    (["report"], ["RUN_DIR"]),
    (["bench", "--no-such-option"], ["--no-such-option"]),
    (["no-such-command"], ["no-such-command"]),
    (["import", "nccl-tests"], ["LOGS"]),
])
def test_click_usage_errors_are_one_line(argv, names):
    line = refused(*argv)
    assert line.startswith("gputopo: error: ")
    assert "Usage:" not in line and "Try " not in line
    for name in names:
        assert name in line


def test_out_that_is_a_file_is_one_line(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    line = refused("bench", "--sim", "pcie-4gpu", "--out", f)
    assert str(f) in line


def test_help_is_unchanged(capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", "--help"])
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith("Usage: gputopo bench")


# ----------------------------------------------------------------------------- NaN / inf / huge

@pytest.mark.parametrize("argv, name", [
    (["bench", "--sim", "pcie-4gpu", "--timeout", "nan"], "--timeout"),
    (["bench", "--sim", "pcie-4gpu", "--timeout", "inf"], "--timeout"),
    (["numerics", "--sim", "pcie-4gpu", "--timeout", "-inf"], "--timeout"),
    (["diff", "a", "b", "--threshold", "nan"], "--threshold"),
    (["check", "--spec", "pcie-box", "--init", "--from", ".", "--margin", "nan"], "--margin"),
    (["numerics", "--sim", "pcie-4gpu", "--seed", "99999999999999999999999"], "--seed"),
    (["numerics", "--sim", "pcie-4gpu", "--seed", "-1"], "--seed"),
    (["bench", "--sim", "pcie-4gpu", "--timeout", "1e300"], "--timeout"),
    (["bench", "--sim", "pcie-4gpu", "--gpus", "-1"], "--gpus -1: a GPU index is missing"),
    (["bench", "--sim", "pcie-4gpu", "--sizes", "-1M"], "--sizes"),
    (["numerics", "--sim", "pcie-4gpu", "--lr", "nan"], "--lr"),
])
def test_non_finite_and_huge_numbers_are_refused(argv, name):
    assert name in refused(*argv)


# ----------------------------------------------------------------------------- empty values

@pytest.mark.parametrize("argv, name", [
    (["bench", "--sim", "pcie-4gpu", "--gpus", ""], "--gpus"),
    (["bench", "--sim", "pcie-4gpu", "--class", ""], "--class"),
    (["bench", "--sim", "pcie-4gpu", "--tests", " "], "--tests"),
    (["bench", "--sim", "pcie-4gpu", "--sizes", ""], "--sizes"),
    (["bench", "--sim", "pcie-4gpu", "--out", ""], "--out"),
    (["bench", "--sim", "", "--quick"], "--sim"),
    (["bench", "--sim", "pcie-4gpu", "--pairs", ""], "--pairs"),
    (["numerics", "--sim", "pcie-4gpu", "--model", ""], "--model"),
    (["scan", "--sim", ""], "--sim"),
    (["scan", "--from-smi", ""], "--from-smi"),
    (["check", "--spec", ""], "--spec"),
    (["check", "--spec", "pcie-box", "--junit", "", "."], "--junit"),
    (["report", ""], "RUN_DIR"),
    (["diff", "", "b"], "DIR_A"),
])
def test_empty_values_are_refused(argv, name):
    line = refused(*argv)
    assert name in line and "empty" in line


# ----------------------------------------------------------------------------- repeated / conflicting / ignored

@pytest.mark.parametrize("argv, names", [
    (["bench", "--sim", "seed-8gpu", "--class", "SYS", "--class", "NV4"], ["--class"]),
    (["bench", "--sim", "seed-8gpu", "--quick", "--full"], ["--quick", "--full"]),
    (["check", "--spec", "pcie-box", "--full", "--quick", "--sim", "x"], ["--quick", "--full"]),
    (["bench", "--sim", "seed-8gpu", "--timeout", "5", "--timeout", "6"], ["--timeout"]),
    (["scan", "--format", "json", "--format", "csv"], ["--format"]),
    (["scan", "--sim", "pcie-4gpu", "--format", "csv", "--json"], ["--format csv", "--json"]),
    (["scan", "--sim", "pcie-4gpu", "--format", "smi", "--csv"], ["--format smi", "--csv"]),
    (["bench", "--sim", "seed-8gpu", "--pairs", "all", "--pairs", "0,1"], ["--pairs", "all"]),
])
def test_repeated_and_conflicting_options_are_refused(argv, names):
    line = refused(*argv)
    for name in names:
        assert name in line


@pytest.mark.parametrize("extra, names", [
    (["--sim", "seed-8gpu"], ["--sim"]),
    (["--quick", "--pairs", "0,1"], ["--quick", "--pairs"]),
    (["--from", "."], ["--from"]),
    (["--margin", "0.1"], ["--margin"]),
    (["--force"], ["--force"]),
])
def test_check_refuses_options_it_would_ignore(tmp_path, extra, names):
    line = refused("check", "--spec", "pcie-box", tmp_path, *extra)
    assert "ignored" in line
    for name in names:
        assert name in line


def test_check_init_refuses_measuring_options_and_run_dir(tmp_path):
    spec = tmp_path / "new.toml"
    line = refused("check", "--init", "--from", tmp_path, "--spec", spec, "--sim", "x")
    assert "--sim" in line and "ignored" in line
    line = refused("check", "--init", "--from", tmp_path, "--spec", spec, tmp_path)
    assert "RUN_DIR" in line
    assert not spec.exists()


# ----------------------------------------------------------------------------- read-only folders

@pytest.fixture
def read_only(monkeypatch):
    """Make a folder read-only: by its mode, and (root ignores modes) by refusing writes in it."""
    import tempfile

    import gputopo.writable as writable

    folders = []
    real_mkstemp = tempfile.mkstemp

    def mkstemp(*args, dir=None, **kw):
        if dir is not None and any(Path(dir).resolve() == f for f in folders):
            raise PermissionError(13, "Permission denied", str(dir))
        return real_mkstemp(*args, dir=dir, **kw)

    monkeypatch.setattr(writable.tempfile, "mkstemp", mkstemp)

    def make(folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        folders.append(folder.resolve())
        os.chmod(folder, 0o555)
        return folder

    yield make
    for f in folders:
        os.chmod(f, 0o755)


def test_out_in_a_read_only_folder_is_refused(tmp_path, read_only):
    ro = read_only(tmp_path / "ro")
    line = refused("bench", "--sim", "pcie-4gpu", "--quick", "--pairs", "0,1",
                   "--out", ro / "run")
    assert "--out" in line and "cannot write" in line and str(ro / "run") in line
    assert not (ro / "run").exists()


def test_import_out_in_a_read_only_folder_is_refused(tmp_path, read_only):
    log = DATA / "nccl_tests" / "h200_broadcast_mpi.log"
    ro = read_only(tmp_path / "ro")
    line = refused("import", "nccl-tests", log, "--out", ro / "run")
    assert "--out" in line and "cannot write" in line


def test_check_junit_in_a_read_only_folder_is_refused_before_measuring(tmp_path,
                                                                       read_only):
    ro = read_only(tmp_path / "ro")
    line = refused("check", "--spec", "pcie-box", "--sim", "pcie-4gpu", "--quick",
                   "--out", tmp_path / "run", "--junit", ro / "gate.xml")
    assert "--junit" in line and "cannot write" in line
    assert not (tmp_path / "run").exists()  # nothing was measured
    line = refused("check", "--spec", "pcie-box", tmp_path, "--junit", tmp_path)
    assert "--junit" in line and "is a directory" in line


def test_check_init_spec_in_a_read_only_folder_is_refused(tmp_path, read_only):
    ro = read_only(tmp_path / "ro")
    line = refused("check", "--init", "--from", tmp_path, "--spec", ro / "new.toml")
    assert "--spec" in line and "cannot write" in line


# ----------------------------------------------------------------------------- broken run folders

@pytest.fixture(scope="module")
def good_run(tmp_path_factory):
    """One small simulated run (p2p on one pair), copied by the tests that break it."""
    out = tmp_path_factory.mktemp("good") / "run"
    with pytest.raises(SystemExit) as e:
        main(["bench", "--sim", "pcie-4gpu", "--quick", "--pairs", "0,1", "--tests", "p2p",
              "--out", str(out), "--json"])
    assert e.value.code == 0
    return out


@pytest.fixture
def run_copy(good_run, tmp_path, capsys):
    capsys.readouterr()
    dst = tmp_path / "run"
    shutil.copytree(good_run, dst)
    return dst


@pytest.mark.slow
def test_report_no_plots_on_a_read_only_run_keeps_its_plots(run_copy, read_only):
    pngs = sorted(p.name for p in run_copy.glob("*.png"))
    assert pngs
    read_only(run_copy)
    line = refused("report", run_copy, "--no-plots")
    assert "cannot write" in line and str(run_copy) in line
    assert sorted(p.name for p in run_copy.glob("*.png")) == pngs


def _numbers_as_text(path: Path) -> None:
    lines = []
    for text in path.read_text().splitlines():
        rec = json.loads(text)
        rec["size_bytes"] = str(rec["size_bytes"])
        lines.append(json.dumps(rec))
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.slow
@pytest.mark.parametrize("command", ["report", "diff", "resume"])
@pytest.mark.parametrize("breakage", ["directory", "unreadable"])
def test_unreadable_measurements_are_input_errors(run_copy, good_run, command, breakage,
                                                  monkeypatch):
    ms = run_copy / "measurements.jsonl"
    if breakage == "directory":
        ms.unlink()
        ms.mkdir()
    else:
        import builtins

        real_open = builtins.open

        def deny(file, *a, **kw):
            if Path(str(file)).resolve() == ms.resolve():
                raise PermissionError(13, "Permission denied", str(file))
            return real_open(file, *a, **kw)

        monkeypatch.setattr(builtins, "open", deny)
    argv = {"report": ["report", run_copy, "--no-plots"], "diff": ["diff", good_run, run_copy],
            "resume": ["bench", "--resume", run_copy]}[command]
    line = refused(*argv)
    assert "measurements.jsonl" in line and "cannot read" in line


@pytest.mark.slow
def test_resume_refuses_numbers_written_as_text(run_copy):
    _numbers_as_text(run_copy / "measurements.jsonl")
    line = refused("bench", "--resume", run_copy)
    assert "measurements.jsonl:1" in line and "size_bytes" in line


@pytest.mark.parametrize("text, key", [
    ("[]", "JSON object"),
    ('{"fabric": 3}', "[fabric]"),
    ('{"fabric": "sim", "options": []}', "[options]"),
    ('{"fabric": "sim", "options": {"pairs": "0,1"}}', "[options.pairs]"),
    ('{"fabric": "sim", "options": {"sizes_bytes": ["1M"]}}', "[options.sizes_bytes]"),
    ('{"fabric": "sim", "options": {"tests": "p2p"}}', "[options.tests]"),
])
def test_resume_refuses_run_json_of_the_wrong_shape(tmp_path, text, key):
    (tmp_path / "run.json").write_text(text)
    line = refused("bench", "--resume", tmp_path)
    assert "run.json" in line and key in line


# ----------------------------------------------------------------------------- specs that judge nothing or nonsense

@pytest.mark.parametrize("body, words", [
    ("", ["states no requirement"]),
    ("# only a comment\n", ["states no requirement"]),
    ("schema_version = 1\n", ["states no requirement"]),
    ("[integrity]\nno_nan = false\n", ["states no requirement"]),
    ("[pcie]\nmin_gen = 9\n", ["[pcie.min_gen]", "<= 6"]),
    ("[pcie]\nmin_width = 64\n", ["[pcie.min_width]", "<= 32"]),
    ("[nvlink]\nmin_links_up = 99\n", ["[nvlink.min_links_up]", "<= 36"]),
    ("[nvlink.links_up]\n0 = 99\n", ["[nvlink.links_up.0]"]),
    ("[bandwidth.SYS]\nmin_efficiency = nan\n", ["[bandwidth.SYS.min_efficiency]", "finite"]),
    ("[bandwidth.SYS]\nmin_gbps = inf\n", ["[bandwidth.SYS.min_gbps]", "finite"]),
    ("[busbw]\nall_reduce = nan\n", ["[busbw.all_reduce]", "finite"]),
    ('[topology.pairs]\n"0,1" = "NV4"\n"1,0" = "SYS"\n', ["[topology.pairs.1,0]", '"0,1" = NV4']),
])
def test_check_refuses_a_spec_that_judges_nothing_or_nonsense(tmp_path, body, words):
    spec = tmp_path / "s.toml"
    spec.write_text(body)
    line = refused("check", "--spec", spec, tmp_path)
    assert "s.toml" in line
    for w in words:
        assert w in line


def test_the_same_pair_twice_with_one_class_is_fine():
    from gputopo.check.spec import parse_spec

    spec = parse_spec({"topology": {"pairs": {"0,1": "NV4", "1,0": "NV4"}}})
    assert spec.expected_classes == {(0, 1): "NV4"}


@pytest.mark.slow
@pytest.mark.parametrize("breakage, rule", [
    ("empty measurements", "run.measured"),
    ("no run.json", "run.complete"),
])
def test_check_fails_a_run_that_lost_its_data(run_copy, capsys, breakage, rule):
    if breakage == "empty measurements":
        (run_copy / "measurements.jsonl").write_text("")
    else:
        (run_copy / "run.json").unlink()
    with pytest.raises(SystemExit) as e:
        main(["check", "--spec", "pcie-box", str(run_copy), "--json"])
    assert e.value.code == 1
    doc = json.loads(capsys.readouterr().out)
    assert not doc["passed"]
    assert rule in {f["rule"] for f in doc["failures"]}, doc["failures"]


def test_shipped_spec_names_and_spec_paths_never_mix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = refused("check", "--init", "--from", tmp_path, "--spec", "pcie-box")
    assert "--spec pcie-box" in line and ".toml" in line
    assert not (tmp_path / "pcie-box").exists()
    # a file named like a shipped spec does not shadow it: a bare name is always the shipped one
    (tmp_path / "pcie-box").write_text("")
    from gputopo.cli.check import _spec_path
    from gputopo.check.spec import shipped_spec_path

    assert _spec_path("pcie-box") == str(shipped_spec_path("pcie-box"))
    line = refused("check", "--spec", "no-such-spec", tmp_path)
    assert "no shipped spec" in line and "pcie-box" in line
    line = refused("check", "--spec", "pcie-box.toml", tmp_path)
    assert "--spec pcie-box" in line


# ----------------------------------------------------------------------------- resume redoes what is missing

@pytest.mark.slow
def test_resume_redoes_a_step_marked_done_whose_measurements_were_lost(run_copy, capsys):
    ms = run_copy / "measurements.jsonl"
    n_before = len(ms.read_text().splitlines())
    ms.write_text("")
    with pytest.raises(SystemExit) as e:
        main(["bench", "--resume", str(run_copy), "--json"])
    assert e.value.code == 0
    err = capsys.readouterr().err
    assert "redoing 1 step(s)" in err and "p2p:0-1" in err and "missing" in err
    assert len(ms.read_text().splitlines()) == n_before
    redo = [json.loads(x) for x in (run_copy / "events.jsonl").read_text().splitlines()
            if '"step-redo"' in x]
    assert [r["step"] for r in redo] == ["p2p:0-1"]


def test_resume_plan_redoes_crashed_and_incomplete_steps_and_keeps_hangs():
    from gputopo.bench.plan import Case
    from gputopo.runfolder.resume import plan_resume

    class Step:
        def __init__(self, sid, n, pair):
            self.id = sid
            self.cases = [Case("p2p.copy", pair, None, 4 << k, *pair) for k in range(n)]

    steps = [Step("ok", 2, (0, 1)), Step("lost", 2, (0, 2)), Step("crashed", 2, (0, 3)),
             Step("hung", 2, (1, 2)), Step("new", 1, (1, 3))]
    have = {steps[0].cases[0].key, steps[0].cases[1].key, steps[1].cases[0].key,
            steps[2].cases[0].key}
    todo, redo = plan_resume(steps, {"ok": "ok", "lost": "ok", "crashed": "crash",
                                     "hung": "hang"}, have)
    assert [s.id for s in todo] == ["lost", "crashed", "new"]
    assert [len(s.cases) for s in todo] == [1, 1, 1]
    assert {r.step: r.reason for r in redo} == {
        "lost": "1 of its 2 measurement(s) are missing", "crashed": "its worker ended with crash"}


# ----------------------------------------------------------------------------- sizes that cannot fit

@pytest.mark.parametrize("argv", [
    ["bench", "--sim", "pcie-4gpu", "--pairs", "0,1", "--sizes", "1T"],
    ["bench", "--fabric", "cpu", "--sizes", "1M,1T"],
])
def test_sizes_larger_than_memory_are_refused_before_running(tmp_path, argv,
                                                             monkeypatch):
    import gputopo.bench.memory_check as mc

    monkeypatch.setattr(mc, "host_available_bytes", lambda: 64 << 30)  # whatever this host has
    line = refused(*argv, "--out", tmp_path / "run")
    assert "--sizes" in line and "1T" in line and "64.0 GiB is available" in line
    assert not (tmp_path / "run").exists()


def test_size_check_judges_host_and_gpu_memory():
    from gputopo.bench.memory_check import check_sizes_fit, host_available_bytes
    from gputopo.errors import UsageError

    check_sizes_fit(256 << 20, "sim", workers=4, host_free=16 << 30)  # 4 x (2 x 4 x 256 MiB + 512 MiB of patterns) = 10 GiB: fits
    with pytest.raises(UsageError, match="4 worker"):
        check_sizes_fit(1 << 30, "sim", workers=4, host_free=16 << 30)
    check_sizes_fit(1 << 30, "cuda", workers=1, host_free=16 << 30, gpu_free={0: 80 << 30})
    with pytest.raises(UsageError, match="GPU 1 has 2.0 GiB free"):
        check_sizes_fit(1 << 30, "cuda", workers=1, host_free=None,
                        gpu_free={0: 80 << 30, 1: 2 << 30})
    check_sizes_fit(1 << 40, "sim", workers=1, host_free=None)  # unknown: not judged
    assert host_available_bytes("/nonexistent/meminfo") is None


def test_gpu_free_memory_is_read_through_nvml_by_bus_id(monkeypatch):
    import gputopo.probe.nvml_lib as nvml_lib
    from gputopo.model import Gpu, Topology
    from gputopo.probe.gpu_memory import gpu_free_bytes

    class Info:
        free = 3 << 30

    class Lib:
        def nvmlDeviceGetHandleByPciBusId(self, bus_id):
            if bus_id != "00000000:3B:00.0":
                raise RuntimeError("NVML_ERROR_NOT_FOUND")
            return "h0"

        def nvmlDeviceGetHandleByIndex(self, k):
            return f"h{k}"

        def nvmlDeviceGetMemoryInfo(self, handle):
            return Info()

        def nvmlShutdown(self):
            pass

    monkeypatch.setattr(nvml_lib, "load_nvml", lambda: Lib())
    topo = Topology(gpus=[Gpu(0, pci_bus_id="00000000:3B:00.0"), Gpu(1), Gpu(2, pci_bus_id="x")],
                    pairs=[])
    assert gpu_free_bytes(topo, [0, 1, 2]) == {0: 3 << 30, 1: 3 << 30}  # GPU 2: not judged


def test_a_worker_killed_by_sigkill_is_not_blamed_on_the_link():
    import signal

    from gputopo.model import Finding
    from gputopo.report.why.culprits import step_failure_cause as _step_failure_cause
    from gputopo.report.run_folder import Run
    from gputopo.report.step_failures import killed_cause

    cause, remedies = killed_cause(-signal.SIGKILL)
    assert "out-of-memory" in cause and "nothing about the GPU link" in cause
    assert any("dmesg" in r for r in remedies)
    assert killed_cause(-signal.SIGSEGV) == (None, None) and killed_cause(1) == (None, None)
    # a numerics worker's crash reaches the report without a cause: the report adds this one,
    # not the IOMMU/ACS suspects of the pair's path
    run = Run(path=Path("."), info={}, topology=None)
    f = Finding("crash", "error", "GPUs 3,4 (SYS): DDP training run crashed: worker process 1 "
                "died (killed by signal SIGKILL)", gpus=[3, 4], link_class="SYS")
    assert _step_failure_cause(run, f)[0] == cause


@pytest.mark.parametrize("argv, names", [
    (["bench", "--resume", "{run}", "--pairs", "0,1"], ["--pairs", "--resume"]),
    (["bench", "--resume", "{run}", "--quick", "--sizes", "1M"], ["--quick", "--sizes"]),
    (["numerics", "--resume", "{run}", "--class", "SYS", "--out", "x"], ["--class", "--out"]),
    (["check", "--spec", "pcie-box", "--resume", "{run}", "--full"], ["--full"]),
    (["bench", "--sim", "pcie-4gpu", "--tests", "p2p", "--steps", "5"], ["--steps", "numerics"]),
    (["bench", "--sim", "pcie-4gpu", "--cpu-gpus", "3"], ["--cpu-gpus"]),
    (["bench", "--fabric", "sim", "--sim", "pcie-4gpu", "--cpu-gpus", "3"], ["--cpu-gpus"]),
])
def test_bench_refuses_options_it_would_ignore(tmp_path, argv, names):
    line = refused(*[a.replace("{run}", str(tmp_path)) for a in argv])
    assert "ignored" in line
    for name in names:
        assert name in line


@pytest.mark.slow
def test_numbers_written_as_text_are_never_compared_as_numbers(run_copy, good_run, capsys):
    _numbers_as_text(run_copy / "measurements.jsonl")
    line = refused("diff", good_run, run_copy)
    assert "run B" in line and "measurements.jsonl:1" in line and "size_bytes" in line
    with pytest.raises(SystemExit) as e:  # the report renders, and says what it skipped
        main(["report", str(run_copy), "--json", "--no-plots"])
    assert e.value.code == 0
    doc = json.loads(capsys.readouterr().out)
    data = [f for f in doc["findings"] if f["kind"] in ("incomplete-data", "invalid-data")]
    assert any("measurements.jsonl" in f["message"] and "line(s) skipped (not a measurement)" in f["message"]
               for f in data), doc["findings"]


@pytest.mark.slow
def test_resume_of_a_read_only_run_is_refused(run_copy, read_only):
    """A run with steps left to do (half its measurements gone, status interrupted) in a folder
    that cannot be written: refused before anything runs (a complete run has nothing to do)."""
    from gputopo.runfolder.writer import set_run_status

    ms = run_copy / "measurements.jsonl"
    lines = ms.read_text().splitlines(keepends=True)
    ms.write_text("".join(lines[: len(lines) // 2]))
    set_run_status(run_copy, "interrupted")
    read_only(run_copy)
    line = refused("bench", "--resume", run_copy)
    assert "--resume" in line and "cannot write" in line
