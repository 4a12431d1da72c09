"""docs/findings.md agrees with the one table of finding kinds (gputopo/model/finding_kinds.py):
one row per kind under its family's heading, naming the severities of its policy, and the
generated "Kind properties" list as the table gives it (tests/helpers/finding_kinds_doc.py)."""

from __future__ import annotations

from helpers import finding_kinds_doc


def test_findings_page_agrees_with_the_kind_table():
    assert finding_kinds_doc.problems(finding_kinds_doc.PAGE.read_text(encoding="utf-8")) == []


def test_the_check_sees_a_row_under_another_family_and_a_wrong_severity():
    text = finding_kinds_doc.PAGE.read_text(encoding="utf-8")
    moved = text.replace("| `drift` | warning |", "| `drift` | error |")
    assert any("drift: docs/findings.md's severities ['error']" in p for p in finding_kinds_doc.problems(moved))
    row = next(line for line in text.splitlines() if line.startswith("| `nic-errors` |"))
    elsewhere = text.replace(row + "\n", "").replace("| `drift` |", row + "\n| `drift` |")
    assert any(p.startswith("nic-errors: documented under \"Against the machine's own history\"")
               for p in finding_kinds_doc.problems(elsewhere))
