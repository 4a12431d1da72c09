"""tools/gpu_check.py (`make gpu-check`), the GPU acceptance run, tested here without a GPU:
against the fake nvidia-smi (tests/fake_nvidia_smi: outputs written by hand from NVIDIA's
documented formats, not read from a GPU) and the built-in sims. What this proves is the plumbing:
every step bounded and recorded, a hang costing its timeout and one line, a failure its
traceback, the comparison saying `differs` where nvidia-smi and gputopo disagree."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers.paths import REPO

TOOLS = REPO / "tools"
FAKE = REPO / "tests" / "fake_nvidia_smi"
sys.path.insert(0, str(TOOLS))

import gpu_check  # noqa: E402
import gpu_check_compare as cmp  # noqa: E402
from helpers.cli import gputopo_here  # noqa: E402


def _env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO)
    env.pop("FAKE_NVIDIA_SMI_HANG", None)
    env["FAKE_NVIDIA_SMI_DATA"] = str(FAKE / "h100-pcie-1gpu")
    env.update(extra)
    return env


def _probe(*args, timeout=120):
    return subprocess.run([sys.executable, str(TOOLS / "gpu_check_probe.py"), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, env=_env())


def _check(tmp_path, *args, timeout=300, **env):
    """Run the check against the fake nvidia-smi and a sim; (process, summary.json, folder)."""
    proc = subprocess.run([sys.executable, str(TOOLS / "gpu_check.py"), "--nvidia-smi", str(FAKE / "nvidia-smi"),
                           "--reports", str(tmp_path / "reports"), *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env=_env(**env))
    folders = [p for p in (tmp_path / "reports").iterdir() if p.is_dir()]
    assert len(folders) == 1, (folders, proc.stdout, proc.stderr)
    return proc, json.loads((folders[0] / "summary.json").read_text()), folders[0]


def _steps(summary):
    return {s["step"]: s for s in summary["steps"]}


def _alive_with(token: str):
    """Processes whose command line holds ``token`` (and are not zombies)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if token in cmd and state not in ("Z", "X"):
            out.append((d.name, cmd))
    return out


# ----------------------------------------------------------------------------- the steps' helpers


@pytest.mark.slow
def test_one_rank_all_reduce_goes_through_the_bench_worker(tmp_path):
    """The bench's collective path at world size 1 (a bench worker, its process group, the
    all_reduce Spec): on the cpu fabric here, over gloo. Before the worker built a group for a
    one-rank collective step this failed with "Default process group has not been initialized"."""
    out = tmp_path / "nccl.json"
    proc = _probe("nccl", "--fabric", "cpu", "--size", "1M", "--samples", "3", "--log-dir",
                  str(tmp_path), "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["verified"] is True and doc["wrong"] == 0 and doc["error"] is None
    assert doc["backend"] == "gloo" and doc["world_size"] == 1
    m = doc["measurement"]
    assert m["test"] == "collective.all_reduce" and m["extra"]["ranks"] == 1
    # one rank moves no data between GPUs: no bandwidth (before: 198 GB/s here); gloo sums (only
    # NCCL is asked for AVG, so that its one-rank path runs a kernel: test_one_rank_all_reduce.py)
    assert doc["algbw_gbps"] is None and "no data between GPUs" in doc["no_bandwidth"]
    assert doc["reduce_op"] == m["extra"]["reduce_op"] == "sum"
    assert len(m["samples_s"]) == 3 and m["timing"] == "wall"
    assert (tmp_path / "nccl-one-rank-worker.log").is_file()


@pytest.mark.slow
def test_the_cuda_only_probes_say_they_need_cuda():
    """Without CUDA the bare loop and a --device cuda training exit 3 with one line (the check
    records n/a), never a traceback."""
    bare = subprocess.run([sys.executable, str(REPO / "benchmarks" / "cuda_self.py")], capture_output=True,
                          text=True, timeout=120, env=_env())
    assert bare.returncode == 3 and bare.stderr.startswith("needs CUDA") and "Traceback" not in bare.stderr
    ref = _probe("numerics", "--device", "cuda")
    assert ref.returncode == 3 and "needs CUDA" in ref.stderr and "Traceback" not in ref.stderr


# ----------------------------------------------------------------------------- the comparison


def _captures(dst: Path, data: Path, sim: str):
    """What the check's first steps capture, into ``dst``: the fake's outputs and gputopo's scan."""
    env = _env(FAKE_NVIDIA_SMI_DATA=str(data))
    smi = str(FAKE / "nvidia-smi")
    runs = {cmp.SMI_XML: [smi, "-q", "-x"], cmp.SMI_TOPO: [smi, "topo", "-m"],
            cmp.SMI_NVLINK: [smi, "nvlink", "-s"],
            cmp.SMI_CSV: [smi, "--query-gpu=" + ",".join(cmp.QUERY_FIELDS), "--format=csv,nounits"],
            cmp.SCAN_JSON: [sys.executable, "-m", "gputopo", "scan", "--sim", sim, "--json"],
            cmp.SCAN_SMI: [sys.executable, "-m", "gputopo", "scan", "--sim", sim, "--format", "smi"]}
    for name, argv in runs.items():
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, cwd=REPO)
        assert out.returncode == 0, (argv, out.stderr)
        (dst / name).write_text(out.stdout)


