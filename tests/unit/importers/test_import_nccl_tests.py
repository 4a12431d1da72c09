"""`gputopo import nccl-tests LOG...`: nccl-tests text output -> Measurements -> a run folder.

The fixture in tests/fixtures (a real 2x RTX 2080 Ti all_reduce log) must import with its exact numbers.
nccl-tests prints algbw/busbw rounded to 2 decimals and times to 4-6 significant digits, so
figures recomputed from the time match the printed ones only within that rounding: the
tolerance below is 0.005 GB/s plus the time's relative rounding (at most 5e-4).
"""

from __future__ import annotations

import json
import re

import pytest

from gputopo.errors import InputFileError, UsageError
from gputopo.importers.run import run_import
from gputopo.importers.nccl_tests import (gpu_bus_id, log_measurements, parse_nccl_tests,
                                          parse_nccl_tests_file)
from gputopo.model import NotAvailable, is_value
from gputopo.model.bus_id import as_address, from_nccl_tests
from helpers.paths import DATA as TEST_DATA
from helpers.paths import FIXTURES, REPO

DATA = TEST_DATA / "nccl_tests"
FIXTURE_NAME = "autodl_2x2080ti_all_reduce.txt"


def _rounding_ok(computed: float, printed: float) -> bool:
    return abs(computed - printed) <= 0.005 + computed * 5e-4


@pytest.fixture
def fixture_log(fixtures_dir):
    path = fixtures_dir / "nccl-tests" / FIXTURE_NAME
    return path, parse_nccl_tests_file(path)


def test_fixture_parses_with_its_exact_numbers(fixture_log):
    path, logs = fixture_log
    assert len(logs) == 1
    log = logs[0]
    assert log.op == "all_reduce"  # from the file name: the classic header has no program line
    assert len(log.rows) == 28
    assert log.avg_busbw_gbps == 2.05774
    assert log.out_of_bounds == 0
    assert log.config["nGpus"] == 2 and log.config["iters"] == 20 and log.config["validation"] == 1
    assert [(r.rank, r.host, r.device, r.bus_id, r.name) for r in log.ranks] == [
        (0, "autodl-container-xxxxx", 0, "0000:b4:00", "NVIDIA GeForce RTX 2080 Ti"),
        (1, "autodl-container-xxxxx", 1, "0000:b5:00", "NVIDIA GeForce RTX 2080 Ti")]
    first, last = log.rows[0], log.rows[-1]
    assert (first.size_bytes, first.count, first.dtype, first.redop, first.root) == (8, 2, "float", "sum", -1)
    assert (last.size_bytes, last.out_of_place.time_us, last.out_of_place.busbw_gbps) == (1073741824, 268588.0, 4.00)
    assert (last.in_place.time_us, last.in_place.algbw_gbps, last.in_place.wrong) == (268461.0, 4.00, 0)
    peak, size, _ = log.peak
    assert peak == 4.00 and size == 1073741824


def test_fixture_measurements(fixture_log):
    _, (log,) = fixture_log
    ms = log_measurements(log)
    assert len(ms) == 56
    oop = [m for m in ms if not m.extra["in_place"]]
    inp = [m for m in ms if m.extra["in_place"]]
    assert len(oop) == len(inp) == 28
    m = oop[-1]
    assert m.test == "collective.all_reduce" and m.gpus == (0, 1) and m.size_bytes == 1073741824
    assert m.samples_s == [pytest.approx(0.268588)] and m.timing == "cuda-events" and m.fabric == "cuda"
    assert m.busbw_factor == 1.0  # 2(n-1)/n with n = 2
    assert m.extra["source"] == "nccl-tests"
    assert m.extra["printed"] == {"time_us": 268588.0, "algbw_gbps": 4.0, "busbw_gbps": 4.0, "wrong": 0}
    assert m.busbw_gbps == pytest.approx(3.9977, abs=1e-4)  # size / time, not the rounded 4.00
    for x in ms:
        p = x.extra["printed"]
        assert _rounding_ok(x.algbw_gbps, p["algbw_gbps"]), (x.size_bytes, x.algbw_gbps, p)
        assert _rounding_ok(x.busbw_gbps, p["busbw_gbps"])
        assert x.wrong == 0
    # "Avg bus bandwidth" is the mean busbw over all sizes and both placements, not the peak.
    printed = [x.extra["printed"]["busbw_gbps"] for x in ms]
    assert sum(printed) / len(printed) == pytest.approx(log.avg_busbw_gbps, abs=0.005)
    assert max(printed) == 4.00


