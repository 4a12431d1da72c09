"""`gputopo history`, the recording hook of every command and its bad-input paths, as a user
runs them: a series of simulated machine descriptions whose clock and counters change from
day to day stands for a machine scanned once a day (issue 19)."""

from __future__ import annotations

import json
import os
import re
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from gputopo.cli.main import _register, cli

_register()

from helpers.cli import gputopo, gputopo_here  # noqa: E402
from history_box import day  # noqa: E402
from helpers.paths import FIXTURES


def invoke(args):
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def test_daily_scans_show_counter_growth_then_an_error_when_the_rate_keeps_rising(tmp_path):
    errs = []
    for n, recovery in enumerate([0, 3, 9, 30, 90], start=1):
        r = invoke(["scan", "--sim", day(tmp_path, n, recovery), "--json"])
        assert r.exit_code == 0, r.stderr
        json.loads(r.stdout)  # stdout stays the JSON document; history lines go to stderr
        errs.append(r.stderr)
    assert "counter-growth" not in errs[0]
    assert "WARNING counter-growth: GPU 2 NVLink 1: nvlink_recovery grew by 3 (0 -> 3)" in errs[1]
    assert "3.0/day" in errs[1]
    assert "WARNING counter-growth" in errs[2] and "6.0/day" in errs[2]
    assert "ERROR counter-growth" in errs[3] and "(3.0/day, 6.0/day, 21.0/day)" in errs[3]
    assert "since 2026-11-02 08:00 UTC" in errs[4]

    r = invoke(["history", "--json"])
    doc = json.loads(r.stdout)
    runs = doc["runs"]
    assert [x["command"] for x in runs] == ["scan"] * 5
    assert all(x["simulated"] and x["time_source"] == "sim-clock" for x in runs)
    assert runs[0]["time_s"] > runs[-1]["time_s"]  # newest first
    growth = [f for f in runs[0]["findings"] if f["kind"] == "counter-growth"]
    assert growth[0]["severity"] == "error" and growth[0]["origin"] == "history"

    text = invoke(["history"]).stdout
    assert "SIMULATED lab-box" in text and "ERROR counter-growth" in text
    assert len(json.loads(invoke(["history", "--since", "2026-11-04", "--json"]).stdout)["runs"]) == 2
    assert json.loads(invoke(["history", "--machine", "nope", "--json"]).stdout)["runs"] == []


def test_no_history_records_nothing(tmp_path):
    db = tmp_path / "h.sqlite"
    r = invoke(["scan", "--sim", "pcie-4gpu", "--history", str(db), "--no-history"])
    assert r.exit_code == 0 and not db.exists()


def test_history_option_and_default_location(tmp_path, monkeypatch):
    db = tmp_path / "chosen.sqlite"
    assert invoke(["scan", "--sim", "pcie-4gpu", "--history", str(db)]).exit_code == 0
    assert db.exists()
    monkeypatch.delenv("GPUTOPO_HISTORY")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert invoke(["scan", "--sim", "pcie-4gpu"]).exit_code == 0
    assert (tmp_path / "xdg" / "gputopo" / "history.sqlite").exists()


@pytest.mark.parametrize("make", ["corrupt", "newer", "not-writable"])
def test_a_bad_database_is_one_line_and_exit_2_after_the_scan(tmp_path, make):
    db = tmp_path / "h.sqlite"
    if make == "corrupt":
        db.write_bytes(b"garbage, not SQLite " * 200)
    elif make == "newer":
        assert invoke(["scan", "--sim", "pcie-4gpu", "--history", str(db)]).exit_code == 0
        c = sqlite3.connect(db)
        c.execute("UPDATE schema_version SET version = 99")
        c.commit()
        c.close()
    else:
        (tmp_path / "a-file").write_text("x")
        db = tmp_path / "a-file" / "h.sqlite"
    code, out, err = gputopo_here("scan", "--sim", "pcie-4gpu", "--json", "--history", str(db))
    assert code == 2
    assert json.loads(out)["gpus"]  # the scan itself completed and printed
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gputopo: error: history database")
    assert {"corrupt": "corrupt", "newer": "newer", "not-writable": "cannot open"}[make] in lines[0]
    assert "Traceback" not in err


def test_history_without_a_database_and_bad_options(tmp_path):
    code, _out, err = gputopo_here("history", "--history", str(tmp_path / "none.sqlite"))
    assert code == 2 and "no such file" in err and len(err.strip().splitlines()) == 1
    for args, words in ((["--pair", "3,3"], "two different"), (["--since", "yesterday"], "--since"),
                        (["--class", "FOO"], "link class"), (["--plot", "x.png"], "--pair")):
        code, _out, err = gputopo_here("history", *args)
        assert code == 2 and words in err, (args, err)


