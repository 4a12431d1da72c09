"""`import nccl-tests` says what a log leaves out instead of guessing it or refusing the log (issue 37).

- rows without their header (`kubectl logs --tail`, a table pasted alone) are read by their
  column count; the collective and the rank count come from busbw / algbw where the collective
  table's factors leave one answer (1.75 is all_reduce on 8 ranks), else the import is refused
  in one line naming --op and --ranks; what was inferred is said;
- a run with `validation: 0` (-c 0) checked no data: an info finding says so, and no #wrong
  reads as verified;
- an old log that prints only a bus number ("[0x10]") records that bus, not a made-up address;
- rccl-tests (AMD's fork) reads as nccl-tests and names RCCL.

Posted outputs: tests/fixtures/nccl-tests (sources in its README). Files named written_* in
tests/data/nccl_tests are WRITTEN variants (their first lines say so), not posted outputs.
"""

from __future__ import annotations

import json
import shutil

import pytest

from gputopo.errors import InputFileError
from gputopo.importers.nccl_tests import parse_nccl_tests, parse_nccl_tests_file
from gputopo.report.summary import summarize_dir
from helpers.cli import gputopo_here
from helpers.paths import DATA, FIXTURES

NT = FIXTURES / "nccl-tests"
NOHEADER = NT / "oci-hpc-oke_gb200-2node-mnnvl_all_reduce_tail20_noheader.txt"
WRITTEN = DATA / "nccl_tests"


def _import(tmp_path, path, *words):
    out = tmp_path / "run"
    ran = gputopo_here("import", "nccl-tests", str(path), "--out", str(out), "--no-history", *words,
                       env={"GPUTOPO_HISTORY": str(tmp_path / "h.sqlite")})
    return ran, out


def _rows_only(tmp_path, source, name="pasted.txt"):
    """A log's result rows alone, as a table pasted without its header (a WRITTEN variant of a
    posted or written log: its '#' lines removed)."""
    path = tmp_path / name
    path.write_text("".join(ln for ln in source.read_text().splitlines(keepends=True) if not ln.lstrip().startswith("#")))
    return path


# ---------------------------------------------------------------------------------- rows without a header

def test_the_posted_gb200_tail_without_header_is_read(tmp_path):
    """Posted (oracle-quickstart/oci-hpc-oke): 33 rows of `kubectl logs --tail`, no header; was
    refused with "no nccl-tests result rows found"."""
    (log,) = parse_nccl_tests_file(NOHEADER)
    assert len(log.rows) == 33 and log.op == "all_reduce" and log.problems == []
    assert log.columns == ["size", "count", "type", "redop", "root"] + ["time", "algbw", "busbw", "#wrong"] * 2
    last = log.rows[-1]
    assert (last.size_bytes, last.out_of_place.time_us, last.out_of_place.busbw_gbps, last.in_place.busbw_gbps) == \
        (34359738368, 70981.0, 847.12, 847.42)
    assert log.n_ranks == 8 and log.avg_busbw_gbps == 260.778 and log.out_of_bounds == 0
    assert any("no column header" in s and "13 columns" in s for s in log.inferred)
    assert any("8 ranks" in s and "1.75" in s for s in log.inferred)


def test_a_tail_named_by_nothing_gets_collective_and_ranks_from_busbw_and_says_so(tmp_path):
    path = tmp_path / "worker-0.log"  # no op in the name: the figures alone tell it
    shutil.copy(NOHEADER, path)
    ran, out = _import(tmp_path, path)
    assert ran.returncode == 0, ran.stderr
    assert "verdict: not-judged" in ran.stdout and "peak busbw 847 GB/s" in ran.stdout
    assert "inferred: collective all_reduce on 8 ranks" in ran.stdout
    assert "not known: which GPUs and hosts ran it" in ran.stdout
    doc = [e for e in json.loads((out / "imported.json").read_text())["imports"] if e["tool"] in ("nccl-tests", "rccl-tests")][0]
    assert doc["op"] == "all_reduce" and doc["ranks"] == 8 and doc["ranks_from"] == "given or inferred"
    report = (out / "report.md").read_text()
    assert "inferred: collective all_reduce on 8 ranks" in report and "inferred: no column header" in report
    ms = summarize_dir(out).run.measurements
    assert len(ms) == 66 and all(m.busbw_factor == pytest.approx(1.75) and m.gpus == () for m in ms)