def test_fixture_import_writes_a_run_folder(fixtures_dir, tmp_path):
    path = fixtures_dir / "nccl-tests" / FIXTURE_NAME
    res = run_import("nccl-tests", [path], out_dir=tmp_path / "run")
    d = res.run_dir
    for name in ("run.json", "topology.json", "measurements.jsonl", "imported.json", "summary.json",
                 "results.csv", "report.md", "report.html"):
        assert (d / name).is_file(), name
    info = json.loads((d / "run.json").read_text())
    assert info["simulated"] is False and info["fabric"] == "cuda" and info["source"] == "nccl-tests"
    logs = [e for e in json.loads((d / "imported.json").read_text())["imports"] if e["tool"] in ("nccl-tests", "rccl-tests")]
    assert logs[0]["avg_busbw_gbps"] == 2.05774 and logs[0]["peak_busbw_gbps"] == 4.0
    assert logs[0]["peak_size_bytes"] == 1073741824 and logs[0]["sizes"] == 28 and logs[0]["wrong"] == 0
    assert "not the peak" in logs[0]["avg_busbw_meaning"]
    s = res.summary
    assert s.findings == [] and s.verdict == "not-judged"  # no reference for it: measured, not judged (issue 46)
    pair = s.pair(0, 1)
    assert pair.series["collective.all_reduce"]["gbps"] == pytest.approx(3.9977, abs=1e-4)
    assert pair.series["collective.all_reduce (in-place)"]["gbps"] == pytest.approx(3.9996, abs=1e-4)
    assert [c.link_class for c in s.classes] == ["unknown"]
    topo = s.run.topology
    assert [g.pci_bus_id for g in topo.gpus] == ["00000000:B4:00.0", "00000000:B5:00.0"]
    md = (d / "report.md").read_text()
    assert "2.05774 (mean over all sizes)" in md and "SIMULATED" not in md
    with pytest.raises(UsageError, match="never overwritten"):
        run_import("nccl-tests", [path], out_dir=d)


def test_import_check_and_diff(fixtures_dir, tmp_path):
    from gputopo.check.init_spec import write_init_spec
    from gputopo.check.verdict import run_check
    from gputopo.report.diff import diff_runs

    path = fixtures_dir / "nccl-tests" / FIXTURE_NAME
    a = run_import("nccl-tests", [path], base_dir=tmp_path / "reports", render=False).run_dir
    b = run_import("nccl-tests", [path], base_dir=tmp_path / "reports", render=False).run_dir
    assert a != b and a.parent == b.parent
    assert not diff_runs(a, b).has_regressions
    spec = tmp_path / "spec.toml"
    spec.write_text("[busbw]\nall_reduce = 3.9\n[integrity]\nno_corruption = true\n")
    assert run_check(spec, a).passed
    spec.write_text("[busbw]\nall_reduce = 4.5\n")
    v = run_check(spec, a)
    assert not v.passed and v.failed[0].name == "busbw.all_reduce[0-1]"
    base = write_init_spec(a, tmp_path / "baseline.toml")
    assert "[busbw.all_reduce]" in base.read_text()
    assert run_check(base, b).passed


def test_import_with_a_topology_gets_link_classes(fixtures_dir, tmp_path):
    smi = pytest.importorskip("gputopo.probe.smi")
    topo = smi.topology_from_smi("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tSYS\t0-15\t0\n"
                                 "GPU1\tSYS\t X \t16-31\t1\n")
    res = run_import("nccl-tests", [fixtures_dir / "nccl-tests" / FIXTURE_NAME], out_dir=tmp_path / "run",
                            topology=topo, render=False)
    from gputopo.report.summary import summarize_dir

    s = summarize_dir(res.run_dir)
    assert [c.link_class for c in s.classes] == ["SYS"]
    assert all(m.link_class == "SYS" for m in s.run.measurements)