def _verdicts(doc):
    out = {}
    for r in doc["fields"]:
        out.setdefault(r["field"], set()).add(r["verdict"])
    return out


@pytest.mark.parametrize("sim", ["h100-pcie-1gpu", "h100-sxm-1gpu"])
@pytest.mark.slow
def test_comparison_equal_where_the_fake_agrees_with_the_sim(tmp_path, sim):
    """Each fake nvidia-smi was written to agree with the built-in sim of its name (`make
    gpu-check-fake` runs the SXM one): the comparison finds no difference."""
    _captures(tmp_path, FAKE / sim, sim)
    doc = cmp.compare_scan(tmp_path)
    v = _verdicts(doc)
    assert doc["counts"]["differs"] == 0, [r for r in doc["fields"] if r["verdict"] == "differs"]
    for field in ("gpu[0].name", "gpu[0].uuid", "gpu[0].pcie.width_current", "gpu[0].numa_node",
                  "gpu[0].cpu_affinity", "gpu[0].nvlinks.active", "gpu[0].nvlinks.listed",
                  "host.driver_version", "host.cuda_driver_version", "gpu[0].health.power_limit_w",
                  "scan --format smi text"):
        assert v[field] == {"equal"}, (field, v.get(field))
    assert v["gpu[0].memory_total_mib"] == {"n/a"}  # the scan does not read it: said, not judged
    assert v["pairs.link_class"] == {"n/a"}  # one GPU
    assert cmp.write_scan(tmp_path, doc).startswith(f"{doc['counts']['equal']} equal, 0 differ")
    assert (tmp_path / "comparison.md").read_text().count("| gpu[0].") >= 30


