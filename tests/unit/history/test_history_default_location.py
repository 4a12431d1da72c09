"""Issue 33 item 8: with HOME read-only (CI runners, containers) and neither --history nor
GPUTOPO_HISTORY given, `gputopo scan` printed its whole table and then exited 2. Recording into
the default location is a side effect: one warning line and the command's own exit code. A
database the user named stays an input (exit 2, as tests/cli/test_cli_history.py asserts for
--history), and check's [history] rule skips (or, strict, fails) with the reason.

Tests run as root here, where a mode of 0o555 stops nothing: the unusable HOME is a path under a
regular file, which no user can create folders in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gputopo.cli.main import _register, cli

_register()


def invoke(args):
    return CliRunner().invoke(cli, args, catch_exceptions=False)


@pytest.fixture
def unusable_home(tmp_path, monkeypatch) -> Path:
    """HOME where nothing can be written, no GPUTOPO_HISTORY, no XDG_DATA_HOME."""
    (tmp_path / "a-file").write_text("x")
    home = tmp_path / "a-file" / "home"
    monkeypatch.delenv("GPUTOPO_HISTORY")
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(home))
    return home


def test_scan_with_a_default_database_that_cannot_be_opened_warns_once_and_exits_0(unusable_home):
    r = invoke(["scan", "--sim", "pcie-4gpu", "--json"])
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["gpus"]  # the scan itself, whole
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gputopo: warning: the scan above is complete;")
    assert str(unusable_home / ".local" / "share" / "gputopo" / "history.sqlite") in lines[0]
    assert "cannot open" in lines[0] and "--history PATH" in lines[0]


def test_xdg_data_home_is_a_default_location_too(tmp_path, monkeypatch):
    monkeypatch.delenv("GPUTOPO_HISTORY")
    db = tmp_path / "xdg" / "gputopo" / "history.sqlite"
    db.parent.mkdir(parents=True)
    db.write_bytes(b"garbage, not SQLite " * 200)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    r = invoke(["scan", "--sim", "pcie-4gpu"])
    assert r.exit_code == 0 and "warning" in r.stderr and "corrupt" in r.stderr


def test_a_database_named_in_gputopo_history_stays_an_input(unusable_home, monkeypatch):
    named = unusable_home / "h.sqlite"
    monkeypatch.setenv("GPUTOPO_HISTORY", str(named))
    r = invoke(["scan", "--sim", "pcie-4gpu", "--json"])
    assert r.exit_code == 2
    assert r.stderr.strip().startswith("gputopo: error: history database") and "cannot open" in r.stderr
    monkeypatch.delenv("GPUTOPO_HISTORY")
    assert invoke(["scan", "--sim", "pcie-4gpu", "--history", str(named)]).exit_code == 2


def test_checks_history_rule_says_why_it_has_no_baseline(unusable_home, tmp_path, monkeypatch):
    """check's [history] reading of a default database that cannot be read (in-process: the
    summary it judges is not what is tested here, and is never read past the database)."""
    import click

    import gputopo.recording as recording

    monkeypatch.setattr(recording, "record_from_summary", lambda *a, **k: (None, None))

    from gputopo.check.spec import parse_spec
    from gputopo.cli.history_hook import history_outcomes

    spec, strict = parse_spec({"history": {}}), parse_spec({"strict": True, "history": {}})
    with click.Context(cli):
        (o,) = history_outcomes(spec, summary=None)
        assert o.status == "skipped" and "no history database at" in o.message
    corrupt = tmp_path / "xdg" / "gputopo" / "history.sqlite"
    corrupt.parent.mkdir(parents=True)
    corrupt.write_bytes(b"garbage, not SQLite " * 200)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    with click.Context(cli):
        (o,) = history_outcomes(strict, summary=None)
        assert o.status == "failed" and "cannot be read" in o.message and "corrupt" in o.message
    monkeypatch.setenv("GPUTOPO_HISTORY", str(corrupt))  # named: an input, exit 2
    from gputopo.history.db import HistoryError

    with click.Context(cli), pytest.raises(HistoryError, match="corrupt"):
        history_outcomes(spec, summary=None)


@pytest.mark.slow
def test_bench_and_check_keep_their_exit_codes(unusable_home, tmp_path):
    from helpers.cli import gputopo

    env = {"GPUTOPO_HISTORY": None, "XDG_DATA_HOME": None, "HOME": str(unusable_home)}

    def run(*args):
        return gputopo(*args, env=env, timeout=300)

    out = tmp_path / "run"
    code, _o, err = run("bench", "--sim", "pcie-4gpu", "--pairs", "0,1", "--tests", "p2p",
                        "--quick", "--out", out)
    assert code == 0, err
    warned = [ln for ln in err.splitlines() if "not recorded in the default history database" in ln]
    assert len(warned) == 1 and str(out) in warned[0] and "Traceback" not in err
    spec = tmp_path / "spec.toml"
    spec.write_text("[history]\nbaseline_fraction = 0.8\n")
    code, so, err = run("check", "--spec", spec, out, "--json")
    verdict = json.loads(so)
    assert code == 0 and verdict["passed"], (so, err)
    (rule,) = [o for o in verdict["outcomes"] if o["rule"] == "history.baseline_fraction"]
    assert rule["status"] == "skipped" and "no history database at" in rule["message"]
    spec.write_text("strict = true\n[history]\nbaseline_fraction = 0.8\n")
    code, so, _e = run("check", "--spec", spec, out, "--json")
    assert code == 1 and not json.loads(so)["passed"]