@pytest.mark.parametrize("source, fits", [
    # (n-1)/n, redop none, root -1, size = 4 x count x 4 B: all_gather or alltoall on 4 ranks
    (WRITTEN / "all_gather_2hosts_novalidation.txt", "all_gather, alltoall on 4 ranks"),
])
def test_rows_whose_ratio_fits_several_collectives_are_refused_naming_op_and_ranks(tmp_path, source, fits):
    path = _rows_only(tmp_path, source)  # WRITTEN variant: the posted/written log without its '#' lines
    ran, out = _import(tmp_path, path)
    assert ran.returncode == 2 and not out.exists()
    line = ran.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert fits in line and "--op" in line and "--ranks" in line


def test_a_ratio_of_1_with_redop_sum_root_minus_1_and_whole_buffers_is_all_reduce_on_2_ranks(tmp_path):
    # busbw / algbw = 1 alone fits broadcast, reduce and sendrecv on any number of ranks too; the
    # rows' redop (sum), root (-1) and size = count x 4 B leave all_reduce (test_nccl_tests_row_shape.py)
    path = _rows_only(tmp_path, NT / "autodl_2x2080ti_all_reduce.txt")
    ran, out = _import(tmp_path, path)
    assert ran.returncode == 0, ran.stderr
    assert "inferred: collective all_reduce on 2 ranks" in ran.stdout


def test_op_and_ranks_given_read_what_the_rows_cannot_tell(tmp_path):
    path = _rows_only(tmp_path, WRITTEN / "all_gather_2hosts_novalidation.txt")
    ran, out = _import(tmp_path, path, "--op", "all_gather", "--ranks", "4")
    assert ran.returncode == 0, ran.stderr
    doc = [e for e in json.loads((out / "imported.json").read_text())["imports"] if e["tool"] in ("nccl-tests", "rccl-tests")][0]
    assert doc["op"] == "all_gather" and doc["ranks"] == 4
    assert all(m.busbw_factor == pytest.approx(0.75) for m in summarize_dir(out).run.measurements)


def test_op_and_ranks_that_do_not_fit_the_figures_are_said(tmp_path):
    path = _rows_only(tmp_path, WRITTEN / "all_gather_2hosts_novalidation.txt")
    ran, out = _import(tmp_path, path, "--op", "all_gather", "--ranks", "8")
    assert ran.returncode == 0, ran.stderr
    assert "busbw/algbw = 0.75, but all_gather's factor on 8 ranks is 0.875" in (out / "report.md").read_text()


def test_ranks_that_contradict_the_rank_lines_are_refused(tmp_path):
    ran, _ = _import(tmp_path, NT / "autodl_2x2080ti_all_reduce.txt", "--ranks", "8")
    assert ran.returncode == 2 and "--ranks 8, but the log names 2 ranks" in ran.stderr


def test_a_collective_known_but_its_rank_count_not_is_said():
    """WRITTEN, shaped like the -c 0 all_reduce on 256 GPUs of NVIDIA/nccl-tests issue 78 (old
    'error' column printing N/A): busbw/algbw = 1.992 is all_reduce's on ~230-260 ranks only."""
    text = ("    33554432       8388608   float     sum   1464.2   22.92   45.65    N/A   1458.1   23.01   45.84    N/A\n"
            "    67108864      16777216   float     sum   2659.1   25.24   50.28    N/A   3014.6   22.26   44.35    N/A\n")
    (log,) = parse_nccl_tests(text, source="job.out")
    assert log.op == "all_reduce" and log.rank_count is None
    assert any("collective all_reduce" in s for s in log.inferred)
    assert any(s.startswith("the number of ranks") and "--ranks" in s for s in log.unknown)
    assert not log.validated  # every #wrong N/A: nothing checked