def test_newer_header_multi_host_and_na_cells():
    (log,) = parse_nccl_tests_file(DATA / "all_gather_2hosts_novalidation.txt")
    assert log.op == "all_gather" and log.program == "all_gather_perf_mpi"
    assert log.version == "2.17.1" and log.nccl_library == 22703
    assert log.config["unalign"] == 0 and log.config["validation"] == 0
    assert log.hosts == ["node-a", "node-b"] and len(log.ranks) == 4
    assert isinstance(log.rows[0].out_of_place.wrong, NotAvailable)
    ms = log_measurements(log)
    assert len(ms) == 6
    # Device numbers repeat across hosts: ranks are the GPU keys.
    assert all(m.gpus == (0, 1, 2, 3) for m in ms)
    assert all(m.busbw_factor == pytest.approx(0.75) for m in ms)
    assert all(m.wrong == 0 and "wrong_not_available" in m.extra for m in ms)
    for m in ms:
        assert _rounding_ok(m.busbw_gbps, m.extra["printed"]["busbw_gbps"])
    assert log.avg_busbw_gbps == 22.095


def test_mpi_prefixes_wrong_elements_and_out_of_bounds(tmp_path):
    (log,) = parse_nccl_tests_file(DATA / "h200_broadcast_mpi.log")
    assert log.op == "broadcast" and len(log.rows) == 2 and log.out_of_bounds == 3
    assert log.rows[1].root == 0 and log.rows[1].out_of_place.wrong == 1024
    res = run_import("nccl-tests", [DATA / "h200_broadcast_mpi.log"], out_dir=tmp_path / "run")
    corrupt = [f for f in res.summary.findings if f.kind == "corrupt"]
    assert len(corrupt) == 2  # the wrong elements, and nccl-tests' out-of-bounds count
    f = next(f for f in corrupt if "total_wrong" in f.evidence)
    assert f.gpus == [0, 1] and f.evidence["total_wrong"] == 1024
    assert res.summary.verdict == "broken"


def test_per_iteration_columns_cputime_timestamps_and_two_tests_in_one_file():
    logs = parse_nccl_tests_file(DATA / "per_iter_then_timestamps.txt")
    assert [lg.op for lg in logs] == ["all_reduce", "sendrecv"]
    ar, sr = logs
    assert ar.rows[1].out_of_place.per_iter == {"i_min": 32.5, "i_max": 34.0, "i_p99": 34.0, "i_cv%": 0.9}
    assert ar.avg_busbw_gbps == 57.7475
    m = log_measurements(ar)[0]
    assert m.busbw_factor == 1.0 and m.extra["per_iter"]["i_min"] == 19.8
    assert sr.time_kind == "cputime"
    (m,) = [x for x in log_measurements(sr) if not x.extra["in_place"]]
    assert m.test == "collective.sendrecv" and m.timing == "wall" and m.samples_s == [pytest.approx(12.5e-6)]
    assert m.figures_of == "gpus" and m.of_gpus  # the host's clock timed real GPUs: judged as theirs
    assert sr.rows[0].in_place.busbw_gbps == 83.22


def test_old_error_column_and_bad_rows_are_noted():
    (log,) = parse_nccl_tests_file(DATA / "old_error_column_reduce_scatter.txt")
    assert log.op == "reduce_scatter" and len(log.rows) == 1
    assert [r.bus_id for r in log.ranks] == ["0x06", "0x07", "0x0a", "0x0b"]
    assert log.ranks[0].group is None
    c = log.rows[0].out_of_place
    assert isinstance(c.wrong, NotAvailable) and c.per_iter["max_error"] == 0.0
    assert any("skipped row" in n for n in log.notes)
    ms = log_measurements(log)
    assert ms[0].gpus == (0, 1, 2, 3) and ms[0].busbw_factor == pytest.approx(0.75)


def test_op_must_be_known():
    text = (DATA / "h200_broadcast_mpi.log").read_text()
    # its rows tell broadcast (redop none, root 0, size = count x 4 B, busbw = algbw) ...
    (log,) = parse_nccl_tests(text, source="run.log")
    assert log.op == "broadcast" and any("redop none" in i for i in log.inferred)
    # ... which rows without their redop and root columns do not (all_reduce on 2 ranks fits too)
    bare = re.sub(r"(float)\s+none\s+0 ", r"\1 ", text).replace("redop    root ", "")
    with pytest.raises(InputFileError, match="--op"):
        parse_nccl_tests(bare, source="run.log")
    (log,) = parse_nccl_tests(text, source="run.log", op="broadcast")
    assert log.op == "broadcast"
    with pytest.raises(InputFileError, match="no nccl-tests result rows"):
        parse_nccl_tests("hello\n", source="x_all_reduce.txt")
    with pytest.raises(UsageError, match="unknown nccl-tests op"):
        run_import("nccl-tests", [DATA / "h200_broadcast_mpi.log"], op="allreducer_x", render=False)