@pytest.mark.slow
def test_comparison_says_differs_on_a_mismatched_fake(tmp_path):
    """A copy of the fake with fields changed the way a wrong reader would see them: each
    changed field, and only those, differs."""
    data = tmp_path / "fake"
    shutil.copytree(FAKE / "h100-pcie-1gpu", data)
    xml = (data / "q.xml").read_text()
    xml = xml.replace("<current_link_width>16x</current_link_width>", "<current_link_width>8x</current_link_width>")
    xml = xml.replace("<remapped_row_pending>No</remapped_row_pending>", "<remapped_row_pending>Yes</remapped_row_pending>")
    (data / "q.xml").write_text(xml)
    topo = (data / "topo-m.txt").read_text().replace("\t0-31\t0\t", "\t0-31\t1\t")
    (data / "topo-m.txt").write_text(topo)
    nvl = (data / "nvlink-s.txt").read_text().replace("Link 3: <inactive>", "Link 3: 26.562 GB/s")
    (data / "nvlink-s.txt").write_text(nvl)
    fields = json.loads((data / "fields.json").read_text())
    fields["gpus"][0]["name"][0] = "NVIDIA H100 NVL"
    fields["gpus"][0]["power.limit"][0] = "350.00"
    (data / "fields.json").write_text(json.dumps(fields))
    cap = tmp_path / "cap"
    cap.mkdir()
    _captures(cap, data, "h100-pcie-1gpu")
    doc = cmp.compare_scan(cap)
    differs = {(r["field"], r["source"].split(":")[0]) for r in doc["fields"] if r["verdict"] == "differs"}
    assert differs == {
        ("gpu[0].pcie.width_current", "nvidia-smi -q -x"),
        ("gpu[0].health.remapped_rows.pending", "nvidia-smi -q -x"),
        ("gpu[0].numa_node", "nvidia-smi topo -m"),
        ("scan --format smi text", "nvidia-smi topo -m"),  # the NUMA cell of the matrix text
        ("gpu[0].nvlinks.active", "nvidia-smi nvlink -s"),
        ("gpu[0].nvlinks.state_per_link", "nvidia-smi nvlink -s"),
        ("gpu[0].name", "nvidia-smi --query-gpu"),
        ("gpu[0].health.power_limit_w", "nvidia-smi --query-gpu"),
    }, differs
    assert _verdicts(doc)["gpu[0].uuid"] == {"equal"}
    width = next(r for r in doc["fields"] if r["field"] == "gpu[0].pcie.width_current" and r["verdict"] == "differs")
    assert width["gputopo"] == 16 and width["nvidia_smi"] == "8x" and "off by +8" in width["why"]
    line = cmp.write_scan(cap, doc)
    assert "8 differ" in line and "gpu[0].numa_node" in line
    assert cmp.main(["scan", str(cap)]) == 1  # the step's exit code: its verdict is `differs`


def test_pair_link_classes_compared_cell_by_cell(tmp_path):
    """Several GPUs: every pair's class against the topo -m matrix (gputopo's own smi text of
    the sim stands in for nvidia-smi's, with one cell changed on both sides of the diagonal)."""
    env = {**_env(), "FAKE_NVIDIA_SMI_HANG": None}
    scan = gputopo_here("scan", "--sim", "seed-8gpu", "--json", cwd=REPO, env=env, timeout=60)
    smi = gputopo_here("scan", "--sim", "seed-8gpu", "--format", "smi", cwd=REPO, env=env, timeout=60)
    (tmp_path / cmp.SCAN_JSON).write_text(scan.stdout)
    lines = smi.stdout.split("\n")
    for k, col in ((1, 6), (6, 1)):  # GPU0-GPU5 is SYS: make it NODE, symmetrically
        cells = lines[k].split("\t")
        assert cells[col].strip() == "SYS"
        cells[col] = "NODE"
        lines[k] = "\t".join(cells)
    (tmp_path / cmp.SMI_TOPO).write_text("\n".join(lines))
    doc = cmp.compare_scan(tmp_path)
    v = _verdicts(doc)
    assert v["pair[0,5].link_class"] == {"differs"}
    assert v["pair[6,7].link_class"] == {"equal"} and v["pair[0,1].link_class"] == {"equal"}
    assert sum(1 for f in v if f.startswith("pair[")) == 28


def test_an_underlined_topo_header_is_no_difference(tmp_path):
    """Recent drivers print the `topo -m` header between ANSI escapes even when piped (a real
    capture: tests/fixtures/topo/rwth-omp-offload_c16g_2gpu_nv2_ansi.txt). The comparison of
    gputopo's smi text with it strips them as the parser does: before, `differs` on the header
    line and exit 1 on a healthy machine. A cell that differs still does."""
    env = {**_env(), "FAKE_NVIDIA_SMI_HANG": None}
    scan = gputopo_here("scan", "--sim", "seed-8gpu", "--json", cwd=REPO, env=env, timeout=60)
    smi = gputopo_here("scan", "--sim", "seed-8gpu", "--format", "smi", cwd=REPO, env=env, timeout=60)
    assert "\x1b" not in smi.stdout
    (tmp_path / cmp.SCAN_JSON).write_text(scan.stdout)
    (tmp_path / cmp.SCAN_SMI).write_text(smi.stdout)
    lines = smi.stdout.split("\n")
    head = lines[0].split("\t")  # as the real capture: "\t\x1b[4mGPU0\tGPU1...\x1b[0m"
    lines[0] = "\t".join([head[0], "\x1b[4m" + head[1]] + head[2:]) + "\x1b[0m"
    (tmp_path / cmp.SMI_TOPO).write_text("\n".join(lines))
    doc = cmp.compare_scan(tmp_path)
    assert _verdicts(doc)["scan --format smi text"] == {"equal"}
    assert doc["counts"]["differs"] == 0 and cmp.main(["scan", str(tmp_path)]) == 0
    cells = lines[1].split("\t")
    cells[2] = "NV4" if cells[2].strip() != "NV4" else "SYS"
    lines[1] = "\t".join(cells)
    (tmp_path / cmp.SMI_TOPO).write_text("\n".join(lines))
    assert _verdicts(cmp.compare_scan(tmp_path))["scan --format smi text"] == {"differs"}


