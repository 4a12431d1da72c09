"""The one table of finding kinds (gputopo/model/finding_kinds.py): the vocabulary is its names in
its order, and no other module keeps a list of kinds of its own (which pairs a kind marks, whether
it degrades or breaks a placement, drains a node, is data trouble, enters the history, is a culprit
or a symptom): a kind's properties live in its table entry, so adding a kind is one entry there."""

from __future__ import annotations

import ast

import pytest

from gputopo.model import finding_kinds
from gputopo.model.finding import KINDS, Finding
from gputopo.model.finding_kinds import KIND_TABLE, KindSpec, kind_names
from gputopo.report.rules import RULES
from helpers.paths import REPO

PACKAGE = REPO / "gputopo"
#: Other vocabularies that share words with the finding kinds: facts, not findings. The sim's
#: fault kinds (``hang``, ``crash``, ``corrupt``, ``nan`` injected into a simulated machine), a
#: bench step's failure (model/step_failure.py) and a numerics way's verdict labels. Every other
#: module of the package, present or future, is searched.
OTHER_VOCABULARY = {PACKAGE / "model" / "finding_kinds.py", PACKAGE / "model" / "step_failure.py",
                    PACKAGE / "numerics" / "verdict.py", PACKAGE / "bench" / "fabrics" / "sim.py",
                    PACKAGE / "cluster" / "sim_backend.py"}
OTHER_VOCABULARY_FOLDERS = (PACKAGE / "sim",)
#: How a kind reads in a sentence: a view's words, not a property of the kind.
MESSAGE_WORDS = {("report/why/culprits.py", "KIND_WORDS"), ("report/outputs/story.py", "KIND_WORDS"),
                 ("report/outputs/story.py", "VERDICT_WORDS")}


def test_the_vocabulary_is_the_tables_names_in_its_order():
    assert KINDS == kind_names()
    assert len(set(KINDS)) == len(KINDS)
    assert all(isinstance(k, KindSpec) for k in KIND_TABLE)


def test_an_entry_with_an_unknown_property_value_is_refused():
    with pytest.raises(ValueError, match="unknown scope"):
        KindSpec("x", "rack", "scan", ("error",))
    with pytest.raises(ValueError, match="unknown pair marks"):
        KindSpec("x", "gpu", "scan", ("error",), marks_pairs="some")
    with pytest.raises(ValueError, match="peer_only words without breaks"):
        KindSpec("x", "pair", "bandwidth", ("error",), peer_only="why")


def _kind_collections(path):
    """(line, name, kinds) for every tuple, list or set literal in ``path`` that holds two or more
    finding kinds and nothing but strings that are kinds, and every such dict assigned to a name
    (its keys; a dict written inline is a message's words for the kind at hand)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name) and node.value is not None:
                    names[id(node.value)] = t.id
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            elts = node.elts
        elif isinstance(node, ast.Dict) and id(node) in names:
            elts = [k for k in node.keys if k is not None]
        else:
            continue
        strings = [e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if len(strings) >= 2 and len(strings) == len(elts) and all(s in KINDS for s in strings):
            out.append((node.lineno, names.get(id(node), ""), strings))
    return out


def test_no_module_but_the_table_keeps_a_list_of_finding_kinds():
    found = []
    paths = sorted(p for p in PACKAGE.rglob("*.py") if p not in OTHER_VOCABULARY
                   and not any(top in p.parents for top in OTHER_VOCABULARY_FOLDERS))
    assert len(paths) > 200
    makes = {tuple(r.makes) for r in RULES}
    for path in paths:
        rel = path.relative_to(PACKAGE).as_posix()
        for line, name, kinds in _kind_collections(path):
            if rel == "report/rules.py" and tuple(kinds) in makes:
                continue  # what a registered rule makes: the rule's declaration, not the kinds' property
            if (rel, name) not in MESSAGE_WORDS:
                found.append(f"gputopo/{rel}:{line} {name or '(inline)'} {kinds}")
    assert not found, ("finding kind properties outside gputopo/model/finding_kinds.py (make them a "
                       "field of the kinds' entries):\n" + "\n".join(found))


def test_the_house_rule_sees_a_list_of_kinds(tmp_path):
    p = tmp_path / "m.py"
    p.write_text('DRAINS = ("hang", "crash")\nok = ("hang", "x")\nif k in ["nan", "diverged"]: pass\n'
                 'WORDS = {"hang": "hung", "crash": "crashed"}\nw = {"hang": "hung", "crash": "x"}.get(k)\n')
    assert sorted((line, name) for line, name, _ in _kind_collections(p)) == [(1, "DRAINS"), (3, ""), (4, "WORDS")]


def test_a_finding_of_a_kind_not_in_the_table_is_refused(monkeypatch):
    with pytest.raises(ValueError, match="unknown finding kind"):
        Finding("made-up", "error", "x")
    monkeypatch.setattr(finding_kinds, "KIND_TABLE",
                        KIND_TABLE + (KindSpec("made-up", "gpu", "scan", ("error",)),))
    assert Finding("made-up", "error", "x").sort_key[1] == len(KIND_TABLE)