def test_bus_id_normalization():
    # the rank line's spellings decode in model/bus_id.py (no wrapper beside it); a bare bus is
    # compared as device 0 of domain 0 but never recorded as the GPU's address
    assert as_address(from_nccl_tests("0000:b4:00")).nvml == "00000000:B4:00.0"
    assert as_address(from_nccl_tests("0x1b")).nvml == "00000000:1B:00.0"
    assert from_nccl_tests("weird") is None
    assert gpu_bus_id("0000:b4:00") == "00000000:B4:00.0"
    assert not is_value(gpu_bus_id("0x1b")) and "only the bus" in str(gpu_bus_id("0x1b").reason)


# --- bad logs: said, not "verdict: ok" (copies of the shared fixtures in tests/data) -------------

def _imported_findings(tmp_path, name, text, **kw):
    from gputopo.report.summary import summarize_dir

    log = tmp_path / name
    log.write_text(text)
    res = run_import("nccl-tests", [log], out_dir=tmp_path / "run", render=False, **kw)
    s = summarize_dir(res.run_dir)
    return s, [f for f in s.findings if f.kind in ("incomplete-data", "invalid-data")]


def test_a_log_cut_mid_row_is_said(tmp_path):
    lines = (FIXTURES / "nccl-tests" / FIXTURE_NAME).read_text().splitlines()
    cut = "\n".join(lines[:30] + [lines[30][:70]]) + "\n"  # stops inside the row of line 31
    s, found = _imported_findings(tmp_path, "cut_all_reduce.txt", cut)
    assert s.verdict == "not-judged"  # the cut is not read, not a fault (issue 46)
    messages = [f.message for f in found]
    assert any("line 31: row skipped (7 columns where the header has 13" in m for m in messages), messages
    assert any("no footer" in m and "after line 30" in m for m in messages), messages
    assert all(f.severity == "info" and f.kind == "incomplete-data" for f in found)


def test_a_log_without_its_footer_is_said(tmp_path):
    text = "\n".join(line for line in (FIXTURES / "nccl-tests" / FIXTURE_NAME).read_text().splitlines()
                     if not line.startswith(("# Out of bounds", "# Avg bus")))
    s, found = _imported_findings(tmp_path, "all_reduce.txt", text)
    assert [f.kind for f in found] == ["incomplete-data"] and "the test did not finish" in found[0].message
    assert found[0].severity == "info" and s.verdict == "not-judged"  # said, not a fault (issue 46)


def test_negative_figures_drop_their_row_and_are_said(tmp_path):
    text = (FIXTURES / "nccl-tests" / FIXTURE_NAME).read_text().replace(
        "  4209.7    3.99    3.99      0", "  4209.7   -3.99   -3.99     -2")
    s, found = _imported_findings(tmp_path, "all_reduce.txt", text)
    assert [f.kind for f in found] == ["invalid-data"]
    assert "line 31: negative or non-finite figure(s) (out-of-place algbw -3.99, out-of-place busbw -3.99, " \
           "out-of-place wrong -2): row dropped" in found[0].message
    assert len(s.run.measurements) == 54  # 27 rows x 2 placements
    assert all(m.extra["printed"]["busbw_gbps"] >= 0 for m in s.run.measurements)


def test_the_same_log_twice_is_refused(tmp_path):
    path = FIXTURES / "nccl-tests" / FIXTURE_NAME
    with pytest.raises(UsageError, match="is given twice: its measurements would be counted twice"):
        run_import("nccl-tests", [path, path], out_dir=tmp_path / "run", render=False)
    copy = tmp_path / "copy_all_reduce.txt"
    copy.write_bytes(path.read_bytes())
    with pytest.raises(UsageError, match="has the same content as"):
        run_import("nccl-tests", [path, copy], out_dir=tmp_path / "run", render=False)
    assert not (tmp_path / "run").exists()
    twice = tmp_path / "twice_all_reduce.txt"
    twice.write_text(path.read_text() * 2)
    with pytest.raises(UsageError, match=r"twice_all_reduce.txt holds the same all_reduce output twice "
                                         r"\(rows from line 10 and from line 50\)"):
        run_import("nccl-tests", [twice], out_dir=tmp_path / "run", render=False)
    assert not (tmp_path / "run").exists()