def test_the_fake_nvidia_smi_underlines_its_topo_header_as_recent_drivers_do():
    """So `make gpu-check-fake` goes through the stripping (the comparison's fake tests above)."""
    for machine in ("h100-sxm-1gpu", "h100-pcie-1gpu"):
        first = (FAKE / machine / "topo-m.txt").read_text().split("\n")[0]
        assert first.startswith("\t\x1b[4mGPU0\t") and first.endswith("\x1b[0m"), (machine, first)


def test_the_one_rank_all_reduce_says_no_bandwidth(tmp_path):
    """One rank moves no data between GPUs: the step's line says its time and no GB/s (before:
    "198.0 GB/s algbw" on the cpu path, a figure for a transfer that never happened)."""
    doc = {"fabric": "cuda", "backend": "nccl", "size_bytes": 64 << 20, "wrong": 0, "verified": True,
           "reduce_op": "avg", "median_s": 0.000321, "timing": "cuda-events", "algbw_gbps": 198.0}
    (tmp_path / "nccl-one-rank.json").write_text(json.dumps(doc))
    verdict, line = gpu_check._j_nccl(SimpleNamespace(path=tmp_path.joinpath), SimpleNamespace(rc=0, stderr=""))
    assert verdict == "ok" and "GB/s" not in line and "no bandwidth" in line
    assert "nccl one-rank all_reduce (avg) 64 MiB" in line and "median 0.321 ms per call (cuda-events)" in line


def test_tracebacks_are_cut_from_logs_whole():
    text = ("noise\nTraceback (most recent call last):\n  File \"a.py\", line 1, in <module>\n    f()\n"
            "KeyError: 'x'\n\nDuring handling of the above exception, another exception occurred:\n\n"
            "Traceback (most recent call last):\n  File \"b.py\", line 2, in g\nValueError: bad\nafter\n")
    tbs = gpu_check.tracebacks_in(text)
    assert len(tbs) == 1 and tbs[0].endswith("ValueError: bad") and "KeyError: 'x'" in tbs[0]
    # the line a failed step is summed up by: its own "gputopo: ..." line, else the exception
    assert gpu_check._last_line(text) == "ValueError: bad"
    assert gpu_check._last_line(text + "gputopo: error: no GPU\n") == "gputopo: error: no GPU"
    assert gpu_check._last_line("started\nstopped\n==========\n") == "stopped"
    torchrun = "[rank0]: Traceback (most recent call last):\n[rank0]:   File \"x\", line 1\n[rank0]: OSError: e\n"
    assert gpu_check.tracebacks_in(torchrun) == [torchrun.rstrip("\n")]


# ----------------------------------------------------------------------------- the whole check


@pytest.fixture(scope="module")
def fake_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpu-check")
    t0 = time.monotonic()
    proc, summary, folder = _check(tmp, "--sim", "h100-pcie-1gpu", "--skip", "pytest-gpu", "--copy-to",
                                   str(tmp / "carried"))
    return proc, summary, folder, tmp, time.monotonic() - t0