@pytest.mark.slow
def test_bench_drift_plot_check_and_a_kept_folder_when_the_database_is_bad(tmp_path):
    """Three good days, then pair 2,3 at 60 %: still above the link-rate thresholds, but a drift
    against this machine's own baseline; check's [history] rule fails it; the plot marks it."""
    runs = []
    for n in (1, 2, 3, 4):
        out = tmp_path / f"run{n}"
        code, _o, err = gputopo("bench", "--sim", day(tmp_path, n, 0, slow=0.6 if n == 4 else 0.0),
                                "--pairs", "2,3", "--tests", "p2p", "--quick", "--out", str(out), timeout=300)
        assert code == 0, err
        runs.append((out, err))
    assert all("WARNING drift" not in err for _o, err in runs[:3])  # (the folder path may say "drift")
    drift = [ln for ln in runs[3][1].splitlines() if "WARNING drift" in ln]
    assert drift and all("GPUs 2,3 (NV4)" in ln for ln in drift)
    assert any("p2p.copy 2->3" in ln and re.search(r"is 60\.\d% of this machine's baseline", ln) for ln in drift)

    spec = tmp_path / "spec.toml"
    spec.write_text("[history]\nbaseline_fraction = 0.8\nruns = 5\n")
    code, out, _e = gputopo("check", "--spec", str(spec), str(runs[3][0]), "--json", timeout=300)
    verdict = json.loads(out)
    assert code == 1 and not verdict["passed"]
    failed = [o for o in verdict["failures"] if o["rule"] == "history.baseline_fraction"]
    assert failed and all(o["gpus"] == [2, 3] for o in failed)
    code, out, _e = gputopo("check", "--spec", str(spec), str(runs[2][0]), "--json", timeout=300)
    assert code == 0, out  # day 3 against days 1-2: fine

    plot = tmp_path / "pair23.png"
    code, out, err = gputopo("history", "--pair", "2,3", "--plot", str(plot), timeout=300)
    assert code == 0, err
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "p2p.copy 2->3 on 2,3 (NV4)" in out
    counts = json.loads(gputopo("history", "--json", timeout=300)[1])["runs"]
    assert len(counts) == 6  # 4 benches + 2 checks of folders already recorded
    db = Path(os.environ["GPUTOPO_HISTORY"])
    c = sqlite3.connect(db)
    per_dir = c.execute("SELECT run_dir, count(DISTINCT f.run_id) FROM runs r JOIN figures f "
                        "ON f.run_id = r.id GROUP BY run_dir").fetchall()
    assert len(per_dir) == 4 and all(n == 1 for _d, n in per_dir)  # no folder's figures twice

    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"not a database " * 300)
    out5 = tmp_path / "run5"
    code, _o, err = gputopo("bench", "--sim", day(tmp_path, 5, 0), "--pairs", "2,3", "--tests", "p2p",
                            "--quick", "--out", str(out5), "--history", str(bad), timeout=300)
    assert code == 2 and "corrupt" in err and str(out5) in err
    assert (out5 / "summary.json").exists() and json.loads((out5 / "run.json").read_text())["status"] == "complete"


