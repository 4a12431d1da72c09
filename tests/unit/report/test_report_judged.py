"""What a verdict judged (gputopo/report/judged.py, issue 46): every series records its basis,
``ok`` needs something judged, a run that measured but judged nothing is ``not-judged`` on every
surface (terminal, report.md, summary.json, diff, check, export), and what an import could not read
is coverage (info, "not read"), never what makes it ``degraded``.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest_report import measurements, seed_topology, write_run
from helpers.cli import gputopo_here
from helpers.paths import FIXTURES

from gputopo.check.junit import junit_xml
from gputopo.check.rules import FAILED, NOT_JUDGED_RULE, SKIPPED
from gputopo.check.spec import parse_spec
from gputopo.check.verdict import check_summary
from gputopo.report.diff import diff_summaries
from gputopo.report.headline import headlines
from gputopo.report.judged import series_basis, series_key
from gputopo.report.outputs.notes import verdict_line
from gputopo.report.render import render_run
from gputopo.report.run_folder import load_run
from gputopo.report.summary import summarize, summarize_dir

NCCL_290 = FIXTURES / "nccl-tests" / "nccl-tests-290_2x8xh100-ndr_all_reduce_srun-label_validation0_155GBps-low.txt"
UCX_CUT = FIXTURES / "ibstat" / "ucx-9520_ibv-devinfo_cx5_ib_cut-in-mlx5_1_excerpt.txt"
PERFTEST_CUT = FIXTURES / "perftest" / "perftest-342_roce_ib-write-bw_gbits_rdma-cm_cut-mid-row_excerpt.txt"


def _one_pair_per_class(meas):
    """The measurements of the first pair of each link class: no like GPUs to compare a series
    with (report/like_gpus.py needs 3 pairs of a class)."""
    first = {}
    for m in meas:
        first.setdefault(m.link_class, m.gpus)
    return [m for m in meas if first[m.link_class] == m.gpus]


def _unjudged_run(tmp_path: Path) -> Path:
    """A healthy seed machine measured only by all_reduce on one pair of each PCIe class: no
    published figure, no theoretical rate for a collective, no like pairs, no numerics."""
    meas = _one_pair_per_class([m for m in measurements() if m.test == "collective.all_reduce"
                                and m.link_class in ("NODE", "SYS")])
    assert meas
    return write_run(tmp_path / "run", [], meas=meas, nums=[])


def _partly_judged_run(tmp_path: Path, faults=()) -> Path:
    """Peer copies of every pair (judged against the link's rate) and all_reduce on one pair of
    each class (nothing to judge it against)."""
    meas = measurements(faults)
    keep = [m for m in meas if m.test == "p2p.copy"]
    keep += _one_pair_per_class([m for m in meas if m.test == "collective.all_reduce"])
    return write_run(tmp_path / "run", faults, meas=keep, nums=[])


def _import(tmp_path: Path, kind: str, path: Path, *extra) -> tuple[str, dict]:
    out = tmp_path / "run"
    rc, stdout, err = gputopo_here("import", kind, path, "--out", out, "--no-history", *extra)
    assert rc == 0, err
    return stdout, json.loads((out / "summary.json").read_text())


def test_a_run_that_measured_but_judged_nothing_is_not_judged_not_ok(tmp_path):
    """The old code's "measured and nothing found => ok" (summary.measured_verdict) said ok."""
    s = render_run(_unjudged_run(tmp_path))
    assert s.verdict == "not-judged"
    line = verdict_line(s)
    assert line.startswith("verdict: not-judged") and "series measured, none judged" in line
    doc = json.loads((s.run.path / "summary.json").read_text())
    assert doc["verdict"] == "not-judged" and doc["judged"]["series_judged"] == 0
    assert doc["judged"]["series"] == doc["judged"]["series_not_judged"] > 0
    assert all(h["judged_basis"]["basis"] == "none" and h["judged_basis"]["why"] for h in doc["headlines"])
    md = (s.run.path / "report.md").read_text()
    assert "verdict: not-judged" in md and "OK:" not in md  # no green "OK" under a verdict that judged nothing
    html = (s.run.path / "report.html").read_text()
    assert 'class="not-judged" id="verdict"' in html


def test_not_judged_exits_0_and_the_terminal_says_it(tmp_path):
    d = _unjudged_run(tmp_path)
    rc, out, err = gputopo_here("report", d)
    assert rc == 0, err
    assert "verdict: not-judged" in out and "none judged" in out


def test_a_partly_judged_run_keeps_the_judged_verdict_and_says_what_was_not(tmp_path):
    s = render_run(_partly_judged_run(tmp_path))
    j = s.judged
    assert s.verdict == "ok" and 0 < j.series_judged < len(j.series)
    assert j.bases()["theoretical"] == j.series_judged  # the peer copies, against the link's rate
    line = verdict_line(s)
    assert f"ok for {j.series_judged} of {len(j.series)} series; {j.series_not_judged} not judged: " in line
    doc = json.loads((s.run.path / "summary.json").read_text())
    assert doc["verdict_detail"].startswith(f"ok for {j.series_judged} of") and doc["partial"] is None
    assert doc["judged"]["not_judged"][0]["series"] > 0 and doc["judged"]["not_judged"][0]["why"]


def test_a_degraded_or_broken_run_says_what_was_not_judged_without_calling_it_ok(tmp_path):
    s = render_run(_partly_judged_run(tmp_path, ["corrupt-sys"]))
    assert s.verdict in ("broken", "degraded")
    assert "ok for" not in verdict_line(s) and "series not judged" in verdict_line(s)


def test_the_basis_of_each_series_is_one_function_that_takes_the_like_gpus_mapping(tmp_path):
    """The like-GPU rule (another module) gives series key -> the like GPUs it compared with."""
    run = load_run(_unjudged_run(tmp_path))
    heads = headlines(run.measurements, run.topology)
    key = series_key(heads[0])
    bases = series_basis(heads, run.topology, {key: "GPUs 0-7 of the same model, same test and size"})
    assert bases[key].basis == "peers" and "GPUs 0-7" in bases[key].text
    assert all(b.basis == "none" for k, b in bases.items() if k != key)
    s = summarize(run, peers={key: "GPUs 0-7"})
    assert s.verdict == "ok" and s.judged.bases() == {"peers": 1, "none": len(heads) - 1}


def test_the_history_is_a_basis_and_says_it_is_the_only_one(tmp_path):
    run = load_run(_unjudged_run(tmp_path))
    heads = headlines(run.measurements, run.topology)
    doc = {"drift": {"baseline_runs": [{"id": 1}, {"id": 2}],
                     "compared": [[h.series, list(h.gpus), h.direction] for h in heads]}}
    bases = series_basis(heads, run.topology, None, doc)
    assert {b.basis for b in bases.values()} == {"history"}
    assert "own past only (2 earlier runs" in next(iter(bases.values())).text


def test_multi_node_nccl_tests_far_below_its_nics_is_not_judged(tmp_path):
    """nccl-tests issue 290: 2 x 8 H100, 8x NDR per node, busbw ~40 % of what the NICs carry: the
    old code said ok (no reference applies, and "an unknown is not a problem")."""
    out, doc = _import(tmp_path, "nccl-tests", NCCL_290)
    assert doc["verdict"] == "not-judged" and "verdict: not-judged" in out
    assert doc["judged"]["series_judged"] == 0 and "link class unknown" in doc["verdict_detail"]


def test_a_cut_ibstat_excerpt_is_ok_for_what_was_read_and_says_what_was_not(tmp_path):
    """The old code: incomplete-data warning, verdict degraded, on a port that is Active."""
    out, doc = _import(tmp_path, "ibstat", UCX_CUT)
    assert doc["verdict"] == "ok"
    (f,) = [f for f in doc["findings"] if f["kind"] == "incomplete-data"]
    assert f["severity"] == "info"
    assert doc["judged"]["not_read"] and "not read: 1 part(s) of the input" in doc["verdict_detail"]
    assert "not read:" in out and "NOTE Data:" in out  # said on the terminal too, as a note


def test_a_perftest_excerpt_cut_mid_row_is_never_degraded_for_the_cut(tmp_path):
    _, doc = _import(tmp_path, "perftest", PERFTEST_CUT)
    assert doc["verdict"] != "degraded" and "incomplete-data:warning" not in {
        f"{f['kind']}:{f['severity']}" for f in doc["findings"]}


def test_gputopos_own_damaged_run_still_warns_and_fails_check(tmp_path):
    d = write_run(tmp_path / "run", [], truncate_last=True)
    s = summarize_dir(d)
    damaged = [f for f in s.findings if f.kind in ("incomplete-data", "invalid-data")]
    assert damaged and all(f.severity == "warning" for f in damaged)
    v = check_summary(parse_spec({"integrity": {"no_corruption": True}}, "spec.toml"), s)
    assert not v.passed and any(o.rule == "run.readable" for o in v.failed)


def test_diff_ok_to_not_judged_is_a_note_not_a_regression(tmp_path):
    a = summarize_dir(write_run(tmp_path / "a", []))
    b = summarize_dir(_unjudged_run(tmp_path / "b"))
    assert (a.verdict, b.verdict) == ("ok", "not-judged")
    d = diff_summaries(a, b)
    assert d.notes and d.notes[0].startswith("run verdict ok -> not-judged: B is not-judged")
    assert "not a regression" in d.notes[0] and "note: run verdict ok -> not-judged" in d.text()
    assert not d.verdicts_worse and d.to_json()["verdict"] == {"a": "ok", "b": "not-judged"}


def test_check_skips_what_nothing_judged_and_strict_fails_it(tmp_path):
    s = summarize_dir(_unjudged_run(tmp_path))
    lax = check_summary(parse_spec({"integrity": {"no_corruption": True}}, "spec.toml"), s)
    skipped = [o for o in lax.outcomes if o.rule == NOT_JUDGED_RULE]
    assert skipped and all(o.status == SKIPPED for o in skipped) and lax.passed
    assert "series not judged" in skipped[0].message
    assert "<skipped" in junit_xml(lax) and NOT_JUDGED_RULE in junit_xml(lax)
    strict = check_summary(parse_spec({"strict": True, "integrity": {"no_corruption": True}}, "spec.toml"), s)
    assert any(o.rule == NOT_JUDGED_RULE and o.status == FAILED for o in strict.outcomes) and not strict.passed


def test_check_counts_a_spec_rule_as_the_basis_of_the_pairs_it_judged(tmp_path):
    s = summarize_dir(_unjudged_run(tmp_path))
    spec = parse_spec({"busbw": {"all_reduce": {"SYS": 1, "NODE": 1}}}, "spec.toml")
    v = check_summary(spec, s)
    assert not [o for o in v.outcomes if o.rule == NOT_JUDGED_RULE]  # the spec judged every pair


def test_the_seed_topology_keeps_its_story(tmp_path):
    """The demo's machine: broken on the PCIe pairs whatever is judged."""
    faults = ["corrupt-sys", "corrupt-node", "iommu", "acs", "nan-dp"]
    s = summarize_dir(write_run(tmp_path / "run", faults, topo=seed_topology(faults)))
    assert s.verdict == "broken" and "ok for" not in verdict_line(s)


def test_cluster_never_drains_for_not_judged(tmp_path):
    """drain.txt comes from findings whose kind drains; not-judged is a verdict, no finding."""
    from gputopo.model.finding_kinds import is_kind
    from gputopo.report.cluster_findings import drain_lines

    s = summarize_dir(_unjudged_run(tmp_path))
    assert s.verdict == "not-judged" and not is_kind("not-judged")
    assert drain_lines(s.findings) == []
