"""Every real posted output under tests/fixtures/ gets the verdict recorded in
tests/fixtures/verdicts.json: exit code, verdict, findings' kinds and severities (or scan's and
nccl-debug's problems), a refusal's line.

A change of what gputopo says of any posted output fails here; rewrite the table with
`python tests/helpers/fixture_verdicts.py --write` once the change is meant, and the diff of
verdicts.json says what changed. tests/fixtures/verdicts_before.json is the table as it was
before issue 46, and tests/e2e/test_verdict_changes.py checks that only the verdicts
tests/fixtures/verdict_changes.csv lists moved since.
"""

from __future__ import annotations

import json

import pytest

from helpers import fixture_verdicts as fv

TABLE = json.loads(fv.TABLE.read_text())


def test_every_fixture_is_in_the_table():
    files = {str(p.relative_to(fv.FIXTURES)) for p in fv.fixture_files()}
    assert files == set(TABLE), "run tests/helpers/fixture_verdicts.py --write"


@pytest.mark.parametrize("name", sorted(TABLE))
def test_fixture_verdict_is_as_recorded(name):
    assert fv.row(fv.FIXTURES / name) == TABLE[name]
