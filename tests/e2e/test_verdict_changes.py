"""Every verdict gputopo gives a real posted output moved only as tests/fixtures/verdict_changes.csv
says (issue 46's "Done when"), and no `ok` stands where nothing was judged.

tests/fixtures/verdicts_before.json is the table before issue 46; verdicts.json is today's
(tests/e2e/test_fixture_verdicts.py checks it against the code). The csv lists each verdict that
moved (file, old verdict, new verdict, the line of the post or thread that justifies it); the
findings may change freely, the exit code and the verdict only as listed. Rows marked ``healthy``
(the post or thread says the machine was) are never ``degraded`` or ``broken``. A fixture added
after issue 46 has, in verdicts_before.json, the row the code before it gave (a refusal included);
a row without a verdict is ``refused`` (exit 2) or ``scanned`` (scan read it) in the csv.
"""

from __future__ import annotations

import csv
import json

from helpers import fixture_verdicts as fv

BEFORE = json.loads(fv.BEFORE.read_text())
AFTER = json.loads(fv.TABLE.read_text())
with fv.CHANGES.open(newline="", encoding="utf-8") as _f:
    CHANGES = list(csv.DictReader(_f))


def _state(row) -> str:
    """A row's verdict; a row without one (scan's rows, a refusal) is ``refused`` where the command
    exited 2 and ``scanned`` where it read the file (scan's problems then say what it found)."""
    if row.get("verdict"):
        return row["verdict"]
    return "refused" if row.get("rc") == 2 else "scanned" if row.get("rc") == 0 else f"rc {row.get('rc')}"


def _verdict(row):
    return _state(row), row.get("rc")


def test_the_change_list_is_well_formed():
    assert CHANGES and all(set(c) == {"file", "old", "new", "justification"} for c in CHANGES)
    files = [c["file"] for c in CHANGES]
    assert len(files) == len(set(files)), "a file listed twice"
    for c in CHANGES:
        assert c["file"] in BEFORE and c["file"] in AFTER, c["file"]
        assert _state(BEFORE[c["file"]]) == c["old"], f"{c['file']}: the old verdict is not {c['old']}"
        assert c["old"] != c["new"] and len(c["justification"]) > 20


def test_verdicts_are_the_previous_ones_with_exactly_the_listed_changes():
    assert set(AFTER) == set(BEFORE), "a fixture added or removed: give it its row in verdicts_before.json too"
    new = {c["file"]: c["new"] for c in CHANGES}
    wrong = []
    for name, before in BEFORE.items():
        if name in new:  # a listed change: the verdict as listed (a refusal's exit code moves with it)
            ok = _state(AFTER[name]) == new[name] and (
                AFTER[name].get("rc") == before.get("rc") or "refused" in (new[name], _state(before)))
        else:
            ok = _verdict(AFTER[name]) == _verdict(before)
        if not ok:
            wrong.append(f"{name}: {_verdict(before)} -> {_verdict(AFTER[name])}, listed {new.get(name)}")
    assert not wrong, "verdicts moved that verdict_changes.csv does not list:\n" + "\n".join(wrong)


def test_healthy_rows_are_marked_in_both_tables_and_never_a_fault():
    marked = [n for n, r in AFTER.items() if r.get("healthy")]
    assert marked == fv.healthy() and len(marked) >= 5
    assert not [n for n in marked if AFTER[n].get("verdict") in ("degraded", "broken")]


def test_no_ok_where_nothing_was_judged():
    """Over every file in tests/fixtures: an `ok` names what it judged (summary.json's judged
    counts; an NCCL_DEBUG log's connection lines its rules judged)."""
    unjudged = []
    for name, r in AFTER.items():
        if r.get("verdict") != "ok":
            continue
        j = r.get("judged") or {}
        if not ((j.get("series_judged") or 0) + (j.get("facts_judged") or 0)):
            unjudged.append(name)
    assert not unjudged, f"ok with nothing judged: {unjudged}"
    assert sum(1 for r in AFTER.values() if r.get("verdict") == "not-judged") >= 10