def test_a_topology_of_another_machine_is_refused(tmp_path):
    from gputopo.importers.user_inputs import load_topo_file

    log = FIXTURES / "nccl-tests" / FIXTURE_NAME
    eight = load_topo_file(str(FIXTURES / "topo" / "seed-8gpu-nv4-pairs.txt"))
    with pytest.raises(UsageError, match=r"has 8 GPU\(s\), but the log\(s\) ran on 2 \(device\(s\) 0, 1\)"):
        run_import("nccl-tests", [log], out_dir=tmp_path / "run", topology=eight, render=False)
    assert not (tmp_path / "run").exists()
    # a `gputopo scan --json` topology has models and bus ids: another model is seen
    from gputopo.model import topology_to_json
    from gputopo.sim.scan import scan_simulated

    two = scan_simulated("pcie-4gpu")
    doc = topology_to_json(two)
    doc["gpus"], doc["pairs"] = doc["gpus"][:2], [p for p in doc["pairs"] if p["gpus"] == [0, 1]]
    (tmp_path / "topo.json").write_text(json.dumps(doc))
    with pytest.raises(UsageError, match="GPU 0 is 'Tesla V100-PCIE-32GB', but .* ran on 'NVIDIA GeForce RTX 2080 Ti'"):
        run_import("nccl-tests", [log], out_dir=tmp_path / "run", topology=load_topo_file(str(tmp_path / "topo.json")),
                          render=False)
    # the logs' models but other bus ids (domain, bus, device compared; nccl-tests prints no
    # function): another machine; the same ones, in NVML's spelling, are this machine
    for g, name in zip(doc["gpus"], ("NVIDIA GeForce RTX 2080 Ti",) * 2):
        g["name"] = name
    doc["gpus"][0]["pci_bus_id"], doc["gpus"][1]["pci_bus_id"] = "00000000:B4:00.0", "00000000:B6:00.0"
    (tmp_path / "topo.json").write_text(json.dumps(doc))
    with pytest.raises(UsageError, match=r"GPU 1 is at 00000000:B6:00.0, but .* ran device 1 at 0000:b5:00"):
        run_import("nccl-tests", [log], out_dir=tmp_path / "run", topology=load_topo_file(str(tmp_path / "topo.json")),
                          render=False)
    doc["gpus"][1]["pci_bus_id"] = "00000000:B5:00.0"
    (tmp_path / "topo.json").write_text(json.dumps(doc))
    res = run_import("nccl-tests", [log], out_dir=tmp_path / "same", topology=load_topo_file(str(tmp_path / "topo.json")),
                            render=False)
    assert res.run_dir.exists()
    # the machine's own topology is taken
    own = load_topo_file(str(FIXTURES / "topo" / "autodl_2x2080ti_pix.txt"))
    res = run_import("nccl-tests", [log], out_dir=tmp_path / "ok", topology=own, render=False)
    assert res.run_dir.exists()


def test_nan_figures_drop_their_row_and_are_said(tmp_path):
    text = (FIXTURES / "nccl-tests" / FIXTURE_NAME).read_text().replace("  4209.7    3.99    3.99      0", "     nan     nan     inf      0")
    s, found = _imported_findings(tmp_path, "all_reduce.txt", text)
    assert [f.kind for f in found] == ["invalid-data"] and "non-finite" in found[0].message
    log = s.run.nccl_tests[0]
    assert log["peak_busbw_gbps"] == 4.0


def test_single_host_logs_of_two_hosts_are_refused_not_merged(fixtures_dir, tmp_path):
    """The sweep imported two machines' logs as one machine "A+B": host B's device 0 became
    host A's GPU 0 and its figures were averaged into A's pairs. Exit 2, one line, no folder."""
    from helpers.cli import gputopo_here

    path = fixtures_dir / "nccl-tests" / FIXTURE_NAME
    other = tmp_path / "other_all_reduce.txt"
    other.write_text(path.read_text().replace("autodl-container-xxxxx", "other-host-b"))
    repo = REPO
    proc = gputopo_here("import", "nccl-tests", path, other, "--out", tmp_path / "run", "--no-history",
                        cwd=repo)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"gputopo: error: {FIXTURE_NAME} ran on 'autodl-container-xxxxx' and other_all_reduce.txt on "
        "'other-host-b': one run folder holds one machine (their GPU numbers would be mixed); import each "
        "host's logs into its own folder (compare them with `gputopo diff`)"]
    assert not (tmp_path / "run").exists()
