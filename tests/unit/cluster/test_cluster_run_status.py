"""Every ending of a cluster run leaves run.json with a final status, as a bench run's does.

A cluster run writes run.json "running" at its start. Its results (cluster.json, drain.txt,
events.jsonl) are written at the end, then its report (report.md, heatmap_nodes.png through
writable.write_file_bytes). A report that could not be written (a FIFO without a reader where
the heatmap goes, a folder there) was a one-line refusal, but run.json stayed "running" forever;
so did an internal error or a Ctrl-C / SIGTERM in the rounds. Now: the run's own status with
``report_error`` once its results are on disk, else "failed" with ``error`` (an exception) or
"interrupted" (Ctrl-C, SIGTERM). All in this process on the sim cluster (modeled time)."""

from __future__ import annotations

import json
import os
import signal

import pytest
from helpers.cli import gputopo_here
from helpers.threads import call_within

from gputopo.cluster import job
from gputopo.cluster.job import ClusterOptions, run_sim_cluster
from gputopo.runfolder.cluster import ClusterRunFolder
from gputopo.sim.cluster_description import parse_cluster

CLUSTER = '[cluster]\nnodes = 4\nnode = "pcie-4gpu"\n[[cluster.fault]]\nwhere = "node:1"\nwhat = "slow"\nfactor = 0.3\n'


def _run_json(run_dir):
    return json.loads((run_dir / "run.json").read_text())


def _with_in_the_way(monkeypatch, make):
    """Put something where the heatmap goes once the results are written (before the report)."""
    results = ClusterRunFolder.results

    def results_then(self, doc, findings, drain):
        results(self, doc, findings, drain)
        make(self.dir / "heatmap_nodes.png")

    monkeypatch.setattr(ClusterRunFolder, "results", results_then)


def _cli(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text(CLUSTER)
    out = tmp_path / "run"
    ran = call_within(lambda: gputopo_here("cluster", "--sim", f, "--out", out, "--no-history"), 60,
                      "the cluster run waited on the heatmap's FIFO without bound")
    return ran, out


@pytest.mark.parametrize("what", ["fifo", "folder"])
def test_a_refused_heatmap_leaves_run_json_final_with_the_report_error(what, tmp_path, monkeypatch):
    """Before: run.json stayed "running" (a run that looks alive forever)."""
    _with_in_the_way(monkeypatch, os.mkfifo if what == "fifo" else os.mkdir)
    ran, out = _cli(tmp_path)
    assert ran.returncode == 2 and "Traceback" not in ran.stderr
    assert len(ran.stderr.strip().splitlines()) == 1 and "heatmap_nodes.png" in ran.stderr
    info = _run_json(out)
    assert info["status"] == "complete" and info["finished"] and info["rounds_inter"] == 2
    assert "heatmap_nodes.png" in info["report_error"]
    assert (out / "cluster.json").exists() and (out / "drain.txt").read_text().startswith("node0001 ")
    if what == "fifo":
        assert "FIFO that no process reads" in info["report_error"]


def test_an_internal_error_in_the_rounds_fails_the_run(tmp_path, monkeypatch):
    def broken(*a, **kw):
        raise RuntimeError("a bug in the rounds")

    monkeypatch.setattr(job, "run_rounds", broken)
    ran, out = _cli(tmp_path)
    assert ran.returncode == 4 and "internal error: RuntimeError: a bug in the rounds" in ran.stderr
    info = _run_json(out)
    assert info["status"] == "failed" and info["error"] == "RuntimeError: a bug in the rounds"
    assert str(out) in ran.stderr  # the traceback saved in the run folder (errors_belong_to)


def _cluster():
    return parse_cluster(CLUSTER, "<test>")


def test_ctrl_c_in_the_rounds_interrupts_the_run(tmp_path, monkeypatch):
    def ctrl_c(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(job, "run_rounds", ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        run_sim_cluster(_cluster(), ClusterOptions(out_dir=str(tmp_path / "run")))
    info = _run_json(tmp_path / "run")
    assert info["status"] == "interrupted" and info["error"] == "interrupted (Ctrl-C or SIGTERM)"


def test_sigterm_in_the_rounds_interrupts_the_run(tmp_path, monkeypatch):
    """SIGTERM to this process, with the handler the CLI installs (cli.main: as Ctrl-C)."""
    from gputopo.cli.main import _terminate_as_interrupt

    def killed(*a, **kw):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("SIGTERM did not stop the run")

    monkeypatch.setattr(job, "run_rounds", killed)
    before = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        _terminate_as_interrupt()
        assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN)  # never kill pytest
        with pytest.raises(KeyboardInterrupt):
            run_sim_cluster(_cluster(), ClusterOptions(out_dir=str(tmp_path / "run")))
    finally:
        signal.signal(signal.SIGTERM, before)
    assert _run_json(tmp_path / "run")["status"] == "interrupted"


def test_a_run_that_ends_well_is_complete_without_an_error(tmp_path):
    res = run_sim_cluster(_cluster(), ClusterOptions(out_dir=str(tmp_path / "run")))
    info = _run_json(res.run_dir)
    assert info["status"] == "complete" and "error" not in info and "report_error" not in info
    assert (res.run_dir / "heatmap_nodes.png").read_bytes().startswith(b"\x89PNG")