@pytest.mark.slow
def test_the_check_runs_end_to_end_on_the_fake_and_the_sim(fake_run):
    proc, summary, folder, tmp, wall = fake_run
    assert folder.name == "gpu-check-h100-pcie-fake-smi-sim-h100-pcie-1gpu"  # never mistaken for a real one
    archive = folder.parent / (folder.name + ".tar.gz")
    assert archive.is_file() and (tmp / "carried" / archive.name).is_file()
    assert archive.stat().st_size < 2 << 20
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    for f in ("summary.md", "summary.json", "comparison.json", "comparison.md", "scan.json", "nvidia-smi-q.xml",
              "versions.json", "bench-self/run.json", "nccl-one-rank.json", "spec.toml", "self-ratio.md"):
        assert f"{folder.name}/{f}" in names, f
    assert summary["complete"] and summary["fake_nvidia_smi"] and summary["sim"] == "h100-pcie-1gpu"
    assert any(lab.startswith("FAKE nvidia-smi") for lab in summary["labels"])
    assert any(lab.startswith("SIMULATED") for lab in summary["labels"])
    md = (folder / "summary.md").read_text()
    assert "**FAKE nvidia-smi" in md and "**SIMULATED" in md
    steps = _steps(summary)
    assert len(steps) == len(summary["steps"]) == 23 and summary["not_run_yet"] == []
    want = {"smi-query": "ok", "versions": "ok", "smi-xml": "ok", "smi-topo": "ok", "smi-nvlink": "ok",
            "scan-json": "ok", "scan-smi": "ok", "compare-scan": "ok", "bench-self": "ok", "cuda-self": "n/a",
            "self-ratio": "n/a", "nccl-one-rank": "n/a", "numerics-refusal": "ok", "numerics-reference": "n/a",
            "check-init": "ok", "check": "ok", "gate": "ok", "health": "ok", "bench-pairs": "skipped", "bench-remapped": "skipped",
            "cluster-gpus": "skipped", "pytest-gpu": "skipped"}
    got = {k: steps[k]["verdict"] for k in want}
    assert got == want, (got, proc.stdout)
    assert "gloo one-rank all_reduce" in steps["nccl-one-rank"]["line"] and "#wrong 0" in steps["nccl-one-rank"]["line"]
    assert "GB/s" not in steps["nccl-one-rank"]["line"] and "no bandwidth" in steps["nccl-one-rank"]["line"]
    assert steps["numerics-refusal"]["exit_code"] == 3
    assert steps["compare-scan"]["line"].startswith(f"{json.loads((folder / 'comparison.json').read_text())['counts']['equal']} equal, 0 differ")
    for s in summary["steps"]:  # every step that ran: its command, exit code, time and output
        if s["verdict"] != "skipped":
            assert s["command"] and s["exit_code"] is not None and s["seconds"] > 0 and s["timeout_s"] > 0
            assert (folder / s["stderr"]).is_file()
    # one line per step on the terminal, the folder and the archive at the end
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("[")]
    assert len(lines) == 23 and proc.stdout.rstrip().endswith("traceback(s)")
    assert wall < summary["budget_s"]


@pytest.mark.serial  # a wall-time bound: run alone, after the parallel part
@pytest.mark.slow
def test_a_hang_costs_its_timeout_and_one_line_and_a_failure_its_traceback(tmp_path):
    """An injected step that hangs (with a child that hangs too), a wedged `nvidia-smi nvlink -s`
    and an injected step that raises: each costs its own timeout or nothing, one line, and
    leaves no process behind; the steps after them still run."""
    t0 = time.monotonic()
    proc, summary, folder = _check(tmp_path, "--sim", "h100-pcie-1gpu", "--inject", "hang", "--inject", "fail",
                                   "--timeout", "injected-hang=2", "--timeout", "smi-nvlink=2", "--only",
                                   "injected-hang,injected-fail,smi-query,smi-xml,smi-topo,smi-nvlink,scan-json,"
                                   "compare-scan", FAKE_NVIDIA_SMI_HANG="nvlink")
    wall = time.monotonic() - t0
    steps = _steps(summary)
    hang = steps["injected-hang"]
    assert hang["verdict"] == "timeout" and 2 <= hang["seconds"] < 2 + gpu_check.GRACE_S + 1.5
    assert "killed with its process group" in hang["line"]
    assert steps["smi-nvlink"]["verdict"] == "timeout" and steps["smi-nvlink"]["stdout"].endswith(".partial")
    assert _alive_with("time.sleep(600)") == [] and _alive_with(str(FAKE / "nvidia-smi")) == []
    fail = steps["injected-fail"]
    assert fail["verdict"] == "failed" and fail["line"] == "exit 1: RuntimeError: injected failure"
    assert fail["tracebacks"] == 1
    tb = (folder / "tracebacks.md").read_text()
    assert "## injected-fail" in tb and "RuntimeError: injected failure" in tb and "Traceback (most recent" in tb
    # later steps ran and judged what they had: the cut nvlink capture is not read as one
    assert steps["compare-scan"]["verdict"] == "ok" and steps["scan-json"]["verdict"] == "ok"
    comparison = json.loads((folder / "comparison.json").read_text())
    assert comparison["sources"][cmp.SMI_NVLINK].startswith("missing")
    for name in ("injected-hang", "injected-fail", "smi-nvlink"):
        assert sum(1 for ln in proc.stdout.splitlines() if f"] {name} " in ln) == 1
    assert wall < 60 and proc.returncode == 1


