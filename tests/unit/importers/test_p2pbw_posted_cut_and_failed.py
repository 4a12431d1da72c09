"""`import p2pbw` on two posted p2pBandwidthLatencyTest outputs (tinygrad/open-gpu-kernel-modules
issues 16 and 44, sources in tests/fixtures/README.md):

- a paste that starts mid-title ("directional P2P=Disabled ...", no banner, no Device lines) and
  ends in the sample's own ``Cuda failure ...: 'mapping of buffer object failed'``: it was refused
  as "not p2pBandwidthLatencyTest output"; it now imports, the cut title is read by the order the
  sample prints its matrices in (and says so), the failure is a ``crash`` (error), and GPU 6, slow
  with every peer on copies staged through host memory, is an ``outlier`` by itself;
- a paste that ends inside a figure ("924" of "924.xx"): the value is left out and said, not read
  as 924 GB/s.
"""

from __future__ import annotations

import json

from gputopo.importers.p2pbw_import import read_p2pbw
from helpers.cli import gputopo_here
from helpers.paths import FIXTURES

P2P = FIXTURES / "p2pbw"
FAILED = P2P / "tinygrad-16_7x4090_large-bar-off_gpu6-2.8GBps_cuda-failure-mapping-buffer_excerpt.txt"
CUT = P2P / "tinygrad-44_2x4090_patched-driver_p2p-on-but-6.6GBps-like-staged_cut_excerpt.txt"


def _import(tmp_path, path):
    out = tmp_path / "run"
    ran = gputopo_here("import", "p2pbw", str(path), "--out", str(out), "--no-history",
                       env={"GPUTOPO_HISTORY": str(tmp_path / "h.sqlite")})
    assert ran.returncode == 0, ran.stderr
    return json.loads((out / "summary.json").read_text())


def test_a_title_cut_at_its_start_is_read_by_the_samples_order_and_said():
    out = read_p2pbw(str(FAILED))
    staged = out.matrix("unidirectional p2p-disabled bandwidth")
    assert staged is not None and staged.complete and len(staged.cells) == 7
    assert staged.cells[0][6] == 2.83 and staged.cells[6][6] == 287.68
    assert any("read as Unidirectional" in n for n in out.notes)


def test_the_samples_cuda_failure_is_a_crash_naming_the_step_it_stopped_at(tmp_path):
    out = read_p2pbw(str(FAILED))
    (failure,) = out.failures
    assert failure["testcase"].startswith("Unidirectional P2P=Enabled Bandwidth (P2P Writes)")
    assert "mapping of buffer object failed" in failure["message"] and failure["line"] == 11
    summary = _import(tmp_path, FAILED)
    assert summary["verdict"] == "broken"
    (crash,) = [f for f in summary["findings"] if f["kind"] == "crash"]
    assert crash["severity"] == "error" and "mapping of buffer object failed" in crash["message"]
    assert "nvbandwidth" not in crash["cause"]
    assert any("Resizable BAR" in r for r in crash["remedies"])


def test_a_gpu_slow_with_every_peer_on_staged_copies_is_an_outlier_by_itself(tmp_path):
    summary = _import(tmp_path, FAILED)
    (gpu6,) = [f for f in summary["findings"] if f["kind"] == "outlier"]
    assert gpu6["gpus"] == [6] and gpu6["severity"] == "warning"
    (w,) = gpu6["evidence"]["measured"]
    assert w["series"] == "p2p.staged" and w["pairs"] == 6 and w["max_gbps_with_gpu"] < 3 < 20 < w["median_gbps_without_gpu"]


def test_an_output_that_ends_inside_a_figure_leaves_the_figure_out_and_says_so(tmp_path):
    out = read_p2pbw(str(CUT))
    bidir = out.matrix("bidirectional p2p-enabled bandwidth writes")
    assert bidir is not None and bidir.cells == [[1016.92, 12.88], [12.88]] and not bidir.complete
    assert any("ends in the middle of a figure ('924'" in p for p in out.problems)
    summary = _import(tmp_path, CUT)
    assert summary["verdict"] != "ok"
    assert any(f["kind"] == "incomplete-data" and "'924'" in f["message"] for f in summary["findings"])


def test_two_runs_pasted_into_one_file_are_refused_at_the_second(tmp_path):
    """Two runs of the sample in one file (a log of a loop) listed 8 devices for 4 GPUs, and the
    report's figures failed on a GPU with no position (an internal error, exit 4): now a one-line
    refusal naming the line where the second run begins, banner or not."""
    from helpers.cli import refused

    one = (P2P / "stelline_asus-esc8000a_4xrtx6000ada.txt").read_text()
    n = one.count("\n")
    both = tmp_path / "two-runs.txt"
    both.write_text(one + one)
    banner = next(k for k, ln in enumerate(one.splitlines(), 1) if ln.startswith("[P2P (Peer-to-Peer)"))
    line = refused("import", "p2pbw", str(both), "--out", str(tmp_path / "run"), "--no-history")
    assert f"two-runs.txt:{n + banner}: a second p2pBandwidthLatencyTest output begins here" in line
    # the second run's banner cut off: its first device line, listed again, is where it begins
    cut = tmp_path / "cut.txt"
    cut.write_text(one + "".join(ln + "\n" for ln in one.splitlines() if not ln.startswith("[P2P (Peer")))
    first_device = next(k for k, ln in enumerate(one.splitlines(), 1) if ln.startswith("Device: 0"))
    line = refused("import", "p2pbw", str(cut), "--out", str(tmp_path / "run2"), "--no-history")
    assert f"cut.txt:{n + first_device - (1 if banner < first_device else 0)}: " in line
    assert "Device: 0 listed again" in line
    assert read_p2pbw(str(P2P / "stelline_asus-esc8000a_4xrtx6000ada.txt")).second_run is None
