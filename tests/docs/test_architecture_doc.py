"""docs/architecture.md against the code (tests/helpers/architecture_doc.py): its table of rules is
the registry (gputopo/report/rules.py) as it is, and its code map names every module of gputopo/."""

from __future__ import annotations

from helpers import architecture_doc


def _page() -> str:
    return architecture_doc.PAGE.read_text(encoding="utf-8")


def test_the_table_of_rules_is_the_registry():
    assert architecture_doc.rule_problems(_page()) == []


def test_the_check_sees_a_rule_the_page_does_not_list(monkeypatch):
    from gputopo.report import rules

    extra = rules.Rule("made-up", ("topology",), ("thermal",), ("scan",), "scan", lambda facts: [])
    monkeypatch.setattr(rules, "RULES", rules.RULES + (extra,))
    assert architecture_doc.rule_problems(_page()) != []


def test_the_code_map_names_every_module():
    assert architecture_doc.unnamed_modules(_page()) == [], "name these modules in docs/architecture.md's Code map"


def test_the_code_map_check_sees_a_module_it_does_not_name():
    page = _page()
    assert architecture_doc.unnamed_modules(page.replace("`finding_kinds`", "`the kind table`")) == \
        ["model/finding_kinds.py"]