@pytest.mark.serial  # a wall-time bound: run alone, after the parallel part
@pytest.mark.slow
def test_the_budget_is_a_hard_bound(tmp_path):
    """A hang with a long timeout inside a small budget: the hang gets what the budget leaves
    after half of what the later steps expect, the check ends inside its budget (plus the
    grace of one kill), and what did not fit is recorded as not started."""
    t0 = time.monotonic()
    proc, summary, folder = _check(tmp_path, "--sim", "h100-pcie-1gpu", "--budget", "16", "--inject", "hang",
                                   "--only", "injected-hang,smi-query,smi-xml,scan-json,compare-scan,bench-self")
    wall = time.monotonic() - t0
    steps = _steps(summary)
    assert steps["injected-hang"]["verdict"] == "timeout" and steps["injected-hang"]["timeout_s"] < 11
    assert steps["smi-query"]["verdict"] == "ok"  # after the hang, still run
    assert wall < 16 + gpu_check.GRACE_S + 4
    assert any(s["line"].startswith("budget spent") for s in summary["steps"]) or \
        all(steps[n]["verdict"] != "skipped" for n in ("smi-xml", "scan-json"))
    assert _alive_with("time.sleep(600)") == []


@pytest.mark.slow
def test_more_than_one_gpu_adds_the_pair_steps(tmp_path):
    """On a machine of several GPUs (the 4-GPU sim here) the pair steps run and the one-GPU-only
    ones say why not; the renumbering step needs real CUDA devices."""
    proc, summary, folder = _check(tmp_path, "--sim", "pcie-4gpu", "--only",
                                   "smi-query,scan-json,numerics-refusal,bench-pairs,bench-remapped,cluster-one-rank")
    steps = _steps(summary)
    assert steps["bench-pairs"]["verdict"] == "ok", steps["bench-pairs"]
    assert "3 pair(s)" in steps["bench-pairs"]["line"]  # one per class: PIX, PXB, SYS
    run = json.loads((folder / "bench-pairs.json").read_text())
    assert sorted(tuple(p["gpus"]) for p in run["pairs"]) == sorted(
        tuple(map(int, p.split(","))) for p in gpu_check._first_pairs(SimpleNamespace(path=folder.joinpath)))
    assert steps["numerics-refusal"]["verdict"] == "skipped" and "4 GPUs" in steps["numerics-refusal"]["line"]
    assert steps["cluster-one-rank"]["verdict"] == "skipped"
    assert steps["bench-remapped"]["verdict"] == "skipped" and "simulated" in steps["bench-remapped"]["line"]


