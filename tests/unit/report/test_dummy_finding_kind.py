"""A new finding kind is one entry of the kind table (gputopo/model/finding_kinds.py) and one rule
registered in gputopo/report/rules.py: with no other edit, the scan and a run's report make it,
`gputopo place` degrades its GPU's pairs with its words, the report's pair rows carry it, a
cluster node with it is drained, it may come from history_findings.json, and docs/findings.md's
check asks for its row and lists it in the generated properties."""

from __future__ import annotations

import pytest

from gputopo.model import Finding, finding_kinds
from gputopo.model.finding_kinds import KIND_TABLE, KindSpec
from gputopo.report.cluster_findings import drain_lines
from gputopo.report.history_record import history_record
from gputopo.report.pairs import pair_rows
from gputopo.report.placement import rank, scan_states
from conftest_report import seed_topology
from helpers import finding_kinds_doc

DUMMY = KindSpec("dummy-link", "gpu", "scan", ("warning",), marks_pairs="all",
                 degrades="dummy link trouble", drains=True, history=True)


@pytest.fixture
def dummy_kind(monkeypatch):
    monkeypatch.setattr(finding_kinds, "KIND_TABLE", KIND_TABLE + (DUMMY,))


def _finding(**kw) -> Finding:
    return Finding("dummy-link", "warning", "GPU 3: dummy trouble", **kw)


def test_without_its_entry_the_kind_does_not_exist():
    with pytest.raises(ValueError, match="unknown finding kind"):
        _finding(gpus=[3])


def test_placement_degrades_the_pairs_of_its_gpu_with_its_words(dummy_kind):
    topo = seed_topology()
    states, _out = scan_states(topo, [_finding(gpus=[3])])
    degraded = {p for p, st in states.items() if st.state == "degraded"}
    assert degraded == {p for p in states if 3 in p} and len(degraded) == 7
    assert states[(2, 3)].reasons == ["GPU 3: dummy link trouble"]
    placed, _notes = rank(topo, 2, states, {}, set())
    assert placed and all(3 not in pl.gpus for pl in placed)


def test_the_pair_rows_carry_it_on_the_pairs_it_marks(dummy_kind):
    rows = {r.gpus: r for r in pair_rows(seed_topology(), [], [], {}, [_finding(gpus=[3])])}
    marked = sorted(k for k, r in rows.items() if r.findings)
    assert marked == [(0, 3), (1, 3), (2, 3), (3, 4), (3, 5), (3, 6), (3, 7)]


def test_a_cluster_node_with_it_is_drained(dummy_kind):
    assert drain_lines([_finding(evidence={"node": "n7"})]) == ["n7 gputopo: dummy-link node dummy trouble"]


def test_it_may_come_from_the_history(dummy_kind):
    doc = {"findings": [_finding(gpus=[3], evidence={"basis": "history"}).to_json()]}
    notes: list = []
    assert [f.kind for f in history_record(doc, notes).findings] == ["dummy-link"] and notes == []


def test_findings_page_asks_for_its_row_and_lists_it(dummy_kind):
    text = finding_kinds_doc.PAGE.read_text(encoding="utf-8")
    assert "dummy-link: 0 rows in docs/findings.md (one wanted)" in finding_kinds_doc.problems(text)
    generated = finding_kinds_doc.render()
    for words in ("**Drains a cluster node** (`drain.txt`): `corrupt`", '`dummy-link` ("dummy link trouble")',
                  "`dummy-link` (every pair of the GPU)"):
        assert words in generated
    assert "`rank-error`, `dummy-link`" in generated and "`counter-growth`, `dummy-link`" in generated
    row = "| `dummy-link` | warning | a made-up kind | `none` |\n"
    with_row = text.replace("| `gpu-lost` |", row + "| `gpu-lost` |", 1)
    with_row = with_row[:with_row.index(finding_kinds_doc.BEGIN)] + generated + \
        with_row[with_row.index(finding_kinds_doc.END) + len(finding_kinds_doc.END):]
    assert finding_kinds_doc.problems(with_row) == []


def _dummy_rule(facts):
    """The dummy kind's rule module: GPU 3 of any topology has the dummy trouble."""
    return [_finding(gpus=[3])] if facts.topology is not None else []


@pytest.fixture
def dummy_rule(dummy_kind, monkeypatch):
    from gputopo.report import rules

    monkeypatch.setattr(rules, "RULES", rules.RULES + (
        rules.Rule("dummy", ("topology",), ("dummy-link",), ("run", "scan"), "scan", _dummy_rule),))


def test_its_rule_registered_its_findings_reach_the_scan_place_and_a_runs_report(dummy_rule, tmp_path):
    from conftest_report import write_run
    from gputopo.report.placement import run_states
    from gputopo.report.rules import scan_findings
    from gputopo.report.summary import summarize_dir

    topo = seed_topology()
    states, _out = scan_states(topo, scan_findings(topo))  # `gputopo place` without a run
    assert {p for p, st in states.items() if st.state == "degraded"} == {p for p in states if 3 in p}
    summary = summarize_dir(write_run(tmp_path / "run"))
    assert [f.kind for f in summary.findings if f.kind == "dummy-link"] == ["dummy-link"]
    assert sorted(r.gpus for r in summary.pairs if any(f.kind == "dummy-link" for f in r.findings)) == \
        [(0, 3), (1, 3), (2, 3), (3, 4), (3, 5), (3, 6), (3, 7)]
    states, _out = run_states(summary.run.topology, summary)  # `gputopo place --run`
    assert states[(2, 3)].state == "degraded" and "GPU 3: dummy link trouble" in states[(2, 3)].reasons