def test_a_bad_clock_in_a_description_names_the_key(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('extends = "pcie-4gpu"\nclock = "yesterday"\n')
    code, _out, err = gputopo_here("scan", "--sim", str(bad))
    assert code == 2 and "clock" in err and len(err.strip().splitlines()) == 1


def test_check_history_rule_is_skipped_without_a_baseline_and_fails_when_strict(tmp_path):
    from gputopo.check.history_rule import drift_outcomes
    from gputopo.check.spec import parse_spec

    spec = parse_spec({"history": {"baseline_fraction": 0.9}})
    assert spec.history_fraction == 0.9 and spec.history_runs == 5
    (o,) = drift_outcomes(spec, [], 0)
    assert o.status == "skipped" and "no baseline" in o.message
    strict = parse_spec({"strict": True, "history": {}})
    assert strict.history_fraction == 0.8
    assert drift_outcomes(strict, [], 0)[0].status == "failed"
    from gputopo.errors import InputFileError

    with pytest.raises(InputFileError, match="history.baseline_fraction"):
        parse_spec({"history": {"baseline_fraction": 2}})
    with pytest.raises(InputFileError, match="history"):
        parse_spec({"history": {"fraction": 0.8}})


def test_tests_never_use_the_real_history_database():
    from gputopo.history.db import default_history_path

    home_db = Path.home() / ".local" / "share" / "gputopo" / "history.sqlite"
    assert default_history_path() != home_db and not str(default_history_path()).startswith(str(Path.home() / ".local"))


def test_an_imported_nccl_tests_log_is_recorded_with_its_figures(tmp_path, fixtures_dir):
    db = tmp_path / "h.sqlite"
    log = fixtures_dir / "nccl-tests" / "autodl_2x2080ti_all_reduce.txt"
    code, _out, err = gputopo_here("import", "nccl-tests", str(log), "--out", str(tmp_path / "imported"),
                                   "--history", str(db))
    assert code == 0, err
    c = sqlite3.connect(db)
    (command, simulated, run_dir), = c.execute("SELECT command, simulated, run_dir FROM runs").fetchall()
    assert command == "import" and simulated == 0 and run_dir.endswith("imported")
    series = {s for (s,) in c.execute("SELECT DISTINCT series FROM figures")}
    assert any(s.startswith("collective.all_reduce") for s in series)
    assert c.execute("SELECT count(*) FROM figures WHERE headline = 1").fetchone()[0] >= 1




@pytest.mark.parametrize("kind, path", [
    ("nvbandwidth", "nvbandwidth/nvbandwidth-42_1xa100_h2d_sm_v0.8.txt"),
    ("p2pbw", "p2pbw/stelline_asus-esc8000a_4xrtx6000ada.txt"),
    ("kernel-log", "xid/bumblebee-677_xid32_xid31.txt"),
])
def test_every_import_is_recorded_and_no_history_skips_it(tmp_path, kind, path):
    db = tmp_path / "h.sqlite"
    r = invoke(["import", kind, str(FIXTURES / path), "--out", str(tmp_path / "a"), "--history", str(db)])
    assert r.exit_code == 0, r.stderr
    r = invoke(["import", kind, str(FIXTURES / path), "--out", str(tmp_path / "b"), "--history", str(db),
                "--no-history"])
    assert r.exit_code == 0, r.stderr  # --no-history: this one is not recorded
    runs = json.loads(invoke(["history", "--history", str(db), "--json"]).stdout)
    runs = runs["runs"] if isinstance(runs, dict) else runs
    assert [r["command"] for r in runs] == ["import"]
    assert str(tmp_path / "a") in json.dumps(runs)


@pytest.mark.parametrize("name", ["plot", "plot.json"])
def test_plot_needs_a_name_whose_ending_gives_its_format(tmp_path, name):
    """--plot NAME wrote NAME.png (so `--plot /dev/full` made /dev/full.png) and `--plot x.json`
    was an internal error: the format comes from the name's ending, so a name without one of
    matplotlib's endings is refused before anything is read."""
    env = dict(os.environ, GPUTOPO_HISTORY=str(tmp_path / "h.sqlite"))
    code, out, err = gputopo_here("history", "--pair", "0,1", "--plot", str(tmp_path / name), env=env)
    assert code == 2 and out == "", err
    assert err.strip().splitlines() == [f"gputopo: error: --plot {tmp_path / name}: give a file name ending in "
                                        ".png, .svg, .pdf (the plot's format comes from it)"]
    assert list(tmp_path.iterdir()) == []


def test_a_limit_beyond_any_database_is_refused_not_an_internal_error(tmp_path):
    """--limit 99999999999999999999999 reached SQLite and ended in rc 4 (datatype mismatch)."""
    env = dict(os.environ, GPUTOPO_HISTORY=str(tmp_path / "h.sqlite"))
    code, out, err = gputopo_here("history", "--limit", "9" * 23, env=env)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "--limit" in err, err


def test_plot_into_a_folder_that_does_not_exist_yet_makes_it(tmp_path):
    """--plot new/deeper/p.png was rc 4 (FileNotFoundError from matplotlib): like --out and
    --junit, the folders are made."""
    env = dict(os.environ, GPUTOPO_HISTORY=str(tmp_path / "h.sqlite"))
    assert gputopo_here("scan", "--sim", "seed-8gpu", env=env)[0] == 0
    plot = tmp_path / "new" / "deeper" / "p.png"
    code, out, err = gputopo_here("history", "--pair", "0,1", "--plot", str(plot), env=env)
    assert code == 0 and "Traceback" not in err and "internal error" not in err, err
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("where, says", [("folder", "is a folder, not a file"),
                                         ("/dev/full", "is a character device, not a regular file")])
def test_a_history_database_that_is_not_a_file_says_what_it_is(tmp_path, where, says):
    """SQLite's words were "unable to open database file" for a folder and "cannot rollback - no
    transaction is active" for /dev/full (the sweep)."""
    db = tmp_path if where == "folder" else where
    env = dict(os.environ, GPUTOPO_HISTORY=str(db))
    code, _out, err = gputopo_here("scan", "--sim", "seed-8gpu", env=env)
    assert code == 2 and err.strip().splitlines() == [
        f"gputopo: error: history database {db}: {says}; choose another with --history PATH or skip it "
        "with --no-history (the scan above is complete; not recorded)"], err