def test_rows_in_a_layout_nccl_tests_never_prints_are_still_refused():
    with pytest.raises(InputFileError, match="no nccl-tests result rows"):
        parse_nccl_tests("1 2 3 4 5 6 7\n8 9 10 11 12 13 14\n", source="numbers.txt")


# ---------------------------------------------------------------------------------- validation: 0

def test_validation_off_is_said_and_no_wrong_count_reads_as_verified(tmp_path):
    """WRITTEN (tests/data/nccl_tests/all_gather_2hosts_novalidation.txt): `validation: 0`, #wrong
    N/A. Was "verdict: ok (no findings)" with "#wrong 0" in the tables."""
    ran, out = _import(tmp_path, WRITTEN / "all_gather_2hosts_novalidation.txt")
    assert ran.returncode == 0, ran.stderr
    s = summarize_dir(out)
    (f,) = [f for f in s.findings if f.kind == "not-verified"]
    assert f.severity == "info" and "not verified" in f.message and "validation: 0" in f.message
    assert f.evidence["integrity"] == "not measured"
    assert all(p.wrong_or_none is None for p in s.pairs)  # the group 0-3: "-", not "#wrong 0"
    assert json.loads((out / "summary.json").read_text())["groups"][0]["wrong"] is None
    assert "not checked (validation off)" in (out / "report.md").read_text()
    assert s.verdict == "not-judged" and "verdict: not-judged (1 info)" in ran.stdout


def test_check_does_not_pass_the_integrity_of_an_unverified_run(tmp_path):
    """`check` with `no_corruption` passed "0 wrong elements" on a validation: 0 import."""
    from gputopo.check.rules import PASSED, SKIPPED
    from gputopo.check.verdict import run_check

    ran, out = _import(tmp_path, WRITTEN / "all_gather_2hosts_novalidation.txt")
    spec = tmp_path / "spec.toml"
    spec.write_text("[integrity]\nno_corruption = true\n")
    outcomes = [o for o in run_check(spec, out).outcomes if o.name.startswith("integrity.no_corruption")]
    assert outcomes and all(o.status == SKIPPED for o in outcomes) and not any(o.status == PASSED for o in outcomes)
    assert "not verified" in outcomes[0].message


def test_validation_off_under_the_old_error_column_is_said():
    """WRITTEN, with the old header of NVIDIA/nccl-tests issue 78's -c 0 run: 'error' column, N/A."""
    text = ("#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error\n"
            "    33554432       8388608   float     sum   1464.2   22.92   45.65    N/A   1458.1   23.01   45.84    N/A\n")
    (log,) = parse_nccl_tests(text, source="all_reduce.txt")
    assert not log.validated
    (log,) = parse_nccl_tests(text.replace("N/A", "2e-06"), source="all_reduce.txt")
    assert log.validated  # a printed max error: the data was checked


def test_a_validated_run_has_no_such_finding(tmp_path):
    ran, out = _import(tmp_path, NT / "autodl_2x2080ti_all_reduce.txt")
    s = summarize_dir(out)
    assert not [f for f in s.findings if f.kind == "not-verified"]
    assert [p.wrong_or_none for p in s.pairs] == [0]


# ---------------------------------------------------------------------------------- bus numbers alone

def test_a_bare_bus_number_is_recorded_as_a_bus_not_an_address(tmp_path):
    """Posted (aws-samples/aws-efa-eks): rank lines print "[0x10]" (two GPUs of each PCIe switch
    print the same bus). Was written as "00000000:10:00.0", a fact the log never gave."""
    ran, out = _import(tmp_path, NT / "aws-efa-eks_p4d-2node-16gpu_all_reduce_tagoutput.txt")
    assert ran.returncode == 0, ran.stderr
    topo = json.loads((out / "topology.json").read_text())
    bus = topo["gpus"][0]["pci_bus_id"]
    assert isinstance(bus, dict) and "bus 0x10 (domain, device and function unknown)" in bus["not_available"]
    for name in ("topology.json", "imported.json", "summary.json", "report.md"):
        assert "10:00.0" not in (out / name).read_text(), name
    devices = [e for e in json.loads((out / "imported.json").read_text())["imports"] if e["tool"] in ("nccl-tests", "rccl-tests")][0]["devices"]
    assert devices[0]["bus_id"] == "0x10" and devices[0]["pci"] == "bus 0x10 (domain, device and function unknown)"