def test_ratio_per_direction_against_the_bare_loop(tmp_path):
    """gputopo GB/s over the bare loop's, per direction at the largest size (target 0.97), from
    constructed figures (no GPU here): d2d below target, h2d and d2h fine, a size only one side
    measured left out of the verdict."""
    run = tmp_path / "bench-self"
    run.mkdir()
    ours = {("self.h2d", 16 << 20): 50.0, ("self.h2d", 256 << 20): 52.0, ("self.d2h", 256 << 20): 53.0,
            ("self.d2d", 256 << 20): 1300.0, ("self.d2d", 1 << 20): 900.0}
    with open(run / "measurements.jsonl", "w") as f:
        for (test, size), gbps in ours.items():
            f.write(json.dumps({"test": test, "gpus": [0], "size_bytes": size, "timing": "cuda-events", "wrong": 0,
                                "derived": {"algbw_gbps": gbps}}) + "\n")
    (tmp_path / cmp.BENCH_SELF_JSON).write_text(json.dumps({"run_dir": str(run), "simulated": False}))
    bare = {("self.h2d", 16 << 20): 40.0, ("self.h2d", 256 << 20): 52.5, ("self.d2h", 256 << 20): 53.0,
            ("self.d2d", 256 << 20): 1400.0}
    (tmp_path / cmp.CUDA_SELF_JSON).write_text(json.dumps({
        "hbm_theoretical_gbps": 3352.0, "hbm_published_gbps": 3350.0, "hbm_theoretical_source": "constructed",
        "results": [{"test": t, "size_bytes": s, "gbps": g, "bit_exact_after": True} for (t, s), g in bare.items()]}))
    doc = cmp.compare_ratio(tmp_path)
    v = doc["verdicts"]
    assert v["self.h2d"]["verdict"] == "ok" and v["self.h2d"]["size_bytes"] == 256 << 20
    assert abs(v["self.h2d"]["ratio"] - 52.0 / 52.5) < 1e-9
    assert v["self.d2h"]["verdict"] == "ok" and v["self.d2h"]["ratio"] == 1.0
    assert v["self.d2d"]["verdict"] == "below-target" and abs(v["self.d2d"]["ratio"] - 1300 / 1400) < 1e-9
    small = next(r for r in doc["rows"] if r["test"] == "self.d2d" and r["size_bytes"] == 1 << 20)
    assert small["bare_gbps"] is None and small["ratio"] is None
    assert cmp.main(["ratio", str(tmp_path)]) == 1
    md = (tmp_path / "self-ratio.md").read_text()
    assert "below-target: 0.929 at 256 MiB" in md and "HBM: 3352.0 GB/s" in md


@pytest.mark.slow
def test_sigterm_to_the_check_stops_the_step_and_keeps_the_folder(tmp_path):
    """The machine's time runs out: SIGTERM to the check kills the step in progress with its
    group, and the folder and archive say where it stopped (exit 130)."""
    proc = subprocess.Popen([sys.executable, str(TOOLS / "gpu_check.py"), "--nvidia-smi", str(FAKE / "nvidia-smi"),
                             "--reports", str(tmp_path / "reports"), "--sim", "h100-pcie-1gpu", "--inject", "hang",
                             "--only", "smi-query,injected-hang,scan-json"], cwd=REPO, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not _alive_with("time.sleep(600)") and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.terminate()
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    (folder,) = [p for p in (tmp_path / "reports").iterdir() if p.is_dir()]
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["interrupted"] and not summary["complete"]
    assert _steps(summary)["injected-hang"]["verdict"] == "interrupted"
    assert (folder.parent / (folder.name + ".tar.gz")).is_file()
    assert _alive_with("time.sleep(600)") == []


def test_the_one_rank_nccl_all_reduce_is_verified_only_as_an_avg():
    """On NCCL a one-rank sum runs no kernel (ncclLaunchOneRank): a right buffer after it proves
    nothing, so the probe verifies only an AVG (a pre-multiplied sum NCCL does launch)."""
    import gpu_check_probe as probe

    def doc(op):
        return {"measurement": {"samples_s": [0.001], "wrong": 0, "timing": "cuda-events",
                                "derived": {"median_s": 0.001, "algbw_gbps": 67.1},
                                "extra": {"reduce_op": op, "ranks": 1}}}

    ok = probe.judged(doc("avg"), "cuda")
    assert ok["verified"] is True and ok["algbw_gbps"] is None and ok["reduce_op"] == "avg"
    bad = probe.judged(doc("sum"), "cuda")
    assert bad["verified"] is False and "runs no kernel" in bad["error"]
    assert probe.judged(doc("sum"), "cpu")["verified"] is True  # gloo: a sum, as asked
    assert probe.judged({"error": "worker could not start"}, "cuda")["verified"] is False