def test_a_full_bus_id_is_still_recorded(tmp_path):
    ran, out = _import(tmp_path, NT / "autodl_2x2080ti_all_reduce.txt")
    topo = json.loads((out / "topology.json").read_text())
    assert [g["pci_bus_id"] for g in topo["gpus"]] == ["00000000:B4:00.0", "00000000:B5:00.0"]


# ---------------------------------------------------------------------------------- rccl-tests

def test_rccl_tests_reads_as_nccl_tests_and_names_rccl(tmp_path):
    """WRITTEN in rccl-tests' layout: "rccl-tests: Version ...", rank lines without Group and
    with a function ("[0000:05:00.0]"), RCCL's "RCCL version :" / "HIP version" lines."""
    ran, out = _import(tmp_path, WRITTEN / "written_rccl-tests_2x8mi300x_all_reduce.txt")
    assert ran.returncode == 0, ran.stderr
    assert "rccl-tests all_reduce (written_rccl-tests_2x8mi300x_all_reduce.txt, RCCL 2.22.3-HEAD:0abc123)" in ran.stdout
    run = json.loads((out / "run.json").read_text())
    assert run["options"]["library"] == "RCCL" and run["options"]["tool"] == "rccl-tests"
    doc = [e for e in json.loads((out / "imported.json").read_text())["imports"] if e["tool"] in ("nccl-tests", "rccl-tests")][0]
    assert (doc["tool"], doc["library"], doc["nccl_version"], doc["nccl_tests_version"], doc["ranks"]) == \
        ("rccl-tests", "RCCL", "2.22.3-HEAD:0abc123", "develop:1a2b3c4", 16)
    assert doc["platform"] == {"HIP version": "6.4.43484-aaaa", "ROCm version": "6.4.2.0-120-bbbb"}
    assert "(rccl-tests, RCCL 2.22.3-HEAD:0abc123)" in (out / "report.md").read_text()
    assert summarize_dir(out).verdict == "not-judged"  # 2 x 8 MI300X: no published figure applies


def test_the_newer_rccl_tests_version_line():
    (log,) = parse_nccl_tests_file(WRITTEN / "written_rccl-tests_newer_header_broadcast.txt")
    assert (log.tool, log.library, log.version, log.nccl_headers, log.nccl_library, log.op) == \
        ("rccl-tests", "RCCL", "2.17.9-develop:0f0f0f0f0f", 22803, 22803, "broadcast")


def test_an_nccl_tests_log_names_nccl_only_where_it_prints_it():
    (log,) = parse_nccl_tests_file(NT / "aws-efa-eks_p4d-2node-16gpu_all_reduce_tagoutput.txt")
    assert (log.tool, log.library) == ("nccl-tests", "NCCL")
    (log,) = parse_nccl_tests_file(NT / "autodl_2x2080ti_all_reduce.txt")
    assert (log.tool, log.library) == ("nccl-tests", None)
    (log,) = parse_nccl_tests_file(WRITTEN / "all_gather_2hosts_novalidation.txt")  # "nccl-library=22703"
    assert (log.tool, log.library, log.nccl_library) == ("nccl-tests", "NCCL", 22703)


def test_the_collective_table_factors_decide_what_fits():
    from gputopo.importers.nccl_tests import fitting

    assert fitting((1.7499, 1.7501)) == {"all_reduce": [8]}
    assert set(fitting((0.8749, 0.8751))) == {"all_gather", "reduce_scatter", "alltoall", "scatter", "gather"}
    one = fitting((0.9999, 1.0001), ranks=4)
    assert set(one) == {"broadcast", "reduce", "sendrecv"}  # hypercube prints 1 too: its rows never tell it
